"""float32 exp, expm1, tanh, logistic, sine and cosine compiled into fused loops
(interpreter/native/vector_math.py) against the interpreter without numba
(PJRT_REF_JIT=0), the plain interpreter (PJRT_REF_OPTIMIZE=0) and XLA CPU.

The bound documented in vector_math.py: at most 1 ulp of float32 from the
unfused result (numpy's float64 function rounded to float32), and equal to
it except on rare near-halfway inputs. The inputs here are fixed, so the
tests are deterministic: edge values, one float32 bit pattern in every 4099
(all exponents, both signs, subnormals, NaN payloads) and random values.
XLA CPU uses float32 approximations of its own: measured on the same bit
patterns they are up to 5 ulp (exp, expm1), 4 ulp (tanh), 2 ulp
(logistic) and 1 ulp (sine, cosine, for every finite input) from the
correctly rounded result, and exp flushes results below float32's
smallest normal to 0; the comparison with XLA allows that.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.support.jit_support import assert_same_values, load_with, ordered  # noqa: E402
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402


TINY = float(np.finfo(np.float32).tiny)
MAX = float(np.finfo(np.float32).max)
EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-40, -1e-40, TINY, -TINY,
         1e-30, -1e-30, 2.0**-24, -2.0**-24, 2.0**-12, 1e-3, -1e-3, 0.5, -0.5, 1.0, -1.0,
         0.34657359, -0.34657359, 9.01, -9.01, 9.1, -9.1, 17.33, -17.33, 19.1, -19.1, 20.5,
         -20.5, 88.72, 88.7228, 88.73, 89.0, -87.33, -103.27, -103.97, -103.98, -104.0, -105.0,
         119.9, -120.1, 121.0, -121.0, 1e4, -1e4, 1e30, -1e30, MAX, -MAX,
         # sine and cosine: near multiples of pi/2, both sides of the switch
         # between the two range reductions (2^40), and 16367173 * 2^72, the
         # float32 whose remainder by pi/2 is among the smallest relative to it.
         0.78539819, 1.5707964, -1.5707964, 3.1415927, 4.712389, 6.2831855, 1e6 * 3.1415927,
         1.0995116e12, -1.0995116e12, 1.0995117e12, 16367173 * 2.0**72, -16367173 * 2.0**72]

# op -> the JAX function XLA computes it with.
FUNCTIONS = {
    "exponential": jnp.exp,
    "exponential_minus_one": jnp.expm1,
    "tanh": jnp.tanh,
    "logistic": lax.logistic,
    "sine": jnp.sin,
    "cosine": jnp.cos,
}
COMPILED_NAMES = {"exponential": "exp_f32", "exponential_minus_one": "expm1_f32",
                  "tanh": "tanh_f32", "logistic": "logistic_f32", "sine": "sin_f32",
                  "cosine": "cos_f32"}
# Largest ulp distance of XLA CPU's float32 result from the correctly
# rounded one, measured on the sweep's inputs (module docstring).
XLA_ULPS = {"exponential": 5, "exponential_minus_one": 5, "tanh": 4, "logistic": 2, "sine": 1,
            "cosine": 1}


HALFWAY_INPUT = 9.894371032714844e-06


def inputs() -> np.ndarray:
    sweep = np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    rng = np.random.default_rng(0)
    scales = rng.choice([1e-6, 1e-2, 1.0, 10.0, 100.0], 100_000)
    noise = (rng.standard_normal(100_000) * scales).astype(np.float32)
    # First: the input where logistic's unfused result is not the correctly rounded one.
    return np.concatenate([np.array([HALFWAY_INPUT] + EDGES, np.float32), sweep, noise])


def program_text(op: str, n: int) -> str:
    """The op, then two negations (exact, so the result is the op's own):
    three computing steps, which fuse into one loop."""
    t = f"tensor<{n}xf32>"
    return (f"func.func @main(%x: {t}) -> {t} {{\n"
            f"  %0 = stablehlo.{op} %x : {t}\n"
            f"  %1 = stablehlo.negate %0 : {t}\n"
            f"  %2 = stablehlo.negate %1 : {t}\n"
            f"  return %2 : {t}\n}}\n")


def fused_steps(program) -> list:
    return [s for s in program.function.body.steps if s.op.name == "pjrt_ref.fused"]


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(ordered(a) - ordered(b))


def exact_value(op: str, x: np.ndarray) -> np.ndarray:
    """The op on float32 inputs in x87 extended precision (64-bit
    significand): close enough to the exact value to tell on which side of
    a float32 midpoint it lies, except within 2^-60 of one."""
    wide = x.astype(np.longdouble)
    return {"exponential": np.exp, "exponential_minus_one": np.expm1, "tanh": np.tanh,
            "logistic": lambda v: 1 / (1 + np.exp(-v)), "sine": np.sin, "cosine": np.cos}[op](wide)


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_compiled_f32_math_against_unfused_and_xla(op, monkeypatch):
    x = inputs()
    text = program_text(op, x.size)
    compiled = load_with(text, monkeypatch)
    steps = fused_steps(compiled)
    assert len(steps) == 1 and not steps[0].op.attrs.get("chunked"), [s.op.name for s in steps]
    assert f"{COMPILED_NAMES[op]}(" in steps[0].op.attrs["source"]
    (ours,) = compiled(x)
    (without_numba,) = load_with(text, monkeypatch, jit=False)(x)
    (plain,) = load_with(text, monkeypatch, optimize=False)(x)
    assert_same_values(without_numba, plain)
    # The same bits as the unfused result (numpy's float64 function rounded
    # once) except where the exact value is so close to the point halfway
    # between two float32 numbers that the two float64 approximations round
    # to either side: over all 2^32 inputs, only logistic at HALFWAY_INPUT
    # with numpy's AVX-512 exp (test_logistic_near_halfway).
    finite = ~np.isnan(plain)
    differ = finite & (ours != plain)
    assert differ.sum() <= 3, x[differ]
    assert ulp_distance(ours[differ], plain[differ]).max(initial=0) <= 1
    midpoint = (ours[differ].astype(np.longdouble) + plain[differ]) / 2
    exact = exact_value(op, x[differ])
    assert np.all(np.abs(exact - midpoint) <= np.abs(exact) * 2.0**-40), x[differ]
    assert_same_values(ours[~differ], plain[~differ])

    xla = np.asarray(jax.jit(FUNCTIONS[op])(x))
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(xla))
    normal = finite & (np.abs(plain) >= TINY) & (np.abs(xla) >= TINY)
    assert ulp_distance(ours[normal], xla[normal]).max() <= XLA_ULPS[op] + 1
    # Where either is subnormal (XLA's exp flushes those to 0), both are tiny.
    tiny = finite & ~normal
    assert np.all(np.abs(ours[tiny]) < 2 * TINY) and np.all(np.abs(xla[tiny]) < 2 * TINY)


def test_logistic_near_halfway(monkeypatch):
    """The float32 input whose logistic lies closest to halfway between two
    float32 numbers: the exact value, 0.500002473592758158530836... (mpmath,
    200 bits), lies 2^-54 (relative) below the midpoint. The compiled result
    is the correctly rounded one; the unfused one (numpy's float64 exp,
    rounded) is it or its neighbour, depending on numpy's exp."""
    x = np.array([HALFWAY_INPUT], np.float32)
    (ours,) = load_with(program_text("logistic", 1), monkeypatch)(x)
    assert_same_values(ours, np.array([0.50000244379043579], np.float32))
    (plain,) = load_with(program_text("logistic", 1), monkeypatch, optimize=False)(x)
    assert ulp_distance(ours, plain).max() <= 1


def test_special_values_exactly(monkeypatch):
    """C99 Annex F values the spec's ops inherit, checked one by one."""
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45], np.float32)
    expected = {
        "exponential": [1.0, 1.0, np.inf, 0.0, np.nan, 1.0, 1.0],
        "exponential_minus_one": [0.0, -0.0, np.inf, -1.0, np.nan, 1e-45, -1e-45],
        "tanh": [0.0, -0.0, 1.0, -1.0, np.nan, 1e-45, -1e-45],
        "logistic": [0.5, 0.5, 1.0, 0.0, np.nan, 0.5, 0.5],
        "sine": [0.0, -0.0, np.nan, np.nan, np.nan, 1e-45, -1e-45],
        "cosine": [1.0, 1.0, np.nan, np.nan, np.nan, 1.0, 1.0],
    }
    for op, values in expected.items():
        (ours,) = load_with(program_text(op, x.size), monkeypatch)(x)
        assert_same_values(ours, np.array(values, np.float32))


