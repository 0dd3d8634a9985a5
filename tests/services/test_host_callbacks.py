"""Host callbacks (issue 6.4): jax.debug.print/callback, pure_callback, io_callback.

Under JAX: one child process (JAX_PLATFORMS=pjrt_ref,cpu) runs every program
of tests/support/host_callback_programs.py on pjrt_ref and on JAX's cpu backend;
each test compares what the host saw (printed text, callback arguments in
call order, results, errors). Unordered prints have no order JAX promises
(XLA cpu may hoist one above another), so they are compared as multisets;
ordered effects are compared in order.

In-process: the PJRT side of the mechanism driven from a C-like host
through the shim (PJRT_ExecuteOptions send/recv callbacks,
PJRT_CopyToDeviceStream_*), as a host that is not JAX would use it.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.support.capi_calls import Api, PjrtCallError
from tests.support.host_callback_programs import LOOP_STEPS
from tests.support.jax_support import clean_env, run_python
from tests.support.repo_paths import SUPPORT


@pytest.fixture(scope="module")
def reports() -> dict:
    proc = subprocess.run([sys.executable, str(SUPPORT / "host_callback_programs.py")],
                          env=clean_env(JAX_PLATFORMS="pjrt_ref,cpu"), capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"child exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _both(reports: dict, name: str) -> tuple[dict, dict]:
    return reports[name]["pjrt_ref"], reports[name]["cpu"]


def _lines(text: str, prefix: str = "") -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


# ------------------------------------------------------------- debug.print
def test_debug_print_in_jit_formats_arrays_like_cpu(reports):
    ours, cpu = _both(reports, "print_in_jit")
    assert ours["printed"] == cpu["printed"]
    assert "x=[[0. 1. 2.]\n [3. 4. 5.]] total=15.0 n=7" in ours["printed"]
    assert ours["result"] == cpu["result"]


def test_debug_print_formats_and_printoptions_like_cpu(reports):
    ours, cpu = _both(reports, "print_formats")
    assert len(_lines(ours["printed"])) == 4
    assert sorted(_lines(ours["printed"])) == sorted(_lines(cpu["printed"]))


def test_debug_print_in_scan_prints_every_iteration_in_order(reports):
    ours, cpu = _both(reports, "print_in_scan")
    for prefix in ("step", "ordered"):
        assert len(_lines(ours["printed"], prefix)) == 4
        assert _lines(ours["printed"], prefix) == _lines(cpu["printed"], prefix)
    assert sorted(_lines(ours["printed"])) == sorted(_lines(cpu["printed"]))
    assert ours["result"] == cpu["result"]


def test_debug_print_under_vmap_prints_the_batch(reports):
    ours, cpu = _both(reports, "print_under_vmap")
    assert ours["printed"] and sorted(_lines(ours["printed"])) == sorted(_lines(cpu["printed"]))
    assert ours["result"] == cpu["result"]


def test_debug_print_under_grad_prints_the_primal(reports):
    ours, cpu = _both(reports, "print_under_grad")
    assert ours["printed"] == cpu["printed"] == "w=[0. 1. 2.]\n"
    assert ours["result"] == cpu["result"]


def test_debug_callback(reports):
    ours, cpu = _both(reports, "debug_callback")
    assert len(ours["calls"]) == 1 and ours["calls"] == cpu["calls"]
    assert ours["result"] == cpu["result"]


def test_buffer_callback_sees_what_it_sees_on_cpu(reports):
    """jax.experimental.buffer_callback (frameworks/jax/buffer_callback.py):
    the same context, buffers, results and calls as on cpu."""
    ours, cpu = _both(reports, "buffer_callbacks")
    assert ours["result"] == cpu["result"]
    assert ours["calls"] == cpu["calls"] and ours["side_effect"] == cpu["side_effect"] == [True]
    first = ours["calls"][0]
    assert first["writeable"] == [False, False, True] and "not available" in first["stream"]
    assert {"shared": True} in ours["calls"]


# ------------------------------------------------------------- io_callback
def test_ordered_io_callback_keeps_order_across_iterations_and_calls(reports):
    ours, cpu = _both(reports, "ordered_io_callback")
    assert len(ours["calls"]) == 6 and ours["calls"] == cpu["calls"]
    assert ours["result"] == cpu["result"]


@pytest.mark.parametrize("name", ["unordered_io_callback", "io_callback_without_operands"])
def test_io_callback(reports, name):
    ours, cpu = _both(reports, name)
    assert ours["calls"] and ours["calls"] == cpu["calls"]
    assert ours["result"] == cpu["result"]


def test_ordered_io_callback_in_cond_inside_while(reports):
    ours, cpu = _both(reports, "io_callback_in_cond_and_while")
    assert len(ours["calls"]) == 3 and ours["calls"] == cpu["calls"]     # iterations 0, 2, 4
    assert ours["result"] == cpu["result"]


# ----------------------------------------------------------- pure_callback
@pytest.mark.parametrize("method, calls", [("sequential", 3), ("broadcast_all", 1), ("expand_dims", 1)])
def test_pure_callback_under_vmap(reports, method, calls):
    ours, cpu = _both(reports, f"pure_callback_vmap_{method}")
    assert len(ours["calls"]) == calls and ours["calls"] == cpu["calls"]   # the shapes it was called with
    assert ours["result"] == cpu["result"]


def test_pure_callback_with_several_results_in_a_pytree(reports):
    ours, cpu = _both(reports, "pure_callback_pytree_results")
    assert ours["result"] == cpu["result"]
    assert set(ours["result"]) == {"doubled", "stats", "scaled", "empty"}


def test_every_element_type_crosses_unchanged(reports):
    """bf16, f16, bool, int8, uint32, complex64 and a transposed int16 view, bit for bit."""
    ours, cpu = _both(reports, "callback_dtypes")
    assert len(ours["result"]) == 7 and ours["result"] == cpu["result"]


# ------------------------------------------------------------------ errors
def test_exception_in_a_callback_is_an_error_and_the_host_survives(reports):
    ours, cpu = _both(reports, "callback_raises")
    assert ours["error"]["raised"] == cpu["error"]["raised"] == "JaxRuntimeError"
    assert "boom from the callback" in ours["error"]["message"]
    assert re.search(r"'stablehlo.send' at \S*host_callback_programs\.py:\d+", ours["error"]["message"])
    assert "boom from the callback" in cpu["error"]["message"]
    assert ours["after"] == cpu["after"]                 # the next program runs normally


def test_wrong_result_shape_is_a_clear_error(reports):
    """The line that called the callback, then JAX's own words for cpu's check."""
    ours, cpu = _both(reports, "callback_wrong_shape")
    assert ours["error"]["raised"] == cpu["error"]["raised"] == "JaxRuntimeError"
    jax_words = "Incorrect output shape for return value #0: Expected: (3,), Actual: (4,)"
    assert jax_words in cpu["error"]["message"]
    assert re.search(r"pure_callback at \S*host_callback_programs\.py:\d+: " + re.escape(jax_words),
                     ours["error"]["message"])


def test_output_appears_while_the_step_runs(reports):
    """The callback before a loop runs before the loop, not when the step ends."""
    ours, cpu = _both(reports, "output_during_step")
    steps = LOOP_STEPS
    assert ours["ticks_seen"] == cpu["ticks_seen"] == {"before": 0, "after": steps}


def test_debug_print_when_the_plugin_is_registered_from_the_environment():
    """PJRT_NAMES_AND_LIBRARY_PATHS registers pjrt_ref after the entry point ran."""
    from pjrt_ref import library_path
    proc = run_python("""
        import jax, jax.numpy as jnp
        f = jax.jit(lambda x: (jax.debug.print("x={}", x), x + 1)[1])
        for platform in ("pjrt_ref", "cpu"):
            with jax.default_device(jax.devices(platform)[0]):
                print(platform, f(jnp.arange(3.0)))
                jax.effects_barrier()
    """, JAX_PLATFORMS="pjrt_ref,cpu", PJRT_NAMES_AND_LIBRARY_PATHS=f"pjrt_ref:{library_path()}")
    assert proc.stdout.splitlines() == ["x=[0. 1. 2.]", "pjrt_ref [1. 2. 3.]", "x=[0. 1. 2.]", "cpu [1. 2. 3.]"]


SEVERAL_DEVICES = """
import contextlib, io, json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

