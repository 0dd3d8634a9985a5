"""Kernels compiled in the background (interpreter/optimiser/background.py): a
fused run whose numba kernel was never built on the machine runs on numpy
until the background thread switches it to its compiled loop, with the same
bits before and after; a kernel built before loads at plan time."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from tests.support.jit_support import assert_same_values
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402
from pjrt_ref.interpreter.optimiser import background  # noqa: E402
from pjrt_ref.interpreter.native import codegen  # noqa: E402

N = 200_001    # several chunks of the numpy form and pieces of the compiled loop


def _x(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(N) * rng.choice([1e-3, 1.0, 30.0], N)).astype(np.float32)
    x[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 88.0]
    return x


def _gelu_like(x):
    return jnp.tanh(x * 0.7 + 0.1) * jax.nn.sigmoid(x) + jnp.exp(-jnp.abs(x))


# Each test needs a kernel this process has not built: runs of other shapes.
def _tanh_tanh(x):
    return jnp.tanh(jnp.tanh(x) + x) * 2


def _sigmoid_of_exp(x):
    return jax.nn.sigmoid(jnp.exp(x * 0.01) - x)


def _exp_tanh(x):
    return jnp.exp(jnp.tanh(x) - 1) + x


def _fused_steps(program) -> list:
    return [s for s in program.function.body.steps if s.op.name == "pjrt_ref.fused"]


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """Background compiling on, with a kernel cache that has never seen a kernel."""
    monkeypatch.setenv("PJRT_REF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PJRT_REF_JIT_BACKGROUND", "1")
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1")
    monkeypatch.setenv("PJRT_REF_JIT", "1")
    yield tmp_path
    assert background.wait(timeout=120)


def _plain(text: str, x: np.ndarray, monkeypatch) -> list:
    with monkeypatch.context() as patch:
        patch.setenv("PJRT_REF_OPTIMIZE", "0")
        return load(text)(x)


def _switch_after_a_first_run(text, x, monkeypatch, op_name: str):
    """Load `text` with the background thread held, run it on its `op_name`
    step's first form, let the kernel build, run again: (step, first form).
    Both runs give the unoptimised program's bits."""
    reference = _plain(text, x, monkeypatch)
    release = background._BUILDING
    release.acquire()         # hold the background thread before it compiles
    try:
        program = load(text)
        (step,) = [s for s in program.function.body.steps if s.op.name == op_name]
        assert isinstance(step.kernel, background.Switchable)
        first_form = step.kernel.current
        for a, b in zip(program(x), reference):
            assert_same_values(a, b)
        assert step.kernel.current is first_form and background.pending() == 1
    finally:
        release.release()
    assert background.wait(timeout=120)
    for a, b in zip(program(x), reference):
        assert_same_values(a, b)
    assert codegen.is_built(step.op.attrs["source"])
    return step, first_form


def test_a_new_kernel_runs_on_numpy_then_switches_to_its_compiled_loop(empty_cache, monkeypatch):
    x = _x()
    step, numpy_form = _switch_after_a_first_run(lower_to_text(_gelu_like, x), x, monkeypatch,
                                                 "pjrt_ref.fused")
    assert step.op.attrs["background"]
    assert step.kernel.current is not numpy_form           # the compiled loop


def _integer_round(x):   # shifts, wrap-around, division: the integer ops' chunked form
    rotated = (x << jnp.uint32(13)) | (x >> jnp.uint32(19))
    return (rotated ^ (x * jnp.uint32(0x9E3779B9))) + x // jnp.uint32(7)


def test_an_integer_run_runs_on_numpy_then_switches_to_its_compiled_loop(empty_cache, monkeypatch):
    x = np.random.default_rng(3).integers(0, 2 ** 32, N, dtype=np.uint32)
    x[:4] = [0, 1, 2 ** 31, 2 ** 32 - 1]
    step, numpy_form = _switch_after_a_first_run(lower_to_text(_integer_round, x), x, monkeypatch,
                                                 "pjrt_ref.fused")
    assert step.kernel.current is not numpy_form


def _another_integer_round(x):   # a kernel no other test builds
    rotated = (x << jnp.uint32(7)) | (x >> jnp.uint32(25))
    return (rotated + (x ^ jnp.uint32(0x85EBCA6B))) * x % jnp.uint32(1000003)


