"""The PJRT profiler extension: pjrt-ref's slices in `jax.profiler.trace`.

The oracle is jaxlib itself: the JAX test runs a real profiling session in a
child process, and jaxlib's protobuf parser and trace-viewer conversion
(`*.trace.json.gz`) must show our compile, execute and op slices, timed
inside JAX's own host events for the same calls. The in-process tests check
the ABI against pypjrt's 0.114 description and drive the C functions
directly (lifecycle, errors), decoding the XSpace with the small reader
below (written from xla/tsl/profiler/protobuf/xplane.proto's field numbers).
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from pjrt_ref.capi_shim._pjrt_ref_shim import ffi, lib
from pjrt_ref.errors import ErrorCode
from tests.support.capi_calls import assert_layout_matches
from tests.support.jax_support import run_jax

abi = pytest.importorskip("pypjrt._abi.pjrt_0_114")

ARGS_STRUCTS = ("PLUGIN_Profiler_Error_Destroy_Args", "PLUGIN_Profiler_Error_Message_Args",
                "PLUGIN_Profiler_Error_GetCode_Args", "PLUGIN_Profiler_Create_Args",
                "PLUGIN_Profiler_Destroy_Args", "PLUGIN_Profiler_Start_Args", "PLUGIN_Profiler_Stop_Args",
                "PLUGIN_Profiler_CollectData_Args")


# ------------------------------------------------------------ a protobuf reader
def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def fields(data: bytes) -> dict[int, list]:
    """Field number -> values (ints for varints, bytes for length-delimited fields)."""
    out: dict[int, list] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def decode_plane(data: bytes) -> dict:
    """An XPlane as {name, events: [(line_name, event_name, start_ns, duration_ns, stats)]}."""
    plane = fields(data)
    names = {}
    for entry in plane.get(4, []):                       # map<int64, XEventMetadata>
        meta = fields(fields(entry)[2][0])
        names[meta[1][0]] = meta[2][0].decode()
    stat_names = {}
    for entry in plane.get(5, []):                       # map<int64, XStatMetadata>
        meta = fields(fields(entry)[2][0])
        stat_names[meta[1][0]] = meta[2][0].decode()
    events = []
    for raw_line in plane.get(3, []):
        line = fields(raw_line)
        for raw_event in line.get(4, []):
            event = fields(raw_event)
            stats = {}
            for raw_stat in event.get(4, []):
                stat = fields(raw_stat)
                value = stat[5][0].decode() if 5 in stat else stat.get(4, [None])[0]
                stats[stat_names[stat[1][0]]] = value
            events.append((line[2][0].decode(), names[event[1][0]],
                           line[3][0] + event.get(2, [0])[0] // 1000, event.get(3, [0])[0] // 1000, stats))
    return {"name": plane[2][0].decode(), "events": events}


# ------------------------------------------------------------ the ABI
def _extension():
    api = lib.GetPjrtApi()
    base = api.extension_start
    while base != ffi.NULL and base.type != lib.PJRT_Extension_Type_Profiler:
        base = base.next
    assert base != ffi.NULL, "no profiler extension on PJRT_Api.extension_start"
    return ffi.cast("PJRT_Profiler_Extension*", base)


def test_extension_is_announced_with_every_function():
    extension = _extension()
    assert extension.base.struct_size == ctypes.sizeof(abi.PJRT_Profiler_Extension)
    profiler_api = extension.profiler_api
    for field in ("error_destroy", "error_message", "error_get_code", "create", "destroy", "start",
                  "stop", "collect_data"):
        assert getattr(profiler_api, field) != ffi.NULL, field


def test_profiler_api_is_the_prefix_jaxlib_0_10_2_accepts():
    """0.114 appends consume/consume_result_destroy/serialize; jaxlib 0.10.2 wants exactly 80 bytes."""
    theirs = abi.PLUGIN_Profiler_Api
    for field, *_ in ffi.typeof("PLUGIN_Profiler_Api").fields:
        assert ffi.offsetof("PLUGIN_Profiler_Api", field) == getattr(theirs, field).offset, field
    assert _extension().profiler_api.struct_size == theirs.collect_data.offset + 8 == 80


@pytest.mark.parametrize("name", ARGS_STRUCTS)
def test_args_layout_matches_pypjrt(name):
    assert_layout_matches(name, getattr(abi, name))


# ------------------------------------------------------------ the functions, from C
def _call(function, args_type: str, **fields_):
    args = ffi.new(f"{args_type}*", fields_)      # struct_size left 0, as jaxlib leaves it unset
    return function(args), args


def _error(profiler_api, error) -> tuple[int, str]:
    code = ffi.new("PLUGIN_Profiler_Error_GetCode_Args*", {"error": error})
    assert profiler_api.error_get_code(code) == ffi.NULL
    message = ffi.new("PLUGIN_Profiler_Error_Message_Args*", {"error": error})
    profiler_api.error_message(message)
    text = ffi.string(message.message, message.message_size).decode()
    profiler_api.error_destroy(ffi.new("PLUGIN_Profiler_Error_Destroy_Args*", {"error": error}))
    return code.code, text


def _session(profiler_api):
    error, create = _call(profiler_api.create, "PLUGIN_Profiler_Create_Args", options=ffi.NULL)
    assert error == ffi.NULL and create.profiler != ffi.NULL
    return create.profiler


GUARD = 64          # bytes after the caller's buffer that collect_data must not touch


def _collect(profiler_api, profiler) -> bytes:
    error, args = _call(profiler_api.collect_data, "PLUGIN_Profiler_CollectData_Args", profiler=profiler)
    assert error == ffi.NULL
    if args.buffer_size_in_bytes == 0:
        return b""
    owned = bytes(ffi.buffer(args.buffer, args.buffer_size_in_bytes))
    # The header's second protocol: the caller's own buffer of the size it was
    # told gets the same bytes, and nothing after it changes (the guard bytes
    # stand for the caller's neighbouring heap memory).
    mine = ffi.new("uint8_t[]", len(owned) + GUARD)
    ffi.memmove(mine, b"\xa5" * len(mine), len(mine))
    args.buffer = mine
    assert profiler_api.collect_data(args) == ffi.NULL
    assert bytes(ffi.buffer(mine + len(owned), GUARD)) == b"\xa5" * GUARD, "wrote past the caller's buffer"
    assert bytes(ffi.buffer(mine, len(owned))) == owned
    assert args.buffer_size_in_bytes == len(owned)
    return owned


def _run_tanh():
    """Compile and run a one-op program through the object model; returns its executable."""
    from pjrt_ref.model.client import Client

    client = Client()
    code = b"""func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
      %y = stablehlo.tanh %x : tensor<3xf32> loc("user.py":7:3)
      return %y : tensor<3xf32>
    }"""
    loaded = client.compile(code, "mlir", b"")
    buffer = client.buffer_from_array(np.array([0.0, 1.0, -1.0], np.float32))
    (out,) = loaded.execute([buffer], loaded.devices[0], set())
    np.testing.assert_allclose(out.array, np.tanh(np.array([0.0, 1.0, -1.0], np.float32)), rtol=1e-6)
    return loaded.executable


def test_lifecycle_records_only_between_start_and_stop():
    profiler_api = _extension().profiler_api
    profiler = _session(profiler_api)
    _run_tanh()                                   # before start: not recorded
    assert _call(profiler_api.start, "PLUGIN_Profiler_Start_Args", profiler=profiler)[0] == ffi.NULL
    _run_tanh()
    assert _call(profiler_api.stop, "PLUGIN_Profiler_Stop_Args", profiler=profiler)[0] == ffi.NULL
    _run_tanh()                                   # after stop: not recorded
    space = fields(_collect(profiler_api, profiler))
    (plane_bytes,) = space[1]
    plane = decode_plane(plane_bytes)
    assert plane["name"] == "/device:CUSTOM:0"
    names = [event[1] for event in plane["events"]]
    assert names.count("stablehlo.tanh") == 1 and names.count("execute main") == 1
    assert names.count("compile main") == 1
    (tanh,) = [event for event in plane["events"] if event[1] == "stablehlo.tanh"]
    assert tanh[4]["location"] == "user.py:7:3"
    assert tanh[4]["operands"] == "f32[3]" and tanh[4]["results"] == "f32[3]"
    (execute,) = [event for event in plane["events"] if event[1] == "execute main"]
    assert execute[2] <= tanh[2] and tanh[2] + tanh[3] <= execute[2] + execute[3]
    assert _call(profiler_api.destroy, "PLUGIN_Profiler_Destroy_Args", profiler=profiler)[0] == ffi.NULL


def _op_names(profiler_api, profiler) -> list[str]:
    (plane_bytes,) = fields(_collect(profiler_api, profiler))[1]
    return [event[1] for event in decode_plane(plane_bytes)["events"] if event[1].startswith("stablehlo.")]


def test_overlapping_sessions_each_get_their_own_window():
    """JAX allows one trace at a time; a C host may overlap sessions, and each sees its own window."""
    profiler_api = _extension().profiler_api
    outer, inner = _session(profiler_api), _session(profiler_api)
    _call(profiler_api.start, "PLUGIN_Profiler_Start_Args", profiler=outer)
    _run_tanh()
    _call(profiler_api.start, "PLUGIN_Profiler_Start_Args", profiler=inner)
    _run_tanh()
    _call(profiler_api.stop, "PLUGIN_Profiler_Stop_Args", profiler=inner)
    _run_tanh()
    _call(profiler_api.stop, "PLUGIN_Profiler_Stop_Args", profiler=outer)
    assert _op_names(profiler_api, outer) == ["stablehlo.tanh"] * 3
    assert _op_names(profiler_api, inner) == ["stablehlo.tanh"]
    for profiler in (outer, inner):
        _call(profiler_api.destroy, "PLUGIN_Profiler_Destroy_Args", profiler=profiler)


def test_outside_a_trace_the_optimised_plan_runs_and_nothing_is_kept():
    from pjrt_ref.debug import live_profile
    from pjrt_ref.model import program_cache

    program_cache.clear()     # a fresh plan: a kept one may hold another test's traced plan
    profiler_api = _extension().profiler_api
    profiler = _session(profiler_api)                 # created, never started
    executable = _run_tanh()
    assert not live_profile.ACTIVE and executable.program not in live_profile._TRACED_PLANS
    assert _collect(profiler_api, profiler) == b""
    _call(profiler_api.destroy, "PLUGIN_Profiler_Destroy_Args", profiler=profiler)


def test_a_multi_device_run_has_each_devices_ops_on_its_own_thread():
    from pjrt_ref.model.client import Client

    profiler_api = _extension().profiler_api
    client = Client({"num_devices": 2})
    code = b"""module @two attributes {mhlo.num_replicas = 2 : i32} {
      func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
        %y = stablehlo.tanh %x : tensor<3xf32> loc("user.py":7:3)
        return %y : tensor<3xf32>
      }
    }"""
    loaded = client.compile(code, "mlir", b"")
    rows = [[client.buffer_from_array(np.full(3, float(d), np.float32), device)]
            for d, device in enumerate(loaded.devices)]
    profiler = _session(profiler_api)
    _call(profiler_api.start, "PLUGIN_Profiler_Start_Args", profiler=profiler)
    outputs = loaded.execute_on_devices(rows, set())
    _call(profiler_api.stop, "PLUGIN_Profiler_Stop_Args", profiler=profiler)
    for d, (out,) in enumerate(outputs):
        np.testing.assert_allclose(out.array, np.tanh(np.full(3, float(d), np.float32)), rtol=1e-6)
    (plane_bytes,) = fields(_collect(profiler_api, profiler))[1]
    events = decode_plane(plane_bytes)["events"]
    tanh_lines = {line for line, name, *_ in events if name == "stablehlo.tanh"}
    assert len(tanh_lines) == 2                          # one per device thread
    (execute,) = [event for event in events if event[1] == "execute two"]
    assert execute[4]["devices"] == 2
    _call(profiler_api.destroy, "PLUGIN_Profiler_Destroy_Args", profiler=profiler)


def test_collect_data_into_the_callers_buffer_writes_only_the_size_it_reported():
    """The second call copies exactly `buffer_size_in_bytes` bytes: it once copied one
    more (the NUL that cffi appends when a uint8_t[] is made from bytes) past the end
    of the caller's buffer, damaging its heap (SIGABRT later in a free or malloc)."""
    profiler_api = _extension().profiler_api
    profiler = _session(profiler_api)
    _call(profiler_api.start, "PLUGIN_Profiler_Start_Args", profiler=profiler)
    _run_tanh()
    _call(profiler_api.stop, "PLUGIN_Profiler_Stop_Args", profiler=profiler)
    error, args = _call(profiler_api.collect_data, "PLUGIN_Profiler_CollectData_Args", profiler=profiler)
    assert error == ffi.NULL and args.buffer_size_in_bytes > 0
    size = args.buffer_size_in_bytes
    theirs = bytes(ffi.buffer(args.buffer, size))
    mine = ffi.new("uint8_t[]", size + GUARD)
    ffi.memmove(mine, b"\xa5" * len(mine), len(mine))
    args.buffer = mine
    assert profiler_api.collect_data(args) == ffi.NULL
    assert bytes(ffi.buffer(mine + size, GUARD)) == b"\xa5" * GUARD, "wrote past the caller's buffer"
    assert bytes(ffi.buffer(mine, size)) == theirs
    assert args.buffer_size_in_bytes == size
    _call(profiler_api.destroy, "PLUGIN_Profiler_Destroy_Args", profiler=profiler)


