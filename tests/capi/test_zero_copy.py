"""Issue 15 item 4: results without copies.

pjrt-ref's buffers are host memory, so `PJRT_Buffer_IsOnCpu` answers true and
jaxlib views a result in place: `np.asarray(y)` (the buffer protocol,
jaxlib/py_array.cc `PyArray_bf_getbuffer`) and `y.__array__()`
(`PyHostValue::AsNumPyArray`) take an external reference
(`PJRT_Buffer_IncreaseExternalReferenceCount`), read
`PJRT_Buffer_OpaqueDeviceMemoryDataPointer` and wrap that memory in a
read-only numpy array. The memory must then stay valid while the view
lives, whatever happens to the buffer: deleted, dropped, or donated (XLA
CPU then leaves the buffer live and runs with a copy; so do we).

The JAX tests run in a child with pjrt_ref and cpu (the reference for what
donation does); the C API tests drive the entry points in-process.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from tests.support.capi_calls import Api, PjrtCallError, ffi, lib
from pjrt_ref.capi import handles
from pjrt_ref.model.buffer import Buffer
from tests.support.jax_support import run_jax

BOTH = {"JAX_PLATFORMS": "pjrt_ref,cpu"}
INVALID, PRECONDITION = lib.PJRT_Error_Code_INVALID_ARGUMENT, lib.PJRT_Error_Code_FAILED_PRECONDITION

# A 100 MB int32 result (exact values), and a churn that would reuse or unmap
# its memory if it were freed: a freed 100 MB numpy block is munmap'ed, so
# reading a view of it would crash the child, and a reused one would show
# other values.
BIG = """
N = 25_000_000                                   # int32: 100 MB
full = jax.jit(lambda k: jnp.full((N,), k, jnp.int32))
ramp = jax.jit(lambda: jnp.arange(N, dtype=jnp.int32) * 2)

def churn():
    import gc
    for k in range(3):
        t = full(100 + k)
        t.block_until_ready()
        t.delete()
        scratch = np.full(N, -1, np.int32)
        del t, scratch
        gc.collect()

def holds(view, k):
    assert view.shape == (N,) and view[0] == k and view[-1] == k, (view[0], view[-1])
    assert (view[::1_000_003] == k).all()
"""


# ------------------------------------------------------------------ JAX
def test_a_100mb_result_is_viewed_not_copied():
    proc = run_jax(BIG + """
import tracemalloc
y = ramp()
y.block_until_ready()
tracemalloc.start()
a = np.asarray(y)                 # the buffer protocol
b = y.__array__()                 # jaxlib's _single_device_array_to_np_array_did_copy
_, peak = tracemalloc.get_traced_memory()
tracemalloc.reset_peak()
copy = np.array(a)                # a real copy, to show the accounting sees one
_, copy_peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
assert copy_peak >= 100_000_000, copy_peak
assert peak < 1_000_000, peak
for view in (a, b):
    assert view.ctypes.data == y.unsafe_buffer_pointer()
    assert view.flags.c_contiguous and view.flags.aligned and not view.flags.writeable
    assert view.dtype == np.int32 and view[12_345] == 24_690 and view[-1] == 2 * (N - 1)
    try:
        view.flags.writeable = True
        raise AssertionError("the view of a result became writable")
    except ValueError:
        pass