def test_a_long_call_on_numpy_finishes_on_the_compiled_loop(empty_cache, monkeypatch):
    """A call of a fused run's numpy form that would still run long once the
    kernel is queued (10^8 elements) hands the rest of its elements to the
    compiled loop as soon as it is built: the same bits, all of them written."""
    from pjrt_ref.interpreter.optimiser import fusion

    monkeypatch.setattr(fusion, "LONG_CALL_SECONDS", 0.0)   # any call counts as long
    monkeypatch.setattr(fusion, "FIRST_FORM_CHUNK", fusion.CHUNK)
    x = np.random.default_rng(4).integers(0, 2 ** 32, N + 2 ** 17, dtype=np.uint32)
    text = lower_to_text(_another_integer_round, x)
    reference = _plain(text, x, monkeypatch)
    program = load(text)
    (step,) = _fused_steps(program)
    switch = step.kernel
    assert isinstance(switch, background.Switchable)
    for a, b in zip(program(x), reference):     # queued in this call, maybe finished by it
        assert_same_values(a, b)
    assert background.wait(timeout=120) and switch.built() is not None
    finished = []
    compiled = switch.built()
    original_finish = compiled.finish
    compiled.finish = lambda values, outs, start: (finished.append(start),
                                                   original_finish(values, outs, start))
    # A call that began on numpy before the build ended: it finds the loop at its first check.
    switch.current = switch.first
    monkeypatch.setattr(background.Switchable, "built",
                        lambda self: compiled if self is switch else None)
    for a, b in zip(program(x), reference):
        assert_same_values(a, b)
    assert finished == [fusion.CHUNK]     # after the first chunk, on numpy


def _small_loop(x):   # W6's shape: a compiled `while` (optimiser/loops.py), with a capture
    scale = jnp.float32(0.97) + x[0] * 0
    return jax.lax.fori_loop(0, 300, lambda i, c: c * scale + 0.01 * jnp.sin(c) + i * 1e-4, x)


def test_a_new_loop_runs_interpreted_then_switches_to_its_compiled_loop(empty_cache, monkeypatch):
    """A compiled `while` whose kernel numba must build runs as the interpreted
    loop meanwhile (its regions fused), with the same bits before and after."""
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    step, interpreted = _switch_after_a_first_run(lower_to_text(_small_loop, x), x, monkeypatch,
                                                  "pjrt_ref.compiled_while")
    assert step.regions and interpreted.__name__ == "interpreted_while"
    assert step.kernel.current.__name__ == "compiled_while"


def _short_loop(x):
    return jax.lax.fori_loop(0, 3, lambda i, c: c * 0.5 + jnp.cos(c), x)


def _tanh_times_sigmoid(x):    # a fused run no other test builds
    return jnp.tanh(x * 1.3 - 0.2) * jax.nn.sigmoid(x * 0.5) + jnp.exp(-jnp.abs(x) * 2.0)


BRIEF_RUNS = {   # (program, its step's op, the compiled kernel's name)
    "loop": (_short_loop, lambda: np.linspace(-1, 1, 16, dtype=np.float32), "pjrt_ref.compiled_while",
             "compiled_while"),
    "fused run": (_tanh_times_sigmoid, _x, "pjrt_ref.fused", "fused"),
}


@pytest.mark.parametrize("kind", list(BRIEF_RUNS))
def test_what_runs_briefly_is_never_compiled(kind, empty_cache, monkeypatch):
    """Below PJRT_REF_JIT_HOT_SECONDS of running interpreted (a loop) or on
    numpy (a fused run) no kernel is queued: a test suite's thousands of
    short loops would each pay a compile, and numba's import, holding the
    GIL in long stretches, slowed a fresh process's first runs (W0). Past
    it, the build is queued and the step switches."""
    fn, make_x, op_name, compiled_name = BRIEF_RUNS[kind]
    monkeypatch.setenv("PJRT_REF_JIT_HOT_SECONDS", "3600")
    x = make_x()
    text = lower_to_text(fn, x)
    reference = _plain(text, x, monkeypatch)
    program = load(text)
    (step,) = [s for s in program.function.body.steps if s.op.name == op_name]
    for _ in range(3):
        for a, b in zip(program(x), reference):
            assert_same_values(a, b)
    assert background.pending() == 0 and step.kernel.built() is None

    monkeypatch.setenv("PJRT_REF_JIT_HOT_SECONDS", "1e-9")
    program = load(text)
    (step,) = [s for s in program.function.body.steps if s.op.name == op_name]
    for a, b in zip(program(x), reference):          # hot after one run: queued
        assert_same_values(a, b)
    assert background.wait(timeout=120)
    assert step.kernel.current.__name__ == compiled_name
    for a, b in zip(program(x), reference):
        assert_same_values(a, b)