def test_a_session_with_nothing_run_collects_nothing():
    profiler_api = _extension().profiler_api
    profiler = _session(profiler_api)
    _call(profiler_api.start, "PLUGIN_Profiler_Start_Args", profiler=profiler)
    _call(profiler_api.stop, "PLUGIN_Profiler_Stop_Args", profiler=profiler)
    assert _collect(profiler_api, profiler) == b""
    _call(profiler_api.destroy, "PLUGIN_Profiler_Destroy_Args", profiler=profiler)


def test_errors_are_plugin_profiler_errors_naming_the_function():
    profiler_api = _extension().profiler_api
    error, _ = _call(profiler_api.start, "PLUGIN_Profiler_Start_Args", profiler=ffi.cast("PLUGIN_Profiler*", 0x40))
    code, text = _error(profiler_api, error)
    assert code == ErrorCode.INVALID_ARGUMENT
    assert "PLUGIN_Profiler_Start" in text and "not a live PLUGIN_Profiler handle" in text
    profiler = _session(profiler_api)
    assert _call(profiler_api.destroy, "PLUGIN_Profiler_Destroy_Args", profiler=profiler)[0] == ffi.NULL
    error, _ = _call(profiler_api.destroy, "PLUGIN_Profiler_Destroy_Args", profiler=profiler)   # twice
    code, text = _error(profiler_api, error)
    assert code == ErrorCode.INVALID_ARGUMENT and "PLUGIN_Profiler_Destroy" in text


