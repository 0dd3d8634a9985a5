"""Helpers the tests import (no tests here): `from tests.support.capi_calls import Api`."""
