"""Every op compiled loops translate (interpreter/native/loop_expressions.py),
for every element type it takes, gives the interpreted loop's bits on edge
values (0, +-1, the type's min and max, shift amounts past the width,
+-0, +-inf, NaN, subnormals, halves, values beyond an integer's range), and
the loop is compiled, not interpreted. Each program is a while loop whose
body applies the op to arrays captured from outside."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.support.edge_values import FLOATS, INTEGERS, NUMPY, SIGNED, edge_values, pairs
from tests.support.jit_support import assert_same_values

from pjrt_ref.interpreter import load


def loop_program(op_line: str, element: str, result: str, size: int, operands: int) -> str:
    """A while loop that runs its body once: `%v = op(%a, %b, %c)` on arrays captured from outside."""
    t, r = f"tensor<{size}x{element}>", f"tensor<{size}x{result}>"
    arguments = ", ".join(f"%{name}: {t}" for name in "abc"[:max(operands, 2)])
    zero = "false" if result == "i1" else ("0.0" if result.startswith(("f", "bf")) else "0")
    return f"""
    func.func @main({arguments}) -> {r} {{
      %c0 = stablehlo.constant dense<0> : tensor<i32>
      %init = stablehlo.constant dense<{zero}> : {r}
      %r:2 = stablehlo.while(%i = %c0, %acc = %init) : tensor<i32>, {r}
       cond {{
        %one = stablehlo.constant dense<1> : tensor<i32>
        %p = stablehlo.compare LT, %i, %one, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %p : tensor<i1>
      }} do {{
        {op_line}
        %one = stablehlo.constant dense<1> : tensor<i32>
        %next = stablehlo.add %i, %one : tensor<i32>
        stablehlo.return %next, %v : tensor<i32>, {r}
      }}
      return %r#1 : {r}
    }}"""


def check_compiled_like_interpreted(op_line, element, result, inputs, monkeypatch):
    size = inputs[0].size
    text = loop_program(op_line, element, result, size, len(inputs))
    monkeypatch.setenv("PJRT_REF_JIT", "1")
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "0")
    interpreted = load(text)
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1")
    compiled = load(text)
    steps = [s.op.name for s in compiled.function.body.steps]
    assert "pjrt_ref.compiled_while" in steps, f"{op_line} on {element} was not compiled: {steps}"
    assert_same_values(compiled(*inputs)[0], interpreted(*inputs)[0])


def binary(op: str, element: str, result: str | None = None, attributes: str = "") -> str:
    t, r = f"tensor<SIZEx{element}>", f"tensor<SIZEx{result or element}>"
    return f'%v = "stablehlo.{op}"(%a, %b) {attributes} : ({t}, {t}) -> {r}'


def unary(op: str, element: str, result: str | None = None) -> str:
    return f'%v = "stablehlo.{op}"(%a) : (tensor<SIZEx{element}>) -> tensor<SIZEx{result or element}>'


def run(line: str, element: str, result: str, inputs, monkeypatch) -> None:
    line = line.replace("SIZE", str(inputs[0].size))
    check_compiled_like_interpreted(line, element, result, inputs, monkeypatch)


INTEGER_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum",
                  "and", "or", "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic"]


@pytest.mark.parametrize("element", INTEGERS)
@pytest.mark.parametrize("op", INTEGER_BINARY)
def test_integer_binary_ops(op, element, monkeypatch):
    run(binary(op, element), element, element, pairs(element), monkeypatch)


# abs and sign take signed integers only (spec, "abs" and "sign": `si` types).
INTEGER_UNARY = [(op, element) for element in INTEGERS
                 for op in ("negate", "not", "popcnt", "count_leading_zeros", "abs", "sign")
                 if op not in ("abs", "sign") or element in SIGNED]


@pytest.mark.parametrize("op, element", INTEGER_UNARY)
def test_integer_unary_ops(op, element, monkeypatch):
    run(unary(op, element), element, element, pairs(element), monkeypatch)


@pytest.mark.parametrize("element", INTEGERS + ["i1"])
@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
def test_integer_compares(direction, element, monkeypatch):
    kind = "UNSIGNED" if element.startswith("ui") or element == "i1" else "SIGNED"
    attributes = (f"{{comparison_direction = #stablehlo<comparison_direction {direction}>, "
                  f"compare_type = #stablehlo<comparison_type {kind}>}}")
    run(binary("compare", element, "i1", attributes), element, "i1", pairs(element), monkeypatch)


@pytest.mark.parametrize("element", INTEGERS + FLOATS)
def test_clamp_and_select(element, monkeypatch):
    a, b = pairs(element)
    c = np.roll(b, 7)
    t = f"tensor<{a.size}x{element}>"
    line = f'%v = "stablehlo.clamp"(%b, %a, %c) : ({t}, {t}, {t}) -> {t}'
    check_compiled_like_interpreted(line, element, element, (a, b, c), monkeypatch)
    choose = (f'%p = "stablehlo.compare"(%a, %b) {{comparison_direction = #stablehlo<comparison_direction GT>}}'
              f' : ({t}, {t}) -> tensor<{a.size}xi1>\n'
              f'        %v = "stablehlo.select"(%p, %c, %b) : (tensor<{a.size}xi1>, {t}, {t}) -> {t}')
    check_compiled_like_interpreted(choose, element, element, (a, b, c), monkeypatch)


@pytest.mark.parametrize("source", INTEGERS + FLOATS + ["i1"])
@pytest.mark.parametrize("result", INTEGERS + FLOATS + ["i1"])
def test_converts(source, result, monkeypatch):
    values = edge_values(source)
    run(unary("convert", source, result), source, result, (values, values), monkeypatch)


@pytest.mark.parametrize("source, result", [
    (s, r) for s in INTEGERS + FLOATS for r in INTEGERS + FLOATS
    if s != r and np.dtype(NUMPY[s]).itemsize == np.dtype(NUMPY[r]).itemsize])
def test_bitcast_converts(source, result, monkeypatch):
    values = edge_values(source)
    run(unary("bitcast_convert", source, result), source, result, (values, values), monkeypatch)


@pytest.mark.parametrize("element", FLOATS)
@pytest.mark.parametrize("op", ["floor", "ceil", "round_nearest_even", "round_nearest_afz", "sign"])
def test_float_rounding_and_sign(op, element, monkeypatch):
    run(unary(op, element), element, element, pairs(element), monkeypatch)


@pytest.mark.parametrize("element", FLOATS)
def test_float_remainder_and_is_finite(element, monkeypatch):
    run(binary("remainder", element), element, element, pairs(element), monkeypatch)
    run(unary("is_finite", element, "i1"), element, "i1", pairs(element), monkeypatch)


def test_the_loop_that_fell_off_the_compiled_path_is_compiled(monkeypatch):
    """`fori_loop(0, n, lambda i, c: c + (i % 7) + (i // 3), 0)` as JAX lowers it (rem,
    div, compare, select): once interpreted op by op, 254 µs per iteration."""
    from tests.support.oracle import lower_to_text

    import jax
    import jax.numpy as jnp

    fn = lambda n: jax.lax.fori_loop(0, n, lambda i, c: c + (i % 7) + (i // 3), jnp.int32(0))  # noqa: E731
    monkeypatch.setenv("PJRT_REF_JIT", "1")
    program = load(lower_to_text(fn, np.int32(1000)))
    names = {s.op.name for f in program.module_plan.functions.values() for s in f.body.steps}
    assert "pjrt_ref.compiled_while" in names and "stablehlo.while" not in names
    assert int(program(np.int32(1000))[0]) == int(jax.jit(fn)(np.int32(1000)))


# float16 and bfloat16 (interpreter/native/half_precision.py): computed in
# float32 or float64 and rounded as the interpreter rounds.
HALVES = ["f16", "bf16"]


def half_values(element: str) -> np.ndarray:
    """Edge values of a half type: +-0, +-inf, NaN, the largest finite and
    the smallest subnormal, values at rounding boundaries, and a sample
    of every binade."""
    import ml_dtypes

    dtype = np.float16 if element == "f16" else ml_dtypes.bfloat16
    info = ml_dtypes.finfo(dtype)
    specials = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, np.inf, -np.inf, np.nan,
                float(info.max), -float(info.max), float(info.smallest_subnormal), 3.0, 7.0, 1e-3]
    rng = np.random.default_rng(5)
    sampled = rng.integers(0, 1 << 16, 40, dtype=np.uint16).view(dtype)
    return np.concatenate([np.array(specials, np.float32).astype(dtype), sampled])


def half_pairs(element: str) -> tuple[np.ndarray, np.ndarray]:
    values = half_values(element)
    a, b = zip(*itertools.product(values, values))
    return np.array(a, values.dtype), np.array(b, values.dtype)


@pytest.mark.parametrize("element", HALVES)
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "remainder", "maximum",
                                "minimum"])
def test_half_binary_ops(op, element, monkeypatch):
    """Computed in float32 and rounded once: the exact sum of two float32
    values needs at most 2 * 24 + 2 bits of float64, so there is no double
    rounding, and none either in the interpreter's float32 -> half cast."""
    run(binary(op, element), element, element, half_pairs(element), monkeypatch)