def test_a_kernel_built_before_loads_when_the_program_does(empty_cache, monkeypatch):
    x = _x(1)
    text = lower_to_text(_tanh_tanh, x)
    load(text)
    assert background.wait(timeout=120)
    (step,) = _fused_steps(load(text))
    assert not isinstance(step.kernel, background.Switchable)
    for a, b in zip(load(text)(x), _plain(text, x, monkeypatch)):
        assert_same_values(a, b)


def test_switched_off_every_kernel_compiles_before_the_program_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("PJRT_REF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PJRT_REF_JIT_BACKGROUND", "0")
    (step,) = _fused_steps(load(lower_to_text(_exp_tanh, _x())))
    assert not isinstance(step.kernel, background.Switchable) and background.pending() == 0


def test_a_kernel_numba_cannot_compile_leaves_the_run_on_numpy(empty_cache, monkeypatch):
    from numba.core.errors import NumbaError

    def refuse(*args, **kwargs):
        raise NumbaError("refused by the test")

    monkeypatch.setattr(codegen, "compile_fused", refuse)
    x = _x(2)
    text = lower_to_text(_sigmoid_of_exp, x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = load(text)
        (step,) = _fused_steps(program)
        numpy_form = step.kernel.current
        assert background.wait(timeout=120)
    assert step.kernel.current is numpy_form
    assert any("not compiled" in str(w.message) for w in caught)
    for a, b in zip(program(x), _plain(text, x, monkeypatch)):
        assert_same_values(a, b)


@pytest.mark.parametrize("fn", [
    lambda x: (jnp.tanh(x * 2 + 1) * jax.nn.sigmoid(x) - x, jnp.exp(-x) * x),
    lambda x: jnp.where(x < 0.5, jnp.sqrt(jnp.abs(x)), jnp.expm1(x * 0.01)) * 3,
    lambda x: (x.astype(jnp.float64) * 3 + 1).astype(jnp.float32) - jnp.tanh(x),
], ids=["two-outputs", "select-sqrt-expm1", "converts"])
def test_the_numpy_form_gives_the_compiled_loops_bits(fn, empty_cache, monkeypatch):
    x = _x(3)
    text = lower_to_text(fn, x)
    release = background._BUILDING
    release.acquire()
    try:
        program = load(text)
        assert any(isinstance(s.kernel, background.Switchable) for s in _fused_steps(program))
        early = program(x)                # the numpy form
    finally:
        release.release()
    assert background.wait(timeout=120)
    late = load(text)(x)                  # built now: the compiled loop at plan time
    for a, b, c in zip(early, late, _plain(text, x, monkeypatch)):
        assert_same_values(a, c)
        assert_same_values(b, c)


def test_a_process_exits_cleanly_while_a_kernel_compiles(tmp_path):
    """Exit right after a load that queued a kernel: the thread finishes
    the kernel (never stopped inside LLVM) and the process exits 0."""
    code = textwrap.dedent(f"""
        import numpy as np, jax, jax.numpy as jnp
        from pjrt_ref.interpreter import load
        from pjrt_ref.interpreter.optimiser import background
        x = np.linspace(-3, 3, {N}, dtype=np.float32)
        text = jax.jit(lambda x: jnp.tanh(x * 0.7) * jax.nn.sigmoid(x)).lower(x).as_text()
        load(text)(x)
        print("queued", background.pending())
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PJRT_REF_")}
    env.update(JAX_PLATFORMS="cpu", PJRT_REF_CACHE_DIR=str(tmp_path), PJRT_REF_JIT_BACKGROUND="1",
               PJRT_REF_JIT_HOT_SECONDS="0")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["queued", "1"]


def test_kernels_queued_while_a_program_is_planned_start_after_the_plan(empty_cache):
    import threading

    started = threading.Event()
    switch = background.Switchable(lambda op, x: x)

    def build():
        started.set()
        return None                      # "numba could not": the step keeps its first kernel

    with background.while_planning():
        background.build_later(build, switch)
        assert not started.wait(0.3)     # held while the plan goes on
    assert started.wait(60)
    assert background.wait(timeout=60)


def test_loading_a_program_plans_inside_while_planning(empty_cache, monkeypatch):
    import contextlib

    held = []
    real = background.while_planning

    @contextlib.contextmanager
    def recording():
        with real():
            held.append(True)
            yield
            held.append(False)
    monkeypatch.setattr(background, "while_planning", recording)
    x = _x(2)
    text = lower_to_text(_exp_tanh, x)
    program = load(text)
    assert held == [True, False] and _fused_steps(program)


def test_a_kernel_built_by_an_earlier_process_loads_in_the_background_until_numba_has_started(tmp_path):
    """numba's import alone outlasts a fresh process's first result: before numba
    has started in a process, even a kernel built on disk by an earlier process
    loads in the background (the first calls run on numpy); once it has, a built
    kernel loads with the program."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        from pjrt_ref.interpreter import load
        from pjrt_ref.interpreter.optimiser import background
        text = open(sys.argv[1]).read()
        x = np.linspace(-3, 3, 200_001, dtype=np.float32)
        first = load(text)
        fused = [s for s in first.function.body.steps if s.op.name == "pjrt_ref.fused"]
        print("switchable", isinstance(fused[0].kernel, background.Switchable), "numba" in sys.modules)
        result = first(x)[0]
        assert background.wait(timeout=120)
        again = [s for s in load(text).function.body.steps if s.op.name == "pjrt_ref.fused"]
        print("after", isinstance(again[0].kernel, background.Switchable),
              bool(np.array_equal(result, first(x)[0])))
    """)
    program = tmp_path / "program.mlir"
    program.write_text(lower_to_text(_tanh_tanh, np.linspace(-3, 3, 200_001, dtype=np.float32)))
    env = {**os.environ, "PJRT_REF_CACHE_DIR": str(tmp_path / "cache"), "PJRT_REF_JIT_BACKGROUND": "1",
           "JAX_PLATFORMS": "cpu"}
    runs = [subprocess.run([sys.executable, "-c", script, str(program)], capture_output=True, text=True,
                           timeout=300, env=env) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert runs[0].stdout.splitlines() == ["switchable True False", "after False True"]   # built here
    assert runs[1].stdout.splitlines() == ["switchable True False", "after False True"]   # built before


def _sine_of_tanh(x):
    return jnp.sin(jnp.tanh(x) * 3) - x


def _cosine_of_exp(x):
    return jnp.cos(jnp.exp(x * 0.02) * 3) + x


@pytest.mark.parametrize("hot_seconds, function", [("0", _sine_of_tanh), ("1000", _cosine_of_exp)])
def test_a_dropped_program_leaves_nothing_to_the_cycle_collector(empty_cache, monkeypatch, hot_seconds,
                                                                  function):
    """A fused run's numpy form, its switch and the build queued for it hold
    one another weakly: a program let go is freed at once, before and after
    its kernel is built, as JAX's `core_test.test_reference_cycles_jit`
    expects of any jit (it counts what a collection finds)."""
    import gc

    monkeypatch.setenv("PJRT_REF_JIT_HOT_SECONDS", hot_seconds)
    x = _x(9)
    program = load(lower_to_text(function, x))
    (step,) = _fused_steps(program)
    assert isinstance(step.kernel, background.Switchable)
    program(x)
    if hot_seconds == "0":
        assert background.wait(timeout=120) and step.kernel.built() is not None
        program(x)
    del step
    gc.collect()
    debug = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        del program
        assert gc.collect() == 0, gc.garbage[:10]
    finally:
        gc.set_debug(debug)
        gc.garbage.clear()
