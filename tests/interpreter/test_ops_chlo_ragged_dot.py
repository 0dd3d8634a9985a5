"""chlo.ragged_dot in its three modes against JAX's lax.ragged_dot_general
on XLA CPU (XLA:CPU cannot compile chlo.ragged_dot itself; JAX lowers
ragged dots to a masked dot_general instead). Summation order differs, so
float results agree to rounding."""
from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax

from tests.support import oracle  # noqa: F401  (JAX on cpu with x64)
from pjrt_ref.interpreter import load

RNG = np.random.default_rng(0)


def program(lhs, rhs, group_sizes, result_shape, numbers: dict, element="f32") -> str:
    def t(shape, e=element):
        return f"tensor<{''.join(f'{d}x' for d in shape)}{e}>"
    fields = ", ".join(f"{name} = [{', '.join(map(str, dims))}]" for name, dims in numbers.items())
    operands = f"{t(lhs.shape)}, {t(rhs.shape)}, {t(group_sizes.shape, 'i32')}"
    return (f"func.func @main(%l: {t(lhs.shape)}, %r: {t(rhs.shape)}, "
            f"%g: {t(group_sizes.shape, 'i32')}) -> {t(result_shape)} {{\n"
            f"  %0 = \"chlo.ragged_dot\"(%l, %r, %g) {{ragged_dot_dimension_numbers = "
            f"#chlo.ragged_dot<{fields}>, precision_config = [#chlo<precision DEFAULT>, "
            f"#chlo<precision DEFAULT>]}} : ({operands}) -> {t(result_shape)}\n"
            f"  return %0 : {t(result_shape)}\n}}\n")


def check(lhs, rhs, group_sizes, lhs_batch, rhs_batch, lhs_contract, rhs_contract, ragged,
          group):
    numbers = {"lhs_batching_dimensions": lhs_batch, "rhs_batching_dimensions": rhs_batch,
               "lhs_contracting_dimensions": lhs_contract,
               "rhs_contracting_dimensions": rhs_contract,
               "lhs_ragged_dimensions": [ragged], "rhs_group_dimensions": group}
    dimension_numbers = lax.RaggedDotDimensionNumbers(
        dot_dimension_numbers=((lhs_contract, rhs_contract), (lhs_batch, rhs_batch)),
        lhs_ragged_dimensions=[ragged], rhs_group_dimensions=group)
    expected = np.asarray(jax.jit(
        lambda a, b, c: lax.ragged_dot_general(a, b, c, dimension_numbers))(lhs, rhs, group_sizes))
    ours = load(program(lhs, rhs, group_sizes, expected.shape, numbers))(lhs, rhs, group_sizes)[0]
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)


def floats(*shape):
    return RNG.normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("group_sizes", [[4, 4, 3], [2, 0, 5], [1, 1, 1], [0, 0, 11]])
def test_mode_1_ragged_rows(group_sizes):
    """Rows past the last group (sum(group_sizes) < m) are zero."""
    check(floats(11, 5), floats(3, 5, 7), np.array(group_sizes, np.int32),
          [], [], [1], [1], 0, [0])


def test_mode_1_with_batch_and_per_batch_groups():
    check(floats(2, 11, 5), floats(3, 2, 5, 7), np.array([[4, 4, 2], [1, 6, 4]], np.int32),
          [0], [1], [2], [2], 1, [0])


def test_mode_2_ragged_contracting_dimension():
    check(floats(6, 10), floats(10, 4), np.array([3, 5, 1], np.int32), [], [], [1], [0], 1, [])


def test_mode_3_ragged_batch_dimension():
    check(floats(3, 6, 10), floats(3, 10, 4), np.array([1, 2], np.int32),
          [0], [0], [2], [1], 0, [])