def test_w3_chain_is_one_loop_and_matches(monkeypatch):
    """The benchmark's W3 body: every elementwise op in one compiled loop
    (no chunked numpy), the same bits as without numba, and the sum as XLA's
    up to the summation order."""
    rng = np.random.default_rng(1)
    x = np.concatenate([np.array(EDGES, np.float32),
                        (rng.standard_normal(300_000) * 4).astype(np.float32)])
    fn = lambda x: (jnp.tanh(x * 2 + 1) * jax.nn.sigmoid(x), jnp.sum(jnp.tanh(x * 2 + 1) * jax.nn.sigmoid(x)))
    text = lower_to_text(fn, x)
    compiled = load_with(text, monkeypatch)
    assert [s.op.attrs.get("chunked") for s in fused_steps(compiled)] == [None]
    ours = compiled(x)
    for a, b in zip(ours, load_with(text, monkeypatch, jit=False)(x)):
        assert_same_values(a, b)
    xla = jax.jit(fn)(x)
    np.testing.assert_allclose(ours[0], np.asarray(xla[0]), rtol=5e-7, atol=TINY)
    np.testing.assert_allclose(ours[1], np.asarray(xla[1]), rtol=1e-5)


def test_large_math_op_alone_compiles(monkeypatch):
    """A lone f32 tanh on a large tensor becomes a compiled loop too; on a
    small one it stays numpy's."""
    for n, compiled in ((1 << 14, True), (1000, False)):
        x = inputs()[:n]
        text = lower_to_text(jnp.tanh, x)
        program = load_with(text, monkeypatch)
        assert bool(fused_steps(program)) == compiled
        (ours,) = program(x)
        (plain,) = load_with(text, monkeypatch, optimize=False)(x)
        assert_same_values(ours, plain)