print("ok", peak)
""", **BOTH)
    assert proc.stdout.startswith("ok")


def test_types_numpy_cannot_view_through_the_buffer_protocol_are_views_too():
    """bfloat16 has no PEP 3118 format, so np.asarray takes __array__
    (jaxlib's zero-copy AsNumPyArray); int4 is sub-byte, so jaxlib copies it
    out through PJRT_Buffer_ToHostBuffer. Both give the right values."""
    proc = run_jax("""
bf = jax.jit(lambda: jnp.arange(8, dtype=jnp.bfloat16) / 2)()
view = np.asarray(bf)
assert view.dtype == jnp.bfloat16 and view.ctypes.data == bf.unsafe_buffer_pointer()
assert view.astype(np.float32).tolist() == [k / 2 for k in range(8)]
i4 = jax.jit(lambda: jnp.arange(-3, 5, dtype=jnp.int4))()
assert np.asarray(i4).tolist() == list(range(-3, 5))
flags = jax.jit(lambda x: x > 2)(jnp.arange(5))
assert np.asarray(flags).tolist() == [False, False, False, True, True]
scalar = jax.jit(lambda x: x.sum())(jnp.arange(4.0))
assert np.asarray(scalar).shape == () and float(scalar) == 6.0
print("ok")
""", **BOTH)
    assert proc.stdout.strip() == "ok"


def test_a_view_outlives_delete_and_del():
    run_jax(BIG + """
import gc
y = full(7)
a = np.asarray(y)
y.delete()
assert y.is_deleted()
churn()
holds(a, 7)
z = full(8)
b = np.asarray(z)
del z
gc.collect()
churn()
holds(b, 8)
""", **BOTH)


def test_donating_a_viewed_buffer_leaves_it_live_as_on_xla_cpu():
    """XLA CPU refuses the donation hold of a buffer with external references and
    runs with a copy instead: the argument stays live and the view stays valid.
    Once no view is left, donation deletes the argument again."""
    proc = run_jax("""
import gc
f = jax.jit(lambda x: x + 1, donate_argnums=0)
for device in (jax.devices("pjrt_ref")[0], jax.devices("cpu")[0]):
    x = jax.jit(lambda v: v * 3)(jax.device_put(np.full(1000, 3, np.int32), device))
    view = np.asarray(x)
    out = f(x)
    print(device.platform, x.is_deleted(), int(out[0]), int(view[0]), int(x[1]))
    del view
    gc.collect()
    out = f(x)
    print(device.platform, x.is_deleted(), int(out[0]))
""", **BOTH)
    assert proc.stdout.splitlines() == ["pjrt_ref False 10 9 9", "pjrt_ref True 10",
                                        "cpu False 10 9 9", "cpu True 10"]


def test_a_donated_100mb_result_keeps_its_view():
    run_jax(BIG + """
y = full(5)
view = np.asarray(y)
out = jax.jit(lambda x: x * 2, donate_argnums=0)(y)
holds(np.asarray(out), 10)
del out
churn()
holds(view, 5)
""", **BOTH)


def test_views_under_strict_mode_leave_no_reference_behind():
    """PJRT_REF_STRICT=1: no violation, no leak at exit, and once the views are
    gone no buffer still counts an external reference or pins memory."""
    proc = run_jax(BIG + """
import gc
from pjrt_ref.capi import handles
from pjrt_ref.model.buffer import Buffer
y = full(4)
views = [np.asarray(y), y.__array__(), np.asarray(memoryview(y))]
out = jax.jit(lambda x: x + 1, donate_argnums=0)(y)
y.delete()
churn()
for view in views:
    holds(view, 4)
held = [b for b in handles.live_objects() if isinstance(b, Buffer) and b.external_references]
assert len(held) == 1 and held[0].external_references == 3, held
del views, view, held
gc.collect()
left = [b for b in handles.live_objects() if isinstance(b, Buffer) and (b.external_references or b._pinned is not None)]
assert left == [], left
del y, out                        # (a jax.Array alive at exit keeps its PJRT_Event: reported, rightly)
gc.collect()
print("ok")
""", PJRT_REF_STRICT="1", PJRT_REF_RUNTIME="shared", **BOTH)   # it looks at the plugin's objects
    assert proc.stdout.strip() == "ok"
    lines = [l for l in proc.stderr.splitlines() if l.startswith("pjrt-ref strict:")]
    assert all(": older (smaller) than" in l or "newer" in l for l in lines), lines
    assert "leak report" not in proc.stderr


def test_a_view_alive_when_python_exits_does_not_abort():
    """jaxlib's external-reference destructor LOG(FATAL)s if the decrease fails;
    views still alive at exit are released while Python shuts down."""
    run_jax("""
y = jax.jit(lambda: jnp.arange(6.0))()
KEEP = [np.asarray(y), memoryview(y), y.__array__()]
y.delete()
""", **BOTH)


# ---------------------------------------------------------------- C API
def _error(api: Api, name: str, **fields) -> tuple[int, str]:
    with pytest.raises(PjrtCallError) as caught:
        api.call(name, **fields)
    return caught.value.code, caught.value.message


def _increase(api: Api, buffer) -> None:
    api.call("PJRT_Buffer_IncreaseExternalReferenceCount", buffer=buffer)


def _decrease(api: Api, buffer) -> None:
    api.call("PJRT_Buffer_DecreaseExternalReferenceCount", buffer=buffer)


def _pointer(api: Api, buffer) -> int:
    ptr = api.call("PJRT_Buffer_OpaqueDeviceMemoryDataPointer", buffer=buffer).device_memory_ptr
    return int(ffi.cast("uintptr_t", ptr))


def _read(pointer: int, like: np.ndarray) -> np.ndarray:
    raw = ffi.buffer(ffi.cast("char*", pointer), like.nbytes)
    return np.frombuffer(raw, like.dtype).reshape(like.shape).copy()


def _memory_of(buffer) -> weakref.ref:
    """A weak reference to the numpy array that owns the buffer's memory."""
    array = handles.get(buffer, Buffer, "PJRT_Buffer").array
    while array.base is not None:
        array = array.base
    return weakref.ref(array)


def test_every_buffer_is_on_cpu(api, client):
    buffer = api.buffer(client, np.arange(3, dtype=np.int8))
    assert api.call("PJRT_Buffer_IsOnCpu", buffer=buffer).is_on_cpu is True
    api.call("PJRT_Buffer_Destroy", buffer=buffer)


def test_references_keep_the_memory_past_delete_until_the_last_one_goes(api, client):
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    buffer = api.buffer(client, values)
    memory = _memory_of(buffer)
    _increase(api, buffer)
    _increase(api, buffer)
    pointer = _pointer(api, buffer)
    assert pointer == api.call("PJRT_Buffer_UnsafePointer", buffer=buffer).buffer_pointer
    assert pointer % 16 == 0
    api.call("PJRT_Buffer_Delete", buffer=buffer)
    assert api.call("PJRT_Buffer_IsDeleted", buffer=buffer).is_deleted
    gc.collect()
    assert memory() is not None
    np.testing.assert_array_equal(_read(pointer, values), values)
    _decrease(api, buffer)
    gc.collect()
    assert memory() is not None                   # one reference left
    np.testing.assert_array_equal(_read(pointer, values), values)
    _decrease(api, buffer)
    gc.collect()
    assert memory() is None                       # the last one went: memory freed, nothing leaked
    api.call("PJRT_Buffer_Destroy", buffer=buffer)


def test_references_on_a_live_buffer_cost_nothing_when_they_end(api, client):
    buffer = api.buffer(client, np.ones(4, np.int64))
    _increase(api, buffer)
    _decrease(api, buffer)
    assert not api.call("PJRT_Buffer_IsDeleted", buffer=buffer).is_deleted
    assert api.to_host(buffer, np.int64, (4,)).tolist() == [1, 1, 1, 1]
    api.call("PJRT_Buffer_Destroy", buffer=buffer)


def test_decrease_below_zero_is_a_clear_error(api, client):
    buffer = api.buffer(client, np.zeros(2, np.float32))
    code, message = _error(api, "PJRT_Buffer_DecreaseExternalReferenceCount", buffer=buffer)
    assert code == INVALID and "external reference count is already 0" in message
    _increase(api, buffer)
    _decrease(api, buffer)
    code, _ = _error(api, "PJRT_Buffer_DecreaseExternalReferenceCount", buffer=buffer)
    assert code == INVALID
    api.call("PJRT_Buffer_Destroy", buffer=buffer)


def test_a_deleted_buffer_has_no_data_to_reference(api, client):
    buffer = api.buffer(client, np.zeros(2, np.float32))
    api.call("PJRT_Buffer_Delete", buffer=buffer)
    for name in ("PJRT_Buffer_IncreaseExternalReferenceCount", "PJRT_Buffer_OpaqueDeviceMemoryDataPointer"):
        code, message = _error(api, name, buffer=buffer)
        assert code == PRECONDITION and "deleted or donated" in message, (name, message)
    code, _ = _error(api, "PJRT_Buffer_DecreaseExternalReferenceCount", buffer=buffer)
    assert code == INVALID
    api.call("PJRT_Buffer_Destroy", buffer=buffer)


REFERENCE_ENTRY_POINTS = ["PJRT_Buffer_IncreaseExternalReferenceCount",
                          "PJRT_Buffer_DecreaseExternalReferenceCount",
                          "PJRT_Buffer_OpaqueDeviceMemoryDataPointer", "PJRT_Buffer_IsOnCpu"]


@pytest.mark.parametrize("name", REFERENCE_ENTRY_POINTS)
def test_null_and_stale_buffers_are_errors(api, client, name):
    code, message = _error(api, name, buffer=ffi.NULL)
    assert code == INVALID and "NULL" in message
    stale = api.buffer(client, np.zeros(1, np.float32))
    api.call("PJRT_Buffer_Destroy", buffer=stale)
    code, message = _error(api, name, buffer=stale)
    assert code == INVALID and "handle" in message
    code, _ = _error(api, name, buffer=ffi.cast("PJRT_Buffer*", client))        # wrong kind
    assert code == INVALID


def test_destroy_ends_the_references_it_holds(api, client):
    """As XLA's C API, whose PJRT_Buffer owns its external references."""
    buffer = api.buffer(client, np.arange(5, dtype=np.int32))
    memory = _memory_of(buffer)
    _increase(api, buffer)
    api.call("PJRT_Buffer_Destroy", buffer=buffer)   # (answered in C: Python finishes it at its next entry)
    code, _ = _error(api, "PJRT_Buffer_DecreaseExternalReferenceCount", buffer=buffer)
    assert code == INVALID
    gc.collect()
    assert memory() is None


DONATES = """func.func @main(%x: tensor<4xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4xf32> {
  %0 = stablehlo.add %x, %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}"""


def test_a_referenced_argument_is_not_given_up_by_donation(api, client):
    values = np.array([1, 2, 3, 4], np.float32)
    loaded = api.compile(client, DONATES)
    buffer = api.buffer(client, values)
    _increase(api, buffer)
    pointer = _pointer(api, buffer)
    [out] = api.execute(loaded, [buffer], 1)
    assert not api.call("PJRT_Buffer_IsDeleted", buffer=buffer).is_deleted
    assert api.to_host(out, np.float32, (4,)).tolist() == [2, 4, 6, 8]
    np.testing.assert_array_equal(_read(pointer, values), values)
    _decrease(api, buffer)
    [again] = api.execute(loaded, [buffer], 1)      # no reference left: donated
    assert api.call("PJRT_Buffer_IsDeleted", buffer=buffer).is_deleted
    for handle in (buffer, out, again):
        api.call("PJRT_Buffer_Destroy", buffer=handle)
    api.call("PJRT_LoadedExecutable_Destroy", executable=loaded)