HALF_UNARY = ["negate", "abs", "floor", "ceil", "round_nearest_even", "round_nearest_afz", "sign",
              "sqrt", "exponential", "exponential_minus_one", "log", "log_plus_one", "sine", "cosine",
              "tanh", "logistic"]


@pytest.mark.parametrize("element", HALVES)
@pytest.mark.parametrize("op", HALF_UNARY)
def test_half_unary_ops(op, element, monkeypatch):
    values = half_values(element)
    run(unary(op, element), element, element, (values, values), monkeypatch)


@pytest.mark.parametrize("source, result", [(s, r) for s in HALVES + FLOATS for r in HALVES + FLOATS + ["i32", "ui8", "i1"]
                                            if s != r and (s in HALVES or r in HALVES)])
def test_half_converts(source, result, monkeypatch):
    """Between floats (bfloat16 from float64 through float32, as ml_dtypes
    casts), and from a half type to integers (truncated, saturated) and i1."""
    values = half_values(source) if source in HALVES else edge_values(source)
    run(unary("convert", source, result), source, result, (values, values), monkeypatch)


@pytest.mark.parametrize("element", HALVES)
def test_half_compare_clamp_and_select(element, monkeypatch):
    a, b = half_pairs(element)
    c = np.roll(b, 7)
    t = f"tensor<{a.size}x{element}>"
    line = f'%v = "stablehlo.clamp"(%b, %a, %c) : ({t}, {t}, {t}) -> {t}'
    check_compiled_like_interpreted(line, element, element, (a, b, c), monkeypatch)
    for compare_type in ("FLOAT", "TOTALORDER"):
        choose = (f'%p = "stablehlo.compare"(%a, %b) {{comparison_direction = #stablehlo<comparison_direction LT>,'
                  f' compare_type = #stablehlo<comparison_type {compare_type}>}}'
                  f' : ({t}, {t}) -> tensor<{a.size}xi1>\n'
                  f'        %v = "stablehlo.select"(%p, %c, %b) : (tensor<{a.size}xi1>, {t}, {t}) -> {t}')
        check_compiled_like_interpreted(choose, element, element, (a, b, c), monkeypatch)


