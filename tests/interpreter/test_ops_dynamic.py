"""Dynamic-shape ops: JAX shape-polymorphic exports (results against JAX's
cpu backend) and hand-written programs against the StableHLO reference
interpreter (which needs static result types, so it runs the same program
with the result types written out)."""
from __future__ import annotations

from tests.support.oracle import assert_same_as_jax, run_reference_interpreter  # first: pins JAX to cpu
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export, lax

from pjrt_ref.interpreter import load

POLYMORPHIC = {
    "strided_slice": lambda x: x[1:x.shape[0] - 1:2],
    "pad": lambda x: lax.pad(x, np.float32(-1), [(1, 2, 1), (0, -1, 0)]),
    "reshape": lambda x: x.reshape(-1),
    "iota": lambda x: jnp.arange(x.shape[0]) * 2,
    "dynamic_slice": lambda x: lax.dynamic_slice_in_dim(x, 1, x.shape[0] - 1, 0),
    "gather": lambda x: x[jnp.array([0, 2, -1])],
    "scatter": lambda x: x.at[jnp.arange(x.shape[0]) % 2].add(np.float32(1)),
    "dynamic_update_slice": lambda x: lax.dynamic_update_slice(x, x[:1] * 10, (1, 0)),
    "concatenate": lambda x: jnp.concatenate([x, x[::-1]], 0),
    "broadcast": lambda x: jnp.broadcast_to(x[:, None, :], (x.shape[0], 2 * x.shape[0], 3)),
}


def exported_text(fn) -> str:
    """StableHLO of `fn` for float32[b, 3] with a symbolic `b`.

    JAX's `shape_assertion` custom calls (argument checks that only hold
    for shapes JAX agreed to) are dropped: they are not StableHLO ops.
    """
    b = export.symbolic_shape("b")[0]
    exported = export.export(jax.jit(fn), platforms=["cpu"])(
        jax.ShapeDtypeStruct((b, 3), jnp.float32))
    return "\n".join(line for line in exported.mlir_module().splitlines()
                     if "@shape_assertion" not in line)


@pytest.mark.parametrize("name", sorted(POLYMORPHIC))
def test_shape_polymorphic_export(name):
    fn = POLYMORPHIC[name]
    program = load(exported_text(fn))
    for rows in (3, 6):
        x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        (ours,) = program(x)
        theirs = np.asarray(jax.jit(fn)(x))
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        np.testing.assert_array_equal(ours, theirs)


def assert_same_as_reference(text, static_text, *args):
    """`text` (dynamic result types) on pjrt-ref vs `static_text` (the same
    program with static result types) on the reference interpreter."""
    ours = load(text)(*args)
    theirs = run_reference_interpreter(static_text, args)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def both_forms(template: str, static_result: str, dynamic_result: str):
    return template.replace("RESULT", dynamic_result), template.replace("RESULT", static_result)


def test_dynamic_broadcast_in_dim_with_unsorted_dims():
    template = """
    func.func @main(%a: tensor<1x3xi64>, %s: tensor<3xi64>) -> RESULT {
      %0 = stablehlo.dynamic_broadcast_in_dim %a, %s, dims = [2, 1]
          : (tensor<1x3xi64>, tensor<3xi64>) -> RESULT
      return %0 : RESULT
    }"""
    args = np.array([[1, 2, 3]], np.int64), np.array([2, 3, 4], np.int64)
    assert_same_as_reference(*both_forms(template, "tensor<2x3x4xi64>", "tensor<?x3x?xi64>"),
                             *args)


def test_dynamic_iota_and_reshape():
    template = """
    func.func @main(%a: tensor<2x6xf32>, %s: tensor<3xi32>) -> (RESULT, RESULT) {
      %0 = stablehlo.dynamic_iota %s, dim = 1 : (tensor<3xi32>) -> RESULT
      %1 = stablehlo.dynamic_reshape %a, %s : (tensor<2x6xf32>, tensor<3xi32>) -> RESULT
      return %0, %1 : RESULT, RESULT
    }"""
    args = np.arange(12, dtype=np.float32).reshape(2, 6), np.array([3, 2, 2], np.int32)
    assert_same_as_reference(*both_forms(template, "tensor<3x2x2xf32>", "tensor<?x?x?xf32>"),
                             *args)