devices = jax.devices(sys.argv[1])[:2]
report = {}

def capture(name, fn):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = np.asarray(fn())
        jax.effects_barrier()
    report[name] = {"printed": sorted(out.getvalue().splitlines()), "result": result.tolist()}

def each_device(x):
    jax.debug.print("device sees {}", x)
    return jax.pure_callback(lambda a: np.asarray(a * 10), jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1

pmapped = jax.pmap(each_device, devices=devices)
for run in range(8):      # the devices run concurrently: each must use its own callbacks every time
    capture(f"pmap {run}", lambda: pmapped(jnp.arange(4.0).reshape(2, 2)))
mesh = Mesh(np.array(devices), ("i",))
x = jax.device_put(jnp.arange(4.0), NamedSharding(mesh, P("i")))
capture("sharded_jit", lambda: jax.jit(each_device)(x))
print(json.dumps(report))
"""


def test_callbacks_on_two_devices_pmap_and_sharded_jit():
    """pmap runs the callbacks once per device; a sharded jit once, on the whole array."""
    runs = {}
    for platform, env in (("pjrt_ref", {"JAX_PLATFORMS": "pjrt_ref,cpu", "PJRT_REF_NUM_DEVICES": "2"}),
                          ("cpu", {"JAX_PLATFORMS": "cpu",
                                   "XLA_FLAGS": "--xla_force_host_platform_device_count=2"})):
        proc = run_python(SEVERAL_DEVICES.replace("sys.argv[1]", repr(platform)), **env)
        runs[platform] = json.loads(proc.stdout.splitlines()[-1])
    assert runs["pjrt_ref"] == runs["cpu"]
    for run in range(8):
        assert runs["pjrt_ref"][f"pmap {run}"]["printed"] == ["device sees [0. 1.]", "device sees [2. 3.]"]
    assert runs["pjrt_ref"]["sharded_jit"]["printed"] == ["device sees [0. 1. 2. 3.]"]
    assert runs["pjrt_ref"]["sharded_jit"]["result"] == [1.0, 11.0, 21.0, 31.0]


# ------------------------------------------------- the C side, without JAX
SEND_THEN_RECV = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %t0 = stablehlo.create_token : !stablehlo.token
  %t1 = "stablehlo.send"(%x, %t0) {channel_handle = #stablehlo.channel_handle<handle = 5, type = 2>,
                                   is_host_transfer = true} : (tensor<3xf32>, !stablehlo.token) -> !stablehlo.token
  %r:2 = "stablehlo.recv"(%t1) {channel_handle = #stablehlo.channel_handle<handle = 6, type = 3>,
                                is_host_transfer = true} : (!stablehlo.token) -> (tensor<3xf32>, !stablehlo.token)
  %y = stablehlo.add %r#0, %x : tensor<3xf32>
  return %y : tensor<3xf32>
}
"""


class CHost:
    """A host written against the C API: it doubles what the device sends it."""

    def __init__(self, api: Api, *, fail_send: bool = False, extra_bytes: int = 0) -> None:
        from pjrt_ref.capi_shim._pjrt_ref_shim import ffi
        self.api, self.ffi = api, ffi
        self.fail_send, self.extra_bytes = fail_send, extra_bytes
        self.sent: list[np.ndarray] = []
        self.freed = 0
        self.stream_sizes: list[tuple[int, int]] = []
        self.send_fn = ffi.callback("PJRT_SendCallback", self.on_send)
        self.recv_fn = ffi.callback("PJRT_RecvCallback", self.on_recv)
        self.deleter = ffi.callback("void(void*, void*)", self.on_free)

    def on_send(self, chunk, callback_error, total_size, done, user_arg):
        data = bytes(self.ffi.buffer(chunk.data, chunk.size))
        chunk.deleter(chunk.data, chunk.deleter_arg)          # the host owns the chunk now
        if self.fail_send:
            message = b"the host refuses this value"
            return callback_error[0](3, message, len(message))  # INVALID_ARGUMENT
        self.sent.append(np.frombuffer(data, np.float32).copy())
        return self.ffi.NULL

    def on_recv(self, stream, user_arg):
        total = self.api.call("PJRT_CopyToDeviceStream_TotalBytes", stream=stream).total_bytes
        granule = self.api.call("PJRT_CopyToDeviceStream_GranuleSize", stream=stream).granule_size_in_bytes
        self.stream_sizes.append((total, granule))
        data = (self.sent[-1] * 2).tobytes() + b"\0" * self.extra_bytes
        buffer = self.ffi.new("char[]", data)
        self.keep = buffer
        chunk = self.ffi.new("PJRT_Chunk*", {"data": buffer, "size": len(data), "deleter": self.deleter})
        args = self.api.call("PJRT_CopyToDeviceStream_AddChunk", stream=stream, chunk=chunk)
        event_error = self.api.raw("PJRT_Event_Error", self.api.args("PJRT_Event_Error",
                                                                      event=args.transfer_complete))
        self.chunk_error = None if event_error == self.ffi.NULL else self.api.take_error(event_error)
        self.api.call("PJRT_Event_Destroy", event=args.transfer_complete)
        self.api.call("PJRT_CopyToDeviceStream_Destroy", stream=stream)

    def on_free(self, data, arg):
        self.freed += 1

    def execute(self, client, loaded, x: np.ndarray, *, send: bool = True, recv: bool = True) -> np.ndarray:
        """Execute with our send callback (channel 5) and recv callback (channel 6), or without."""
        ffi, api = self.ffi, self.api
        sends = ffi.new("PJRT_SendCallbackInfo[]", [{"channel_id": 5, "send_callback": self.send_fn}])
        recvs = ffi.new("PJRT_RecvCallbackInfo[]", [{"channel_id": 6, "recv_callback": self.recv_fn}])
        send_lists = ffi.new("PJRT_SendCallbackInfo*[]", [sends])
        recv_lists = ffi.new("PJRT_RecvCallbackInfo*[]", [recvs])
        options = ffi.new("PJRT_ExecuteOptions*", {"struct_size": ffi.sizeof("PJRT_ExecuteOptions")})
        if send:
            options.send_callbacks, options.num_send_ops = send_lists, 1
        if recv:
            options.recv_callbacks, options.num_recv_ops = recv_lists, 1
        row = ffi.new("PJRT_Buffer*[]", [api.buffer(client, x)])
        out_row = ffi.new("PJRT_Buffer*[]", 1)
        api.call("PJRT_LoadedExecutable_Execute", executable=loaded, options=options,
                 argument_lists=ffi.new("PJRT_Buffer**[]", [row]), num_devices=1, num_args=1,
                 output_lists=ffi.new("PJRT_Buffer**[]", [out_row]))
        return api.to_host(out_row[0], np.float32, (3,))


@pytest.fixture(scope="module")
def program(api):
    client = api.client()
    yield client, api.compile(client, SEND_THEN_RECV)
    api.call("PJRT_Client_Destroy", client=client)


X = np.array([1.0, -2.0, 3.5], np.float32)


def test_c_host_serves_send_and_recv(api, program):
    host = CHost(api)
    out = host.execute(*program, X)
    np.testing.assert_array_equal(out, X + 2 * X)       # recv gave 2x, the program adds x
    np.testing.assert_array_equal(host.sent[0], X)
    assert host.stream_sizes == [(12, 1)] and host.chunk_error is None
    assert host.freed == 1                               # AddChunk took the chunk and freed it


def test_a_program_with_host_transfers_needs_callbacks(api, program):
    """As when JAX's program is run from a C host, or deserialized in another process."""
    with pytest.raises(PjrtCallError) as info:
        CHost(api).execute(*program, X, send=False, recv=False)
    assert info.value.code == 14                         # UNAVAILABLE
    assert "'stablehlo.send'" in info.value.message and "none were given" in info.value.message


def test_a_channel_without_a_callback_is_named(api, program):
    with pytest.raises(PjrtCallError) as info:
        CHost(api).execute(*program, X, send=False)
    assert info.value.code == 9                          # FAILED_PRECONDITION
    assert "stablehlo.send on host channel 5" in info.value.message
    assert "no send callback" in info.value.message


def test_a_failing_send_callback_fails_the_execution_with_its_error(api, program):
    with pytest.raises(PjrtCallError) as info:
        CHost(api, fail_send=True).execute(*program, X)
    assert info.value.code == 3 and "the host refuses this value" in info.value.message


def test_a_chunk_past_the_stream_size_is_an_error(api, program):
    host = CHost(api, extra_bytes=4)
    with pytest.raises(PjrtCallError) as info:
        host.execute(*program, X)
    assert host.chunk_error is not None and "expects 12 bytes" in host.chunk_error[1]
    assert "delivered 0 bytes" in info.value.message and "channel 6" in info.value.message
