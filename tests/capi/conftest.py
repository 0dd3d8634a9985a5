"""The C-API tests' shared fixtures: one plugin table and one client per test module."""
from __future__ import annotations

import pytest

from tests.support.capi_calls import Api


@pytest.fixture(scope="module")
def api():
    """The plugin's function table, called as a C host does (capi_calls.Api)."""
    return Api()


@pytest.fixture(scope="module")
def client(api):
    return api.client()