@pytest.mark.parametrize("element", HALVES)
def test_rounding_helpers_match_the_interpreters_casts(element):
    """round_to_float16 / round_to_bfloat16 against numpy's and ml_dtypes'
    casts from float32 (every 97th bit pattern, all of them near the
    rounding boundaries of the half type) and from float64 (ml_dtypes goes
    through float32 for bfloat16: double rounding, which the helper keeps)."""
    from pjrt_ref.interpreter.native import codegen, half_precision

    dtype = np.dtype(np.float16) if element == "f16" else half_precision.BF16
    helper = half_precision.ROUNDERS[dtype]
    f64 = np.dtype(np.float64)
    source = codegen.fused_loop_source([("x", True, f64)], [("v", f"{helper}(x)", np.dtype(np.float32))],
                                       [("v", np.dtype(np.float32))])
    kernel = codegen.compile_fused(source, [(f64, True)], [np.dtype(np.float32)])
    patterns = np.arange(0, 1 << 32, 97, dtype=np.uint64).astype(np.uint32).view(np.float32)
    rng = np.random.default_rng(3)
    wide = np.concatenate([rng.standard_normal(200_000) * 10.0 ** rng.integers(-9, 6, 200_000),
                           [1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -11 + 2 ** -40, 65519.999, 65520.0,
                            3.3961775292304e38, 3.39617752923046e38, 1e300, -1e-300]])
    with np.errstate(over="ignore", invalid="ignore"):
        wide_patterns = patterns.astype(f64)
    for values in (wide_patterns, wide):
        out = np.empty(values.size, np.float32)
        kernel(values.size, values, out)
        with np.errstate(over="ignore", invalid="ignore"):
            expected = values.astype(dtype)
        compiled = out.astype(dtype)
        nan = np.isnan(expected.astype(np.float32))
        assert np.array_equal(np.isnan(compiled.astype(np.float32)), nan)
        assert np.array_equal(compiled.view(np.uint16)[~nan], expected.view(np.uint16)[~nan])


def unary_loop_both_ways(op: str, element: str, values: np.ndarray, monkeypatch):
    """(the optimised program of a loop applying `op` to `values`, the
    unoptimised interpreter's result)."""
    text = loop_program(unary(op, element).replace("SIZE", str(values.size)), element, element, values.size, 1)
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "0")
    interpreted = load(text)(values, values)[0]
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1")
    return load(text), interpreted


def compiled_source(program) -> str | None:
    """The numba source the entry function's compiled loop runs, or None."""
    for step in program.function.body.steps:
        if step.op.name == "pjrt_ref.compiled_while":
            return step.kernel.source
    return None


