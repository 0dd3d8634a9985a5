"""GetPjrtApi and the entry points work whether or not the calling thread holds the GIL.

Hosts differ (docs/architecture.md, "The GIL, and a Python of its own"): JAX releases the
GIL before calling a plugin, PyTorch/XLA calls GetPjrtApi from a pybind11
function holding it, a C host has no Python (tests/capi/test_c_host.py). Here
ctypes plays both Python hosts: `ctypes.PyDLL` and `ctypes.PYFUNCTYPE` keep
the GIL during the call, `ctypes.CDLL` and `ctypes.CFUNCTYPE` release it.

Each case runs in a fresh interpreter (the first GetPjrtApi boots the
plugin), under a timeout, since the failure this guards against is a hang:
cffi's embedding start-up spun forever on Python 3.11 once any capsule's
attribute had been looked up (capi_shim/python_boot.c says why), so each
child does that first.
"""
from __future__ import annotations

import re
import sys

import pytest

from tests.support.jax_support import run_python
from tests.support.repo_paths import REPO

# The child imports the test helpers as a package (tests.support), from the repository root.
CHILD_PATH = str(REPO)

CHILD = r"""
import ctypes, datetime, sys, threading
import numpy as np
import pjrt_ref

HOLD_GIL = {hold_gil}
try:                       # gives PyCapsule_Type a version tag, as pybind11 and numpy do
    datetime.datetime_CAPI.no_such_attribute
except AttributeError:
    pass

def get_pjrt_api(loader):
    library = loader(pjrt_ref.shim_path())   # the shim in this Python (PJRT_REF_RUNTIME=shared)
    library.GetPjrtApi.restype = ctypes.c_void_p
    return library.GetPjrtApi()

# Boot under contention: threads without the GIL and this thread in the GIL state under test.
start = threading.Barrier(4)
seen = []
def from_a_thread():
    start.wait()
    seen.append(get_pjrt_api(ctypes.CDLL))
threads = [threading.Thread(target=from_a_thread) for _ in range(3)]
for thread in threads:
    thread.start()
start.wait()
seen.append(get_pjrt_api(ctypes.PyDLL if HOLD_GIL else ctypes.CDLL))
for thread in threads:
    thread.join()
assert len(seen) == 4 and len(set(seen)) == 1 and seen[0], seen

from tests.support.capi_calls import Api, ffi
from tests.support.multi_device_calls import (TWO_REPLICAS, addressable_devices, buffer_on,
                                              client_with_devices, execute_on_devices)

class CtypesApi(Api):
    # Every slot called through ctypes: PYFUNCTYPE keeps the GIL, CFUNCTYPE releases it.
    def raw(self, name, args):
        slot = getattr(self.api, name)
        returns_void = ffi.typeof(slot).result.kind == "void"
        prototype = (ctypes.PYFUNCTYPE if HOLD_GIL else ctypes.CFUNCTYPE)(
            None if returns_void else ctypes.c_void_p, ctypes.c_void_p)
        error = prototype(int(ffi.cast("uintptr_t", slot)))(int(ffi.cast("uintptr_t", args)))
        return ffi.cast("PJRT_Error*", error or 0)

api = CtypesApi()
assert int(ffi.cast("uintptr_t", api.api)) == seen[0]
client = client_with_devices(api, 2)
platform = api.call("PJRT_Client_PlatformName", client=client)
assert ffi.string(platform.platform_name, platform.platform_name_size) == b"pjrt_ref"
# Two replicas meet at an all_reduce: one helper thread per device, which need the GIL.
devices = addressable_devices(api, client)
loaded = api.compile(client, TWO_REPLICAS)
inputs = [np.array([1, 2, 3], np.int32), np.array([10, 20, 30], np.int32)]
rows = [[buffer_on(api, client, x, device)] for x, device in zip(inputs, devices)]
for d, (total, replica) in enumerate(execute_on_devices(api, loaded, rows, 2)):
    np.testing.assert_array_equal(api.to_host(total, np.int32, (3,)), np.sum(inputs, axis=0))
    assert api.to_host(replica, np.uint32, ()) == d
api.call("PJRT_Client_Destroy", client=client)
print("ok")
"""


