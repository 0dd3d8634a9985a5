"""The C fast paths (capi_shim/fast_paths.c) answer exactly as the Python entry points do.

Each fast entry point is called twice on the same handles, once with the C
fast paths on and once with them off (every call then enters Python, the
readable reference): outputs must match, and so must the errors for NULL,
stale, foreign and wrong-kind handles and for struct sizes too small for a
field. C-only ready events must also work through the Python entry points,
and the API log (PJRT_REF_LOG_API=1) must still see every call under JAX.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from tests.support.capi_calls import Api, PjrtCallError, ffi, lib
from pjrt_ref.capi import handles
from pjrt_ref.capi import fast_paths
from tests.support.jax_support import run_jax

TWO_RESULTS = """func.func @main(%x: tensor<f32>, %y: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
  %0 = stablehlo.add %x, %y : tensor<f32>
  %1 = stablehlo.multiply %x, %y : tensor<f32>
  return %0, %1 : tensor<f32>, tensor<f32>
}"""


@pytest.fixture(autouse=True)
def fast_paths_restored(api):
    """The switch is process-wide and these tests flip it: each test leaves it
    as it found it, whether it passes or fails (`api` binds the shim first)."""
    before = fast_paths.enabled
    try:
        yield
    finally:
        fast_paths.set_enabled(before)


@contextlib.contextmanager
def fast_paths_set(enabled: bool):
    """The C fast paths on or off for the block, then as they were."""
    before = fast_paths.enabled
    fast_paths.set_enabled(enabled)
    try:
        yield
    finally:
        fast_paths.set_enabled(before)


@pytest.fixture(scope="module")
def objects(api, client):
    """The client, an executable with two results, two scalar buffers, a device and a memory."""
    loaded = api.compile(client, TWO_RESULTS)
    executable = api.call("PJRT_LoadedExecutable_GetExecutable", loaded_executable=loaded).executable
    x, y = _scalar(api, client, 3.0), _scalar(api, client, 4.0)
    memory = api.call("PJRT_Buffer_Memory", buffer=x).memory
    return dict(client=client, loaded=loaded, executable=executable, x=x, y=y, memory=memory)


def _scalar(api: Api, client, value: float):
    array = np.array(value, np.float32)
    api.keep.append(array)
    args = api.call("PJRT_Client_BufferFromHostBuffer", client=client, data=ffi.cast("void*", array.ctypes.data),
                    type=11, dims=ffi.NULL, num_dims=0,          # PJRT_Buffer_Type_F32, a scalar
                    host_buffer_semantics=lib.PJRT_HostBufferSemantics_kImmutableOnlyDuringCall)
    api.call("PJRT_Event_Destroy", event=args.done_with_host_buffer)
    return args.buffer


def _both_ways(api: Api, name: str, outputs: tuple[str, ...], **fields):
    """(fast, python): each the call's outputs, or its error as (code, message)."""
    results = []
    for enabled in (True, False):
        with fast_paths_set(enabled):
            try:
                args = api.call(name, **fields)
                results.append(tuple(_value(getattr(args, field)) for field in outputs))
            except PjrtCallError as error:
                results.append(("error", error.code, error.message))
    return results


def _value(value):
    if isinstance(value, ffi.CData):
        return int(ffi.cast("uintptr_t", value))
    return value


QUERIES = [
    ("PJRT_Executable_NumReplicas", "executable", "executable", ("num_replicas",)),
    ("PJRT_Executable_NumPartitions", "executable", "executable", ("num_partitions",)),
    ("PJRT_Executable_NumOutputs", "executable", "executable", ("num_outputs",)),
    ("PJRT_Buffer_Device", "buffer", "x", ("device",)),
    ("PJRT_Buffer_Memory", "buffer", "x", ("memory",)),
    ("PJRT_Buffer_IsDeleted", "buffer", "x", ("is_deleted",)),
    ("PJRT_Buffer_IsOnCpu", "buffer", "x", ("is_on_cpu",)),
    ("PJRT_Memory_Kind", "memory", "memory", ("kind", "kind_size")),
]


