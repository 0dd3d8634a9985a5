"""CHLO's broadcasting elementwise ops (chlo.broadcast_add & co.) against
XLA CPU, on hand-written programs (JAX never emits them): numpy-style
broadcasting, prefix-padded `broadcast_dimensions` (the only kind XLA
accepts), and broadcast_compare's CHLO enums. `broadcast_dimensions` that
are not a numpy-style suffix are checked against JAX computing the same
broadcast with jnp."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from pjrt_ref.interpreter import load
from test_ops_chlo_oracle import assert_matches_xla, tensor_type

RNG = np.random.default_rng(0)


def binary_program(op: str, lhs, rhs, result_shape, result_dtype, attrs: str = "") -> str:
    lt, rt = tensor_type(lhs.shape, lhs.dtype), tensor_type(rhs.shape, rhs.dtype)
    out = tensor_type(result_shape, result_dtype)
    return (f"func.func @main(%a: {lt}, %b: {rt}) -> {out} {{\n"
            f"  %0 = chlo.{op} %a, %b {attrs} : ({lt}, {rt}) -> {out}\n"
            f"  return %0 : {out}\n}}\n")


def floats(*shape):
    return RNG.normal(size=shape).astype(np.float32)


def ints(*shape, low=-40, high=40):
    return RNG.integers(low, high, shape).astype(np.int32)


# op -> (make lhs/rhs of a shape, result dtype, max_ulp)
ARITHMETIC = {
    "broadcast_add": (floats, np.float32, 0), "broadcast_subtract": (floats, np.float32, 0),
    # XLA rewrites x / broadcast(y) as x * broadcast(1 / y): 1 ulp.
    "broadcast_multiply": (floats, np.float32, 0), "broadcast_divide": (floats, np.float32, 1),
    "broadcast_maximum": (floats, np.float32, 0), "broadcast_minimum": (floats, np.float32, 0),
    "broadcast_power": (floats, np.float32, 2), "broadcast_remainder": (floats, np.float32, 0),
    "broadcast_atan2": (floats, np.float32, 2), "broadcast_next_after": (floats, np.float32, 0),
    "broadcast_complex": (floats, np.complex64, 0),
    "broadcast_and": (ints, np.int32, 0), "broadcast_or": (ints, np.int32, 0),
    "broadcast_xor": (ints, np.int32, 0),
    "broadcast_shift_left": (lambda *s: ints(*s, low=0, high=40), np.int32, 0),
    "broadcast_shift_right_arithmetic": (lambda *s: ints(*s, low=0, high=40), np.int32, 0),
    "broadcast_shift_right_logical": (lambda *s: ints(*s, low=0, high=40), np.int32, 0),
}
SHAPES = [  # lhs shape, rhs shape, result shape, attributes
    ((2, 1), (1, 3), (2, 3), ""),
    ((), (2, 3), (2, 3), ""),
    ((4, 3), (3,), (4, 3), "{broadcast_dimensions = array<i64: 1>}"),
]


@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}-{s[1]}{'-dims' if s[3] else ''}")
@pytest.mark.parametrize("op", ARITHMETIC)
def test_broadcasting_op_matches_xla(op, shapes):
    make, result_dtype, max_ulp = ARITHMETIC[op]
    lhs_shape, rhs_shape, result_shape, attrs = shapes
    lhs, rhs = make(*lhs_shape), make(*rhs_shape)
    text = binary_program(op, lhs, rhs, result_shape, result_dtype, attrs)
    assert_matches_xla(text, lhs, rhs, max_ulp=max_ulp)


def test_integer_arithmetic_uses_stablehlo_semantics():
    """Division and remainder by zero and wrapping, as stablehlo's kernels."""
    lhs = np.array([[7, -7, 2**31 - 1], [-2**31, 5, 0]], np.int32)
    rhs = np.array([0, -1, 2], np.int32)
    for op in ("broadcast_divide", "broadcast_remainder", "broadcast_add",
               "broadcast_multiply", "broadcast_power", "broadcast_maximum"):
        assert_matches_xla(binary_program(op, lhs, rhs, (2, 3), np.int32), lhs, rhs)


def test_boolean_logic():
    lhs = np.array([[True, False], [True, True]])
    rhs = np.array([False, True])
    for op in ("broadcast_and", "broadcast_or", "broadcast_xor"):
        assert_matches_xla(binary_program(op, lhs, rhs, (2, 2), np.bool_), lhs, rhs)