@pytest.mark.parametrize("hold_gil", [True, False], ids=["gil-held-PyDLL", "gil-released-CDLL"])
def test_get_pjrt_api_and_entry_points_in_either_gil_state(hold_gil):
    proc = run_python(CHILD.format(hold_gil=hold_gil), timeout=120, PYTHONPATH=CHILD_PATH)
    assert proc.stdout.strip().endswith("ok"), proc.stdout


def test_boot_failure_returns_null_and_says_why(tmp_path):
    # A pjrt_ref.capi that cannot be imported: GetPjrtApi gives NULL (as the
    # PJRT header allows) and prints the Python error, instead of crashing.
    broken = tmp_path / "pjrt_ref" / "capi"
    broken.mkdir(parents=True)
    (broken.parent / "__init__.py").write_text("")
    (broken / "__init__.py").write_text("raise ImportError('pjrt_ref.capi is broken on purpose')\n")
    code = f"""
import ctypes, importlib, sys
import pjrt_ref
path = pjrt_ref.shim_path()
sys.path.insert(0, {str(tmp_path)!r})
for name in [n for n in sys.modules if n.startswith("pjrt_ref")]:
    del sys.modules[name]
library = ctypes.PyDLL(path)
library.GetPjrtApi.restype = ctypes.c_void_p
print("api", library.GetPjrtApi())
"""
    proc = run_python(code, timeout=120)
    assert "api None" in proc.stdout
    assert "GetPjrtApi could not start the plugin" in proc.stderr
    assert "pjrt_ref.capi is broken on purpose" in proc.stderr


STALLED_CHILD = r"""
import ctypes
from tests.support.capi_calls import Api, ffi

api = Api()
client = api.client()
args = api.args("PJRT_Client_PlatformName", client=client)
slot = int(ffi.cast("uintptr_t", api.api.PJRT_Client_PlatformName))
# A C thread whose first act is the slot (its signature fits pthread_create's
# start routine), started while this thread holds the GIL and keeps it in C
# (PyDLL: usleep runs holding the GIL, as a C++ waiter does): the slot is
# sure to wait for the GIL.
holding = ctypes.PyDLL(None)
holding.pthread_create.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
thread = ctypes.c_ulong()
assert holding.pthread_create(ctypes.byref(thread), None, slot, int(ffi.cast("uintptr_t", args))) == 0
holding.usleep(3_000_000)
releasing = ctypes.CDLL(None)
releasing.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
assert releasing.pthread_join(thread, None) == 0
print("answered", [ffi.string(args.platform_name, args.platform_name_size)])
"""


def test_an_entry_point_waiting_long_for_the_gil_is_reported():
    # The deadlock's shape, ended after 3 s: this thread holds the GIL in C
    # code while another calls in. The hang detector names the entry point,
    # the threads and the Python stacks, and the call then completes.
    proc = run_python(STALLED_CHILD, timeout=120, PYTHONPATH=CHILD_PATH, PJRT_REF_GIL_STALL="1")
    assert "answered [b'pjrt_ref']" in proc.stdout, proc.stdout + proc.stderr
    report = proc.stderr
    assert "PJRT_Client_PlatformName on thread" in report and "has waited" in report, report
    assert "waiting" in report and "for the GIL" in report, report
    assert "got the GIL after" in report, report
    if sys.version_info < (3, 13):    # libpython exports its stack dump up to 3.12
        assert "Python threads" in report and 'File "<string>"' in report, report


def test_no_report_when_the_gil_comes_in_time():
    proc = run_python(STALLED_CHILD, timeout=120, PYTHONPATH=CHILD_PATH, PJRT_REF_GIL_STALL="30")
    assert "answered [b'pjrt_ref']" in proc.stdout, proc.stdout + proc.stderr
    assert "has waited" not in proc.stderr, proc.stderr


def test_the_boot_wait_uses_the_settings_default_stall():
    """GetPjrtApi's wait for the host's GIL is watched before Python reads
    the settings, with a default written in C (capi_shim/gil_watch.c)."""
    from pjrt_ref import settings

    source = (REPO / "capi_shim" / "gil_watch.c").read_text()
    written = float(re.search(r"#define PJRT_REF_DEFAULT_GIL_STALL ([0-9.]+)", source).group(1))
    assert written == settings.declared("PJRT_REF_GIL_STALL").default