@pytest.mark.parametrize("name,field,which,outputs", QUERIES, ids=[q[0] for q in QUERIES])
def test_queries_answer_as_python_does(api, objects, name, field, which, outputs):
    fast, python = _both_ways(api, name, outputs, **{field: objects[which]})
    assert fast == python
    assert "error" not in fast


def test_query_values_are_the_programs(api, objects):
    """Two results, one replica, one partition (from TWO_RESULTS); memory kind "device"."""
    fast_paths.set_enabled(True)
    exe = objects["executable"]
    assert api.call("PJRT_Executable_NumOutputs", executable=exe).num_outputs == 2
    assert api.call("PJRT_Executable_NumReplicas", executable=exe).num_replicas == 1
    kind = api.call("PJRT_Memory_Kind", memory=objects["memory"])
    assert ffi.string(kind.kind, kind.kind_size) == b"device"


BAD_HANDLES = ["null", "foreign", "wrong kind", "stale"]


def _bad_handle(api: Api, objects, how: str, kind_field: str):
    if how == "null":
        return ffi.NULL
    if how == "foreign":
        scratch = ffi.new("uint64_t[2]")
        api.keep.append(scratch)
        return ffi.cast("void*", scratch)
    if how == "wrong kind":
        return ffi.cast("void*", objects["client"])
    # stale: a buffer (or executable handle) made and destroyed just now
    if kind_field == "executable":
        exe = api.call("PJRT_LoadedExecutable_GetExecutable", loaded_executable=objects["loaded"]).executable
        api.call("PJRT_Executable_Destroy", executable=exe)
        return exe
    buffer = _scalar(api, objects["client"], 1.0)
    api.call("PJRT_Buffer_Destroy", buffer=buffer)
    return ffi.cast("void*", buffer)


@pytest.mark.parametrize("how", BAD_HANDLES)
@pytest.mark.parametrize("name,field,which,outputs", QUERIES, ids=[q[0] for q in QUERIES])
def test_bad_handles_fail_the_same_way(api, objects, name, field, which, outputs, how):
    handle = _bad_handle(api, objects, how, field)
    fast, python = _both_ways(api, name, outputs, **{field: handle})
    assert fast == python
    assert fast[0] == "error" and fast[1] == 3          # INVALID_ARGUMENT
    assert "handle" in fast[2]


@pytest.mark.parametrize("name,field,which,outputs", QUERIES, ids=[q[0] for q in QUERIES])
def test_short_struct_size_fails_the_same_way(api, objects, name, field, which, outputs):
    """A struct ending before the output field: Python reports it (the fast path stands aside)."""
    short = ffi.offsetof(f"{name}_Args", outputs[0])
    fast, python = _both_ways(api, name, outputs[:0], struct_size=short, **{field: objects[which]})
    assert fast == python


def _ready_event(api: Api, objects):
    return api.call("PJRT_Buffer_ReadyEvent", buffer=objects["x"]).event


def test_ready_events_are_c_only_and_answer_as_python_events(api, objects):
    fast_paths.set_enabled(True)
    before = handles.count()
    c_event = _ready_event(api, objects)
    assert lib.pjrt_ref_is_ready_event(handles.address(c_event))
    assert handles.count() == before + 1
    fast_paths.set_enabled(False)
    py_event = _ready_event(api, objects)              # a Python event now
    assert not lib.pjrt_ref_is_ready_event(handles.address(py_event))
    for enabled in (True, False):                      # both events, both paths: the same answers
        fast_paths.set_enabled(enabled)
        for event in (c_event, py_event):
            assert api.call("PJRT_Event_IsReady", event=event).is_ready
            api.call("PJRT_Event_Error", event=event)
            api.call("PJRT_Event_Await", event=event)
    fast_paths.set_enabled(False)
    api.call("PJRT_Event_Destroy", event=c_event)      # Python destroys a C-only event
    api.call("PJRT_Event_Destroy", event=py_event)
    assert handles.count() == before
    fast_paths.set_enabled(True)
    for event in (c_event, py_event):                  # double destroy: an error on both paths
        with pytest.raises(PjrtCallError, match="not a live PJRT_Event handle"):
            api.call("PJRT_Event_Destroy", event=event)
        with pytest.raises(PjrtCallError, match="not a live PJRT_Event handle"):
            api.call("PJRT_Event_IsReady", event=event)