def test_threads_give_the_same_bits(monkeypatch):
    """A large loop split across threads equals one call over everything."""
    from tests.support.products_support import cpus_said_idle

    x = inputs()[:400_001]
    text = program_text("tanh", x.size)
    results = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("PJRT_REF_JIT_THREADS", threads)
        with cpus_said_idle(2):   # split whatever the machine's load
            (out,) = load_with(text, monkeypatch)(x)
        results.append(out)
    for out in results[1:]:
        assert_same_values(out, results[0])


def test_pieces_cover_the_range_once():
    from pjrt_ref.interpreter.native.threads import pieces

    for size, min_piece, count in [(10, 4, 2), (1 << 20, 1 << 14, 2), (1_000_003, 1000, 7), (5, 100, 8)]:
        ranges = pieces(size, min_piece, count)
        assert ranges[0][0] == 0 and ranges[-1][1] == size and len(ranges) <= count
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert all(start % 64 == 0 for start, _ in ranges)


# How long a forced interleaving may wait for the other thread: a hang guard only.
HANG_GUARD_SECONDS = 60


def test_an_error_in_one_piece_reaches_the_caller_once_every_piece_has_run(monkeypatch):
    """run_split raises a piece's error only after every piece has run, a
    helper's too. The interleaving is forced with events: the caller's
    first piece fails only once a helper is inside a piece, and that piece
    ends only after the failure, so the caller must wait for it."""
    from tests.support.products_support import cpus_said_idle

    from pjrt_ref.interpreter.native import threads

    monkeypatch.setenv("PJRT_REF_JIT_THREADS", "2")
    caller = threading.current_thread()
    helper_inside, failed = threading.Event(), threading.Event()
    lock = threading.Lock()
    started: set[str] = set()                  # "caller", "helper": who has begun a piece
    finished: list[int] = []
    outlived_the_failure: list[int] = []

    def run_piece(start: int, stop: int) -> None:
        side = "caller" if threading.current_thread() is caller else "helper"
        with lock:
            first = side not in started
            started.add(side)
        if first and side == "helper":
            helper_inside.set()
            assert failed.wait(HANG_GUARD_SECONDS), "the caller's piece never failed"
            outlived_the_failure.append(start)
        finished.append(start)
        if first and side == "caller":
            assert helper_inside.wait(HANG_GUARD_SECONDS), "no helper took a piece"
            failed.set()
            raise ValueError("piece failed")

    with pytest.raises(ValueError, match="piece failed"), cpus_said_idle(1):   # one helper, whatever the load
        threads.run_split(run_piece, 1 << 20, 1 << 10)
    every_piece = [start for start, _ in threads.pieces(1 << 20, 1 << 10, 2 * threads.PIECES_PER_THREAD)]
    assert len(every_piece) == 16
    assert sorted(finished) == every_piece      # each piece ran once, all before the raise
    assert len(outlived_the_failure) == 1 and outlived_the_failure[0] in finished