# ------------------------------------------------------------ under JAX
JAX_SCRIPT = r'''
import glob, gzip, json, os, sys, tempfile
from pjrt_ref.debug import live_profile

def f(x):
    return jnp.tanh(x) * 2.0

def g(x):
    return jnp.sin(x) + 1.0

x = jnp.ones((4, 3), jnp.float32)
jf, jg = jax.jit(f), jax.jit(g)
jf(x).block_until_ready()                     # compiled and run before any trace

def trace(body):
    log_dir = tempfile.mkdtemp()
    with jax.profiler.trace(log_dir, create_perfetto_trace=True):
        body()
    (folder,) = glob.glob(os.path.join(log_dir, "plugins", "profile", "*"))
    (trace_json,) = glob.glob(os.path.join(folder, "*.trace.json.gz"))
    (xplane,) = glob.glob(os.path.join(folder, "*.xplane.pb"))
    assert glob.glob(os.path.join(folder, "perfetto_trace.json.gz"))
    events = json.load(gzip.open(trace_json))["traceEvents"]
    return events, open(xplane, "rb").read()

def first():
    jf(x).block_until_ready()
    jg(x).block_until_ready()
    try:
        jax.profiler.start_trace(tempfile.mkdtemp())      # a second trace while one is active
    except RuntimeError as error:
        print("NESTED", error)
    else:
        print("NESTED started")
        jax.profiler.stop_trace()

def second():
    jf(x).block_until_ready()

pf = jax.pmap(lambda x: jnp.tanh(x) * 3.0)       # two devices (PJRT_REF_NUM_DEVICES=2): shard_map body per device

def on_two_devices():
    pf(jnp.ones((2, 3))).block_until_ready()

results = {"first": trace(first), "empty": trace(lambda: None), "second": trace(second),
           "pmap": trace(on_two_devices)}
jf(x).block_until_ready()                     # after the traces: nothing records
assert not live_profile.ACTIVE
line = next(i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "jnp.tanh(x)" in text)
print("TANH_LINE", line)
for name, (events, xplane) in results.items():
    print("RESULT", name, json.dumps(events))
    print("XPLANE", name, xplane.hex())
'''