@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
@pytest.mark.parametrize("compare_type", ["", "FLOAT", "TOTALORDER"])
def test_broadcast_compare_floats(direction, compare_type):
    lhs = np.array([[0.0, -0.0, np.nan], [1.0, 2.0, -np.inf]], np.float32)
    rhs = np.array([-0.0, 0.0, np.nan], np.float32)
    attrs = f"comparison_direction = #chlo<comparison_direction {direction}>"
    if compare_type:
        attrs += f", compare_type = #chlo<comparison_type {compare_type}>"
    text = binary_program("broadcast_compare", lhs, rhs, (2, 3), np.bool_, "{" + attrs + "}")
    assert_matches_xla(text, lhs, rhs)


@pytest.mark.parametrize("compare_type", ["SIGNED", "UNSIGNED"])
def test_broadcast_compare_integers(compare_type):
    dtype = np.int32 if compare_type == "SIGNED" else np.uint32
    lhs = np.array([[0, 5, 9], [3, 1, 7]], dtype)
    rhs = np.array([[5], [1]], dtype)
    for direction in ("LT", "GE", "EQ"):
        attrs = (f"{{comparison_direction = #chlo<comparison_direction {direction}>, "
                 f"compare_type = #chlo<comparison_type {compare_type}>}}")
        text = binary_program("broadcast_compare", lhs, rhs, (2, 3), np.bool_, attrs)
        assert_matches_xla(text, lhs, rhs)


@pytest.mark.parametrize("pred_shape", [(2, 3), (), (3,), (2, 1)], ids=str)
def test_broadcast_select_matches_xla(pred_shape):
    pred = RNG.integers(0, 2, pred_shape).astype(bool)
    on_true, on_false = floats(2, 3), floats(3)
    pt = tensor_type(pred_shape, np.bool_)
    text = (f"func.func @main(%p: {pt}, %a: tensor<2x3xf32>, %b: tensor<3xf32>)"
            f" -> tensor<2x3xf32> {{\n"
            f"  %0 = chlo.broadcast_select %p, %a, %b : ({pt}, tensor<2x3xf32>, tensor<3xf32>)"
            f" -> tensor<2x3xf32>\n  return %0 : tensor<2x3xf32>\n}}\n")
    assert_matches_xla(text, pred, on_true, on_false)


def test_zeta_and_polygamma_broadcast():
    x = RNG.uniform(1.5, 5, (2, 3)).astype(np.float32)
    q = RNG.uniform(0.5, 4, (3,)).astype(np.float32)
    assert_matches_xla(binary_program("broadcast_zeta", x, q, (2, 3), np.float32), x, q,
                       max_ulp=4)
    n = np.array([[0, 1, 2], [3, 1, 0]], np.float32)
    assert_matches_xla(binary_program("broadcast_polygamma", n, q, (2, 3), np.float32), n, q,
                       max_ulp=16)


def test_non_suffix_broadcast_dimensions():
    """XLA only accepts broadcast_dimensions that numpy's rule would also
    give; other mappings are checked against jnp computing the same."""
    lhs, rhs = floats(4, 3, 2), floats(4, 2)
    text = binary_program("broadcast_subtract", lhs, rhs, (4, 3, 2), np.float32,
                          "{broadcast_dimensions = array<i64: 0, 2>}")
    expected = np.asarray(jnp.subtract(lhs, rhs[:, None, :]))
    np.testing.assert_array_equal(load(text)(lhs, rhs)[0], expected)
    # the higher-rank operand on the right
    text = binary_program("broadcast_divide", rhs, lhs, (4, 3, 2), np.float32,
                          "{broadcast_dimensions = array<i64: 0, 2>}")
    expected = np.asarray(jnp.divide(rhs[:, None, :], lhs))
    np.testing.assert_array_equal(load(text)(rhs, lhs)[0], expected)


def test_incompatible_shapes_are_rejected_at_load_time():
    from pjrt_ref.errors import PjrtRefError

    text = """func.func @main(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
      %0 = chlo.broadcast_add %a, %b {broadcast_dimensions = array<i64: 0>}
          : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    }"""
    with pytest.raises(PjrtRefError):
        load(text)


def test_dynamic_shapes_broadcast_at_run_time():
    text = """func.func @main(%a: tensor<?x3xf32>, %b: tensor<?xf32>) -> tensor<?x3xf32> {
      %0 = chlo.broadcast_multiply %a, %b : (tensor<?x3xf32>, tensor<?xf32>) -> tensor<?x3xf32>
      return %0 : tensor<?x3xf32>
    }"""
    lhs, rhs = floats(5, 3), floats(3)
    np.testing.assert_array_equal(load(text)(lhs, rhs)[0], np.asarray(jnp.multiply(lhs, rhs)))