def test_no_idle_cpu_means_one_call(monkeypatch):
    from tests.support.products_support import cpus_said_idle

    from pjrt_ref.interpreter.native import threads

    monkeypatch.setenv("PJRT_REF_JIT_THREADS", "2")
    calls = []
    with cpus_said_idle(0):
        threads.run_split(lambda start, stop: calls.append((start, stop)), 1 << 20, 1 << 10)
    assert calls == [(0, 1 << 20)]


def test_in_a_compiled_while_loop(monkeypatch):
    """loops.py uses the same expressions: a fori_loop over tanh/exp/logistic."""
    x = np.array(EDGES[:16], np.float32)
    fn = lambda x: lax.fori_loop(0, 20, lambda i, v: jnp.tanh(v) * 0.5 + jnp.exp(-jnp.abs(v)) * 0.25
                                 + lax.logistic(v) * 0.125 + jnp.expm1(v * 0.01), x)
    text = lower_to_text(fn, x)
    compiled = load_with(text, monkeypatch)
    assert any(s.op.name == "pjrt_ref.compiled_while" for s in compiled.function.body.steps)
    (ours,) = compiled(x)
    (plain,) = load_with(text, monkeypatch, optimize=False)(x)
    assert_same_values(ours, plain)
    np.testing.assert_allclose(ours, np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("large", [False, True], ids=["small angles", "one large angle"])
def test_sines_in_a_compiled_while_loop(large, monkeypatch):
    """A loop's element loop runs sine and cosine with the small reduction
    only, and runs again with both where an element reaches 2^40
    (codegen.element_loop): both branches give the unfused bits."""
    x = np.linspace(-4, 4, 16).astype(np.float32)
    if large:
        x[5] = 16367173 * 2.0**72
    fn = lambda x: lax.fori_loop(0, 5, lambda i, v: jnp.sin(v) * 0.5 + jnp.cos(v * 3) + v, x)
    text = lower_to_text(fn, x)
    compiled = load_with(text, monkeypatch)
    (loop,) = [s for s in compiled.function.body.steps if s.op.name == "pjrt_ref.compiled_while"]
    assert "sin_small_f32(" in loop.op.attrs["source"] and "if large_angle:" in loop.op.attrs["source"]
    (ours,) = compiled(x)
    (plain,) = load_with(text, monkeypatch, optimize=False)(x)
    assert_same_values(ours, plain)
    np.testing.assert_allclose(ours, np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-6)


def test_element_loop_runs_the_small_reduction_first():
    from pjrt_ref.interpreter.native.codegen import element_loop

    lines = element_loop(["v1 = float32(sin_f32(float64(a[i])))", "v2 = float32(cos_f32(float64(v1)))",
                          "out0[i] = v2"])
    first = lines[:lines.index("if large_angle:")]
    assert "v1 = float32(sin_small_f32(float64(a[i])))" in " ".join(first)
    assert "v2 = float32(cos_small_f32(float64(v1)))" in " ".join(first)
    assert any("abs(float64(a[i])) >= SMALL_ANGLE" in line for line in first)
    assert any("abs(float64(v1)) >= SMALL_ANGLE" in line for line in first)
    again = lines[lines.index("if large_angle:") + 1:]
    assert any("sin_f32(float64(a[i]))" in line for line in again)
    assert element_loop(["out0[i] = a[i] * 2"]) == ["for i in range(n):", "    out0[i] = a[i] * 2"]
