"""Resource limits (pjrt_ref/limits.py): PJRT_REF_MAX_STEPS, PJRT_REF_MAX_BYTES, Ctrl-C under JAX."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.support.capi_calls import PjrtCallError
from pjrt_ref.errors import ErrorCode, ResourceExhausted
from pjrt_ref.interpreter import load
from tests.support.jax_support import clean_env, run_jax

RESOURCE_EXHAUSTED = int(ErrorCode.RESOURCE_EXHAUSTED)

# Counts i up to n. Integer-only cond/body: numba compiles the whole loop (interpreter/optimiser/loops.py).
COUNT = """func.func @main(%n: tensor<i32>) -> tensor<i32> {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %r = stablehlo.while(%i = %zero) : tensor<i32>
    cond {
      %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %next = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %next : tensor<i32>
    } loc("count.py":3:7)
  return %r : tensor<i32>
}"""

# The same loop carrying a vector summed by a reduce: stays interpreted.
COUNT_WITH_REDUCE = """func.func @main(%n: tensor<i32>) -> tensor<i32> {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %v = stablehlo.constant dense<1> : tensor<2xi32>
  %r = stablehlo.while(%i = %zero) : tensor<i32>
    cond {
      %c = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    } do {
      %s = stablehlo.reduce(%v init: %zero) applies stablehlo.add across dimensions = [0]
        : (tensor<2xi32>, tensor<i32>) -> tensor<i32>
      %half = stablehlo.constant dense<2> : tensor<i32>
      %step = stablehlo.divide %s, %half : tensor<i32>
      %next = stablehlo.add %i, %step : tensor<i32>
      stablehlo.return %next : tensor<i32>
    } loc("reduce.py":5:1)
  return %r : tensor<i32>
}"""


@pytest.mark.parametrize("source, where", [(COUNT, "count.py:3"), (COUNT_WITH_REDUCE, "reduce.py:5")])
def test_max_steps_stops_a_loop_naming_op_location_and_count(monkeypatch, source, where):
    monkeypatch.setenv("PJRT_REF_MAX_STEPS", "1000")
    program = load(source)
    assert int(program(np.int32(1000))[0]) == 1000          # exactly the limit: fine
    with pytest.raises(ResourceExhausted) as info:
        program(np.int32(10**9))
    message = str(info.value)
    assert info.value.code == ErrorCode.RESOURCE_EXHAUSTED
    assert "stablehlo.while" in message and where in message and "after 1000 iterations" in message, message


def test_compiled_loops_run_in_chunks_without_a_limit(monkeypatch):
    monkeypatch.delenv("PJRT_REF_MAX_STEPS", raising=False)
    from pjrt_ref.interpreter.optimiser import loops
    assert int(load(COUNT)(np.int32(3 * loops.CHUNK + 5))[0]) == 3 * loops.CHUNK + 5


def test_max_steps_under_jax():
    proc = run_jax("""
        f = jax.jit(lambda n: jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2.0), (0, 1.0)))
        print(f(50)[0])
        try:
            f(10**6)
        except Exception as e:
            print(type(e).__name__, e)
    """, PJRT_REF_MAX_STEPS="100")
    assert "50" in proc.stdout
    assert "RESOURCE_EXHAUSTED" in proc.stdout and "stablehlo.while" in proc.stdout, proc.stdout
    assert "after 100 iterations" in proc.stdout and "test_limits" not in proc.stdout


# -------------------------------------------------------------- max bytes
def test_host_transfer_over_the_limit_fails_before_reading(api, monkeypatch):
    """dims claim 8 TiB behind a 4-byte array: refused up front, the pointer is never read."""
    from pjrt_ref.capi_shim._pjrt_ref_shim import ffi, lib
    monkeypatch.delenv("PJRT_REF_MAX_BYTES", raising=False)      # default: available memory
    client = api.client()
    small = np.zeros(1, np.float32)
    dims = ffi.new("int64_t[]", [1 << 20, 1 << 21])
    with pytest.raises(PjrtCallError) as info:
        api.call("PJRT_Client_BufferFromHostBuffer", client=client, data=ffi.cast("void*", small.ctypes.data),
                 type=lib.PJRT_Buffer_Type_F32, dims=dims, num_dims=2,
                 host_buffer_semantics=lib.PJRT_HostBufferSemantics_kImmutableOnlyDuringCall)
    assert info.value.code == RESOURCE_EXHAUSTED and "available memory" in info.value.message
    monkeypatch.setenv("PJRT_REF_MAX_BYTES", "1000")
    with pytest.raises(PjrtCallError) as info:
        api.buffer(client, np.zeros(1000, np.float32))
    assert info.value.code == RESOURCE_EXHAUSTED and "4000 bytes" in info.value.message
    assert "PJRT_REF_MAX_BYTES" in info.value.message
    buffer = api.buffer(client, np.zeros(250, np.float32))               # exactly 1000 bytes: fine
    api.call("PJRT_Buffer_Destroy", buffer=buffer)
    shape = ffi.new("int64_t[]", [1 << 30])
    with pytest.raises(PjrtCallError) as info:
        api.call("PJRT_Client_CreateUninitializedBuffer", client=client, shape_dims=shape, shape_num_dims=1,
                 shape_element_type=lib.PJRT_Buffer_Type_F32)
    assert info.value.code == RESOURCE_EXHAUSTED
    api.call("PJRT_Client_Destroy", client=client)


def test_program_result_over_the_limit_fails_at_compile(api, monkeypatch):
    big = """func.func @main(%x: tensor<f32>) -> tensor<1000000x1000000xf32> {
      %0 = stablehlo.broadcast_in_dim %x, dims = [] : (tensor<f32>) -> tensor<1000000x1000000xf32> loc("big.py":9:2)
      return %0 : tensor<1000000x1000000xf32>
    }"""
    monkeypatch.delenv("PJRT_REF_MAX_BYTES", raising=False)
    client = api.client()
    with pytest.raises(PjrtCallError) as info:
        api.compile(client, big)
    message = info.value.message
    assert info.value.code == RESOURCE_EXHAUSTED, message
    assert "stablehlo.broadcast_in_dim" in message and "big.py:9" in message and "4000000000000 bytes" in message
    monkeypatch.setenv("PJRT_REF_MAX_BYTES", "100")
    with pytest.raises(PjrtCallError) as info:
        api.compile(client, big.replace("1000000x1000000", "5x6"))
    assert info.value.code == RESOURCE_EXHAUSTED and "120 bytes" in info.value.message
    api.call("PJRT_Client_Destroy", client=client)


# ------------------------------------------------------------------ Ctrl-C
_COMPILABLE = "lambda x: jax.lax.while_loop(lambda c: c[0] != -1, lambda c: (c[0] + 2, c[1] * 3 + 1), (0, 0))"
INFINITE_LOOPS = {
    # interpreted (a reduce in the body); numba-compiled (integers only) before
    # the program runs; and the same loop interpreted while its kernel builds
    # in the background (at exit the build finishes, and the process must
    # still exit as interrupted: background._keep_interrupted_exit)
    "interpreted": ("lambda x: jax.lax.while_loop(lambda c: c[0] < 2**30, "
                    "lambda c: (c[0] + 1, c[1] + jnp.sum(c[1]) * 0), (0, x))", "1"),
    "compiled": (_COMPILABLE, "0"),
    "compiling": (_COMPILABLE, "1"),
}


@pytest.mark.parametrize("runtime", ["shared", "isolated"])
@pytest.mark.parametrize("kind", sorted(INFINITE_LOOPS))
def test_ctrl_c_under_jax_is_a_keyboard_interrupt(kind, runtime, tmp_path):
    """SIGINT while a jitted infinite-ish loop runs: a Python traceback ending
    in KeyboardInterrupt, whether the plugin runs in the host's Python or in
    its own (PJRT_REF_RUNTIME)."""
    loop, background = INFINITE_LOOPS[kind]
    cache = tmp_path / "cache"          # empty: "compiling" really builds its kernel
    code = textwrap.dedent(f"""
        import jax, jax.numpy as jnp
        f = jax.jit({loop}).lower(jnp.ones(3)).compile()
        print("start", flush=True)
        f(jnp.ones(3))
        print("finished", flush=True)
    """)
    # As from a shell: the child must not inherit an ignored SIGINT (Python
    # then installs no handler and the ^C is lost). In full runs under JAX
    # 0.12 the child never saw the ^C; with pytest's SIGINT handled while it
    # starts, it does. (No preexec_fn: forking a threaded process to run Python.)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                env=clean_env(JAX_PLATFORMS="pjrt_ref", PJRT_REF_JIT_BACKGROUND=background,
                                              PJRT_REF_CACHE_DIR=str(cache), PJRT_REF_RUNTIME=runtime))
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert proc.stdout.readline().strip() == "start"
        import time
        time.sleep(1)                    # compiled: the call is under way
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGINT, (proc.returncode, err[-3000:])   # Python's exit for an uncaught ^C
    assert "finished" not in out
    last = err.strip().splitlines()[-1]
    assert last == "KeyboardInterrupt", err[-3000:]
    assert "Traceback (most recent call last)" in err
    assert "Fatal" not in err and "Check failure" not in err, err[-3000:]


def test_the_plugin_leaves_the_hosts_sigint_handler_alone():
    """Ctrl-C stays the host's: compiling and running on pjrt_ref (bytecode
    checker, helper threads, numba) installs no SIGINT handler of its own."""
    run_jax("""
        import signal
        before = signal.getsignal(signal.SIGINT)
        f = jax.jit(lambda x: jnp.tanh(x) @ x.T)
        print(f(jnp.ones((300, 300))).sum())
        assert signal.getsignal(signal.SIGINT) is before, signal.getsignal(signal.SIGINT)
    """)