@ffi.callback("void(PJRT_Error*, void*)")
def _record_on_ready(error, user_arg):
    ffi.from_handle(user_arg).append(error == ffi.NULL)


def test_on_ready_runs_the_callback_at_once_with_no_error(api, objects):
    for enabled in (True, False):
        with fast_paths_set(enabled):
            seen: list = []
            handle = ffi.new_handle(seen)
            event = _ready_event(api, objects)
            api.call("PJRT_Event_OnReady", event=event, callback=_record_on_ready, user_arg=handle)
            assert seen == [True], enabled
            with pytest.raises(PjrtCallError, match="callback is NULL"):
                api.call("PJRT_Event_OnReady", event=event, callback=ffi.NULL, user_arg=handle)
            api.call("PJRT_Event_Destroy", event=event)


def test_execute_outputs_and_events_then_delete(api, objects):
    """Execute's outputs and completion event go through the fast paths; deletion is seen at once."""
    fast_paths.set_enabled(True)
    arguments = ffi.new("PJRT_Buffer*[2]", [objects["x"], objects["y"]])
    outputs = ffi.new("PJRT_Buffer*[2]")
    events = ffi.new("PJRT_Event*[1]")
    api.call("PJRT_LoadedExecutable_Execute", executable=objects["loaded"],
             options=ffi.new("PJRT_ExecuteOptions*", {"struct_size": ffi.sizeof("PJRT_ExecuteOptions")}),
             argument_lists=ffi.new("PJRT_Buffer**[1]", [arguments]), num_devices=1, num_args=2,
             output_lists=ffi.new("PJRT_Buffer**[1]", [outputs]), device_complete_events=events)
    assert lib.pjrt_ref_is_ready_event(handles.address(events[0]))
    api.call("PJRT_Event_Destroy", event=events[0])
    for j, expected in enumerate((3.0 + 4.0, 3.0 * 4.0)):
        result = np.zeros((), np.float32)
        api.call("PJRT_Buffer_ToHostBuffer", src=outputs[j], dst=ffi.cast("void*", result.ctypes.data),
                 dst_size=4, host_layout=ffi.NULL)
        assert result == np.float32(expected)
        assert _both_ways(api, "PJRT_Buffer_Device", ("device",), buffer=outputs[j]) == \
            _both_ways(api, "PJRT_Buffer_Device", ("device",), buffer=objects["x"])
    api.call("PJRT_Buffer_Delete", buffer=outputs[0])
    assert _both_ways(api, "PJRT_Buffer_IsDeleted", ("is_deleted",), buffer=outputs[0]) == [(True,), (True,)]
    assert _both_ways(api, "PJRT_Buffer_IsDeleted", ("is_deleted",), buffer=outputs[1]) == [(False,), (False,)]
    for buffer in outputs:
        api.call("PJRT_Buffer_Destroy", buffer=buffer)
    assert _both_ways(api, "PJRT_Buffer_IsDeleted", ("is_deleted",), buffer=outputs[1])[0][0] == "error"


def _execute_outcome(api: Api, objects, **overrides):
    """Execute TWO_RESULTS on (x, y) with `overrides` on the Args: the two
    results' values, or the error as ("error", code, message)."""
    arguments = ffi.new("PJRT_Buffer*[2]", [objects["x"], objects["y"]])
    outputs = ffi.new("PJRT_Buffer*[2]")
    fields = dict(executable=objects["loaded"],
                  options=ffi.new("PJRT_ExecuteOptions*", {"struct_size": ffi.sizeof("PJRT_ExecuteOptions")}),
                  argument_lists=ffi.new("PJRT_Buffer**[1]", [arguments]), num_devices=1, num_args=2,
                  output_lists=ffi.new("PJRT_Buffer**[1]", [outputs]), device_complete_events=ffi.NULL)
    fields.update(overrides)
    try:
        api.call("PJRT_LoadedExecutable_Execute", **fields)
    except PjrtCallError as error:
        return ("error", error.code, error.message)
    values = []
    for buffer in outputs:
        result = np.zeros((), np.float32)
        api.call("PJRT_Buffer_ToHostBuffer", src=buffer, dst=ffi.cast("void*", result.ctypes.data),
                 dst_size=4, host_layout=ffi.NULL)
        api.call("PJRT_Buffer_Destroy", buffer=buffer)
        values.append(float(result))
    return tuple(values)