def _device_events(events: list[dict]) -> list[dict]:
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    return [e for e in events if e.get("ph") == "X" and processes.get(e["pid"]) == "/device:CUSTOM:0"]


def _host_events(events: list[dict], name: str) -> list[dict]:
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    return [e for e in events if e.get("ph") == "X" and processes.get(e["pid"]) == "/host:CPU" and e["name"] == name]


def test_jax_profiler_trace_shows_pjrt_ref_slices(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text("import jax, jax.numpy as jnp, numpy as np\n" + JAX_SCRIPT)
    path = str(script)
    proc = run_jax(f"exec(compile(open({path!r}).read(), {path!r}, 'exec'), {{'__file__': {path!r}}})",
                   timeout=240, PJRT_REF_NUM_DEVICES="2")
    import json
    lines = proc.stdout.splitlines()
    tanh_line = int(next(line for line in lines if line.startswith("TANH_LINE")).split()[1])
    results = {}
    for line in lines:
        if line.startswith("RESULT "):
            _, name, payload = line.split(" ", 2)
            results[name] = json.loads(payload)
    xplanes = {line.split()[1]: bytes.fromhex(line.split()[2]) if len(line.split()) > 2 else b""
               for line in lines if line.startswith("XPLANE ")}

    # first trace: g compiled inside it, f and g executed, op slices with the user's line
    first = _device_events(results["first"])
    names = [e["name"] for e in first]
    assert names.count("execute jit_f") == 1 and names.count("execute jit_g") == 1
    assert names.count("compile jit_g") == 1 and "compile jit_f" not in names
    (tanh,) = [e for e in first if e["name"] == "stablehlo.tanh"]
    assert tanh["args"]["location"].startswith(f"{script}:{tanh_line}:")
    assert tanh["args"]["operands"] == "f32[4,3]" and tanh["args"]["category"] == "op"
    assert "stablehlo.sine" in names
    # our execute slice lies inside JAX's host event for the same call (same clock)
    executes = _host_events(results["first"], "PjRtCApiLoadedExecutable::Execute")
    ours = [e for e in first if e["name"] == "execute jit_f"][0]
    assert any(h["ts"] <= ours["ts"] and ours["ts"] + ours["dur"] <= h["ts"] + h["dur"] + 1 for h in executes)
    # a second trace could not start inside the first
    assert "NESTED" in proc.stdout and "NESTED started" not in proc.stdout

    # the XSpace jaxlib saved holds our plane, decodable field by field
    space = fields(xplanes["first"])
    planes = [decode_plane(p) for p in space[1]]
    (ours_plane,) = [p for p in planes if p["name"] == "/device:CUSTOM:0"]
    assert any(e[1] == "stablehlo.tanh" and e[4]["location"].startswith(f"{script}:{tanh_line}:")
               for e in ours_plane["events"])

    # a trace with nothing run: no pjrt-ref slices; the next trace has only its own
    assert _device_events(results["empty"]) == []
    second = [e["name"] for e in _device_events(results["second"])]
    assert second.count("execute jit_f") == 1 and second.count("stablehlo.tanh") == 1
    assert "execute jit_g" not in second

    # pmap: one execute, the shard_map body's ops once per device, each device on its own thread
    pmap = _device_events(results["pmap"])
    assert [e["args"]["devices"] for e in pmap if "devices" in e["args"]] == ["2"]
    assert len({e["tid"] for e in pmap if e["name"] == "stablehlo.tanh"}) == 2
