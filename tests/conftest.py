"""What every test shares: the environment its process starts with, and the C API fixtures."""
import os

import pytest

# Tests that compare with XLA use JAX's own cpu backend in this process; the
# plugin itself is exercised in subprocesses that choose their platforms.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Compile numba kernels before a program loads, so the tests that check the
# compiled loops run them (interpreter/optimiser/background.py; its own tests turn
# the background thread on).
os.environ.setdefault("PJRT_REF_JIT_BACKGROUND", "0")
# Where the background thread is on, a loop's kernel is queued at its first
# run (tests of the hot threshold set their own).
os.environ.setdefault("PJRT_REF_JIT_HOT_SECONDS", "0")


# ------------------------------------------------------------------ the C API, in process
# One plugin table and one client per test module. Imported inside the
# fixtures: tests that never call the C API then never load the shim.
@pytest.fixture(scope="module")
def api():
    """The plugin's function table, called as a C host does (tests/support/capi_calls.py)."""
    from tests.support.capi_calls import Api
    return Api()


@pytest.fixture(scope="module")
def client(api):
    """A client with the default options, destroyed after the module's last test."""
    client = api.client()
    yield client
    api.call("PJRT_Client_Destroy", client=client)