def _unusual_executions(api: Api, objects, context) -> dict:
    """Execute's Args that are not plain, each with what makes it so (`context`: a PJRT_ExecuteContext)."""
    device = api.call("PJRT_Buffer_Device", buffer=objects["x"]).device
    with_context = ffi.new("PJRT_ExecuteOptions*", {"struct_size": ffi.sizeof("PJRT_ExecuteOptions"),
                                                     "context": context})
    no_outputs_row = ffi.new("PJRT_Buffer**[1]", [ffi.NULL])
    return {
        "execute_device": dict(execute_device=device),
        "execute context": dict(options=with_context),
        "two argument lists": dict(num_devices=2),
        "NULL argument_lists": dict(argument_lists=ffi.NULL),
        "NULL output_lists[0]": dict(output_lists=no_outputs_row),
        "short struct": dict(struct_size=ffi.offsetof("PJRT_LoadedExecutable_Execute_Args",
                                                      "device_complete_events")),
        "more arguments than C reads": dict(num_args=65, argument_lists=_rows(api, ffi.new("PJRT_Buffer*[65]"))),
    }


def _rows(api: Api, *rows):
    """A `PJRT_Buffer**[]` holding `rows`, which `api` keeps alive (a cdata
    pointer to them does not)."""
    api.keep.extend(rows)
    return ffi.new("PJRT_Buffer**[]", list(rows))


def test_execute_reads_plain_calls_in_c_and_every_other_in_python(api, objects):
    """PJRT_LoadedExecutable_Execute's Args are read in C only for a plain
    call; every other call (a device chosen, an execute context, several
    argument lists, NULL arrays, a short struct) is read by Python, and each
    gives the same results or the same error with the fast paths on and off."""
    plain = api.args("PJRT_LoadedExecutable_Execute", executable=objects["loaded"], num_devices=1, num_args=0,
                     argument_lists=ffi.new("PJRT_Buffer**[1]"), output_lists=_rows(api, ffi.new("PJRT_Buffer*[2]")))
    call = fast_paths.read_plain_execute(plain)
    assert call is not None and call.num_args == 0
    assert handles.address(plain.executable) == call.executable
    assert _both_ways_executed(api, objects) == [(7.0, 12.0), (7.0, 12.0)]
    context = api.call("PJRT_ExecuteContext_Create").context
    for why, overrides in _unusual_executions(api, objects, context).items():
        args = api.args("PJRT_LoadedExecutable_Execute", **{
            "struct_size": ffi.sizeof("PJRT_LoadedExecutable_Execute_Args"), "num_devices": 1, "num_args": 2,
            "argument_lists": _rows(api, ffi.new("PJRT_Buffer*[2]")),
            "output_lists": _rows(api, ffi.new("PJRT_Buffer*[2]")), **overrides})
        assert fast_paths.read_plain_execute(args) is None, why
        fast, python = _both_ways_executed(api, objects, **overrides)
        assert fast == python, why
    api.call("PJRT_ExecuteContext_Destroy", context=context)


def _both_ways_executed(api: Api, objects, **overrides) -> list:
    outcomes = []
    for enabled in (True, False):
        with fast_paths_set(enabled):
            outcomes.append(_execute_outcome(api, objects, **overrides))
    return outcomes


