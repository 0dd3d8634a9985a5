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

from jit_support import assert_same_values

from pjrt_ref.interpreter import load

SIGNED = ["i8", "i16", "i32", "i64"]
UNSIGNED = ["ui8", "ui16", "ui32", "ui64"]
INTEGERS = SIGNED + UNSIGNED
FLOATS = ["f32", "f64"]
NUMPY = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "ui8": np.uint8,
         "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64, "f32": np.float32,
         "f64": np.float64, "i1": np.bool_}


def edge_values(element: str) -> np.ndarray:
    dtype = np.dtype(NUMPY[element])
    if element == "i1":
        return np.array([False, True])
    if dtype.kind == "f":
        values = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, np.inf, -np.inf, np.nan,
                  1e-45, -3e-39, 3.4e38, 1e10, -1e10, 2.0 ** 31, -2.0 ** 31 - 1, 2.0 ** 63, -2.0 ** 64,
                  255.5, -128.7, 123.456, 7.0, -7.0]
        with np.errstate(over="ignore"):
            return np.array(values, dtype=dtype)
    info = np.iinfo(dtype)
    values = [0, 1, -1, 2, -2, 3, 7, -7, 31, 32, 33, 63, 64, 65, 200, info.min, info.max,
              info.min + 1, info.max - 1]
    return np.array([v % 2 ** info.bits for v in values], np.uint64).astype(dtype)


def pairs(element: str) -> tuple[np.ndarray, np.ndarray]:
    values = edge_values(element)
    a, b = zip(*itertools.product(values, values))
    return np.array(a, values.dtype), np.array(b, values.dtype)


def loop_program(op_line: str, element: str, result: str, size: int, operands: int) -> str:
    """A while loop that runs its body once: `%v = op(%a, %b, %c)` on arrays captured from outside."""
    t, r = f"tensor<{size}x{element}>", f"tensor<{size}x{result}>"
    arguments = ", ".join(f"%{name}: {t}" for name in "abc"[:max(operands, 2)])
    zero = "false" if result == "i1" else ("0.0" if result.startswith("f") else "0")
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
    from oracle import lower_to_text

    import jax
    import jax.numpy as jnp

    fn = lambda n: jax.lax.fori_loop(0, n, lambda i, c: c + (i % 7) + (i // 3), jnp.int32(0))  # noqa: E731
    monkeypatch.setenv("PJRT_REF_JIT", "1")
    program = load(lower_to_text(fn, np.int32(1000)))
    names = {s.op.name for f in program.module_plan.functions.values() for s in f.body.steps}
    assert "pjrt_ref.compiled_while" in names and "stablehlo.while" not in names
    assert int(program(np.int32(1000))[0]) == int(jax.jit(fn)(np.int32(1000)))