@pytest.mark.parametrize("low, high, interior", [
    ([0, 1], [2, 1], [1, 2]),
    ([-1, 0], [0, -2], [1, 0]),
])
def test_dynamic_pad(low, high, interior):
    template = """
    func.func @main(%a: tensor<2x3xi64>, %v: tensor<i64>, %l: tensor<2xi64>, %h: tensor<2xi64>,
                    %i: tensor<2xi64>) -> RESULT {
      %0 = stablehlo.dynamic_pad %a, %v, %l, %h, %i
          : (tensor<2x3xi64>, tensor<i64>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> RESULT
      return %0 : RESULT
    }"""
    shape = [lo + (n - 1) * (i + 1) + 1 + hi for lo, n, i, hi in zip(low, (2, 3), interior, high)]
    static = f"tensor<{shape[0]}x{shape[1]}xi64>"
    args = (np.arange(1, 7, dtype=np.int64).reshape(2, 3), np.array(-9, np.int64),
            np.array(low, np.int64), np.array(high, np.int64), np.array(interior, np.int64))
    assert_same_as_reference(*both_forms(template, static, "tensor<?x?xi64>"), *args)


def test_real_dynamic_slice_moves_out_of_range_windows_inside():
    # real_dynamic_slice 4:7 of 6 elements (unit stride) behaves like
    # dynamic_slice, which the reference interpreter runs.
    text = """
    func.func @main(%a: tensor<6x4xi32>, %s: tensor<2xi64>, %l: tensor<2xi64>, %t: tensor<2xi64>)
        -> tensor<?x?xi32> {
      %0 = stablehlo.real_dynamic_slice %a, %s, %l, %t
          : (tensor<6x4xi32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<?x?xi32>
      return %0 : tensor<?x?xi32>
    }"""
    as_dynamic_slice = """
    func.func @main(%a: tensor<6x4xi32>, %i: tensor<i64>, %j: tensor<i64>) -> tensor<3x2xi32> {
      %0 = stablehlo.dynamic_slice %a, %i, %j, sizes = [3, 2]
          : (tensor<6x4xi32>, tensor<i64>, tensor<i64>) -> tensor<3x2xi32>
      return %0 : tensor<3x2xi32>
    }"""
    a = np.arange(24, dtype=np.int32).reshape(6, 4)
    for start in ([4, 1], [1, -1], [0, 2]):
        (ours,) = load(text)(a, np.array(start, np.int64), np.array(start, np.int64) + [3, 2],
                             np.array([1, 1], np.int64))
        (theirs,) = run_reference_interpreter(as_dynamic_slice, [a, np.int64(start[0]),
                                                                 np.int64(start[1])])
        np.testing.assert_array_equal(ours, theirs)


def test_real_dynamic_slice_with_strides_and_set_dimension_size():
    text = """
    func.func @main(%a: tensor<7x5xf32>, %n: tensor<i32>) -> (tensor<?x?xf32>, tensor<?x5xf32>) {
      %s = stablehlo.constant dense<[1, 0]> : tensor<2xi64>
      %l = stablehlo.constant dense<[7, 5]> : tensor<2xi64>
      %t = stablehlo.constant dense<[2, 3]> : tensor<2xi64>
      %0 = stablehlo.real_dynamic_slice %a, %s, %l, %t
          : (tensor<7x5xf32>, tensor<2xi64>, tensor<2xi64>, tensor<2xi64>) -> tensor<?x?xf32>
      %1 = stablehlo.set_dimension_size %a, %n, dim = 0 : (tensor<7x5xf32>, tensor<i32>) -> tensor<?x5xf32>
      return %0, %1 : tensor<?x?xf32>, tensor<?x5xf32>
    }"""
    as_slices = """
    func.func @main(%a: tensor<7x5xf32>) -> (tensor<3x2xf32>, tensor<4x5xf32>) {
      %0 = stablehlo.slice %a [1:7:2, 0:5:3] : (tensor<7x5xf32>) -> tensor<3x2xf32>
      %1 = stablehlo.slice %a [0:4, 0:5] : (tensor<7x5xf32>) -> tensor<4x5xf32>
      return %0, %1 : tensor<3x2xf32>, tensor<4x5xf32>
    }"""
    a = np.arange(35, dtype=np.float32).reshape(7, 5)
    ours = load(text)(a, np.int32(4))
    theirs = run_reference_interpreter(as_slices, [a])
    for x, y in zip(ours, theirs):
        np.testing.assert_array_equal(x, y)


def test_dynamic_update_slice_and_gather_in_jax_functions():
    # Static-shape neighbours of the dynamic ops, through JAX end to end.
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    assert_same_as_jax(lambda a, i: lax.dynamic_update_slice(a, a[:2, :2] * 0, (i, i)), x,
                       np.int32(4))
    assert_same_as_jax(lambda a, i: jnp.take(a, i, axis=1, mode="clip"), x,
                       np.array([[0, 3], [7, -2]], np.int32))