def test_error_destroy_of_null_is_a_no_op(api):
    """PJRT_Error_Destroy(NULL) (a void slot) returns on either path without
    touching a handle, and errors are made, read and destroyed as before."""
    for enabled in (True, False):
        with fast_paths_set(enabled):
            before = handles.count()
            api.raw("PJRT_Error_Destroy", api.args("PJRT_Error_Destroy", error=ffi.NULL))
            assert handles.count() == before, enabled
            code, message = api.error("PJRT_Buffer_IsDeleted", buffer=ffi.NULL)
            assert code == 3 and "handle" in message, enabled       # INVALID_ARGUMENT
            assert handles.count() == before, enabled


def test_api_log_still_sees_every_call_under_jax():
    """PJRT_REF_LOG_API=1 turns the fast paths off: the per-call queries are logged."""
    proc = run_jax("""
        import sys
        f = jax.jit(lambda x, y: x + y)
        x, y = jnp.float32(1.0), jnp.float32(2.0)
        f(x, y).block_until_ready()
        print("=== steady", file=sys.stderr, flush=True)
        assert float(f(x, y)) == 3.0
        print("OK")
    """, PJRT_REF_LOG_API="1")
    steady = proc.stderr.split("=== steady", 1)[1]
    for name in ("PJRT_Executable_NumOutputs", "PJRT_Event_OnReady", "PJRT_Buffer_Device", "PJRT_Event_Destroy"):
        assert f"-> {name}" in steady, name
    assert "OK" in proc.stdout


def test_buffer_destroys_answered_in_c_are_finished_before_python_looks(api, objects):
    """Destroy is answered in C and queued; Python drops the buffers before any handle lookup."""
    fast_paths.set_enabled(True)
    before = handles.count()
    buffers = [_scalar(api, objects["client"], float(i)) for i in range(300)]   # more than the C queue holds
    assert handles.count() == before + 300
    for buffer in buffers:
        api.raw("PJRT_Buffer_Destroy", api.args("PJRT_Buffer_Destroy", buffer=buffer))
    assert lib.pjrt_ref_destroyed_pending() > 0
    for enabled in (True, False):                      # a destroyed handle is stale on both paths
        fast_paths.set_enabled(enabled)
        with pytest.raises(PjrtCallError, match="not a live PJRT_Buffer handle"):
            api.call("PJRT_Buffer_Device", buffer=buffers[0])
        with pytest.raises(PjrtCallError, match="not a live PJRT_Buffer handle"):
            api.call("PJRT_Buffer_Destroy", buffer=buffers[-1])
    assert lib.pjrt_ref_destroyed_pending() == 0
    assert handles.count() == before


def test_fast_paths_are_off_when_every_call_must_be_seen(monkeypatch):
    """The API log and strict mode must see every call; PJRT_REF_FAST_PATHS=0 is the plain switch."""
    from pjrt_ref.capi import strict
    for name in ("PJRT_REF_LOG_API", "PJRT_REF_FAST_PATHS", "PJRT_REF_STRICT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(strict, "ENABLED", False)
    assert fast_paths.wanted()
    monkeypatch.setenv("PJRT_REF_LOG_API", "1")
    assert not fast_paths.wanted()
    monkeypatch.delenv("PJRT_REF_LOG_API")
    monkeypatch.setenv("PJRT_REF_FAST_PATHS", "0")
    assert not fast_paths.wanted()
    monkeypatch.delenv("PJRT_REF_FAST_PATHS")
    monkeypatch.setattr(strict, "ENABLED", True)
    assert not fast_paths.wanted()


def test_a_fact_python_answers_with_an_error_stays_with_python(api, objects, monkeypatch):
    """An executable whose replica count is an error: no C fact, and NumReplicas reports the error."""
    from pjrt_ref.errors import InvalidArgument
    from pjrt_ref.model.executable import Executable

    def conflicting(self):
        raise InvalidArgument("the compile options ask for 2 replicas, the program's module for 4")
    monkeypatch.setattr(Executable, "num_replicas", property(conflicting))
    exe = api.call("PJRT_LoadedExecutable_GetExecutable", loaded_executable=objects["loaded"]).executable
    fast, python = _both_ways(api, "PJRT_Executable_NumReplicas", ("num_replicas",), executable=exe)
    assert fast == python and fast[0] == "error" and "2 replicas" in fast[2]
    api.call("PJRT_Executable_Destroy", executable=exe)