def test_half_math_that_disagrees_is_handed_back(monkeypatch):
    """The other branch of `math_agrees`: a float64 function that is off in
    the last bits fails the sweep, and the op runs by the interpreter's
    kernel inside the compiled loop (native/hand_back.py), with the
    interpreter's values."""
    from pjrt_ref.interpreter.native import half_precision

    monkeypatch.setitem(half_precision.MATH_F64, "stablehlo.exponential",
                        "math.exp(float64({0})) * (1.0 + 2.0 ** -12)")
    half_precision.math_agrees.cache_clear()
    try:
        assert not half_precision.math_agrees("stablehlo.exponential", np.dtype(np.float16))
        values = half_values("f16")
        program, interpreted = unary_loop_both_ways("exponential", "f16", values, monkeypatch)
        assert "hand_back_run(" in compiled_source(program)
        assert_same_values(program(values, values)[0], interpreted)
    finally:
        half_precision.math_agrees.cache_clear()


F64_MATH = ["exponential", "exponential_minus_one", "log", "log_plus_one", "sine", "cosine", "tanh",
            "logistic"]


def float64_math_values() -> np.ndarray:
    rng = np.random.default_rng(11)
    return np.concatenate([edge_values("f64"), rng.uniform(-30, 30, 200), rng.uniform(-1, 1, 100),
                           rng.integers(0, 1 << 63, 100, dtype=np.uint64).view(np.float64)])


def float64_math_route(op: str) -> str:
    """How a compiled loop computes float64 `op` on this machine: libm's
    function where it gives numpy's bits (float64_math.libm_agrees), else
    numpy's own loop by address where that is found and agrees
    (numpy_loops.py), else the interpreter's kernel (hand_back.py)."""
    from pjrt_ref.interpreter.native import float64_math, numpy_loops

    name = f"stablehlo.{op}"
    if float64_math.libm_agrees(name):
        return "libm"
    return "numpy loop" if name in numpy_loops.UFUNCS and numpy_loops.agrees(name) else "handed back"


def route_in(source: str) -> str:
    if "hand_back_run(" in source:
        return "handed back"
    return "numpy loop" if "_f64(" in source and "numpy_" in source else "libm"


@pytest.mark.parametrize("op", F64_MATH)
def test_float64_math_compiles_with_the_interpreters_bits_by_the_machines_route(op, monkeypatch):
    """libm_agrees and numpy_loops.agrees decide on the machine the tests
    run on; whichever route is taken, the loop is compiled and gives the
    interpreter's bits."""
    values = float64_math_values()
    program, interpreted = unary_loop_both_ways(op, "f64", values, monkeypatch)
    steps = [s.op.name for s in program.function.body.steps]
    assert "pjrt_ref.compiled_while" in steps
    assert route_in(compiled_source(program)) == float64_math_route(op)
    assert_same_values(program(values, values)[0], interpreted)


@pytest.mark.parametrize("numpy_loop_agrees", [True, False])
def test_float64_math_whose_libm_disagrees_runs_numpys_loop_or_is_handed_back(numpy_loop_agrees,
                                                                               monkeypatch):
    """The other branches of libm_agrees: numpy's own loop called by address
    where its probe agrees (numpy_loops.py), else the interpreter's kernel."""
    from pjrt_ref.interpreter.native import float64_math, numpy_loops

    monkeypatch.setattr(float64_math, "libm_agrees", lambda op_name: False)
    if not numpy_loop_agrees:
        monkeypatch.setattr(numpy_loops, "agrees", lambda op_name: False)
    values = float64_math_values()
    for op in ("exponential", "tanh"):
        program, interpreted = unary_loop_both_ways(op, "f64", values, monkeypatch)
        found = numpy_loops.loop_function(f"stablehlo.{op}") is not None
        expected = "numpy loop" if numpy_loop_agrees and found else "handed back"
        assert route_in(compiled_source(program)) == expected
        assert_same_values(program(values, values)[0], interpreted)


def test_numpys_float64_loop_by_address_is_numpys_function():
    """What numpy_loops calls is the ufunc's own float64 loop: its results
    are np.tanh's bit for bit; a numpy whose struct holds no such loop
    gets no fast path."""
    from pjrt_ref.interpreter.native import numpy_loops

    function = numpy_loops.loop_function("stablehlo.tanh")
    if function is None:
        assert not numpy_loops.agrees("stablehlo.tanh")
        return
    values = float64_math_values()
    got = numpy_loops.run(function, values)
    with np.errstate(all="ignore"):
        expected = np.tanh(values)
    assert np.all((got.view(np.uint64) == expected.view(np.uint64)) | (np.isnan(got) & np.isnan(expected)))
