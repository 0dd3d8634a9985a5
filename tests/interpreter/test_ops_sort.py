"""stablehlo.sort against JAX's CPU backend and XLA: JAX's total-order float
comparators (NaNs, -0.0, infinities), stable argsort, multi-key sorts,
descending sorts, integer/bool/complex keys, long rows (bitonic network)
and a comparator that is not element-wise (pairwise fallback)."""
import ml_dtypes
import numpy as np
import pytest
import jax.numpy as jnp
from jax import lax

from tests.support.oracle import assert_same_as_jax, compare_with_jax
from tests.support.xla_oracle import ours_and_xla

RNG = np.random.default_rng(2)


def _special_floats(shape, dtype=np.float32):
    x = RNG.normal(size=shape).astype(dtype)
    flat = x.reshape(-1)
    flat[::5] = np.nan
    flat[1::7] = -0.0
    flat[2::7] = 0.0
    flat[3::11] = -np.inf
    flat[4::13] = np.inf
    flat[5::9] = 1.0
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_float_sort_total_order(dtype):
    x = _special_floats((5, 40), dtype)
    ours = assert_same_as_jax(lambda v: jnp.sort(v, axis=1), x)
    theirs = np.sort(x.astype(np.float64), axis=1)
    # -0.0 and +0.0 compare equal in JAX's comparator: stability keeps their order
    assert np.array_equal(np.isnan(ours[0]), np.isnan(theirs))
    assert_same_as_jax(lambda v: jnp.sort(v, axis=0), x)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint64, np.bool_])
def test_integer_sort_and_stable_argsort(dtype):
    x = RNG.integers(0, 4, size=(3, 33)).astype(dtype)
    assert_same_as_jax(lambda v: jnp.sort(v, axis=-1), x)
    assert_same_as_jax(lambda v: jnp.argsort(v, axis=-1, stable=True), x)
    assert_same_as_jax(lambda v: jnp.argsort(v, axis=0, stable=True, descending=True), x)


def test_bitwise_identical_float_sort_of_long_rows():
    x = _special_floats((3, 1000))
    ours = assert_same_as_jax(lambda v: jnp.sort(v), x)
    jax_sorted = np.asarray(jnp.sort(x))
    assert ours[0].tobytes() == jax_sorted.tobytes()  # -0.0/+0.0 in the same places
    assert_same_as_jax(lambda v: jnp.argsort(v, descending=True), x)


def test_multi_operand_multi_key_sort():
    keys = RNG.integers(0, 3, size=50).astype(np.int32)
    second = _special_floats((50,))
    payload = np.arange(50, dtype=np.int64)
    fn = lambda a, b, c: lax.sort((a, b, c), num_keys=2, is_stable=True)
    assert_same_as_jax(fn, keys, second, payload)
    # Unstable: the order of equal keys is implementation-defined (we keep
    # it stable), so compare the keys and each row's payload.
    fn = lambda a, b, c: lax.sort((a, b, c), num_keys=1, is_stable=False)
    ours, theirs = compare_with_jax(fn, keys, second, payload)
    np.testing.assert_array_equal(ours[0], theirs[0])
    assert sorted(zip(ours[0], ours[2])) == sorted(zip(theirs[0], theirs[2]))


def test_complex_sort_is_lexicographic():
    x = (RNG.integers(-2, 2, 30) + 1j * RNG.normal(size=30)).astype(np.complex64)
    x[::6] = complex(np.nan, 1.0)
    assert_same_as_jax(lambda v: jnp.sort(v), x)


def test_trivial_sizes():
    assert_same_as_jax(lambda v: jnp.sort(v, axis=1), np.zeros((4, 1), np.float32))
    assert_same_as_jax(lambda v: jnp.sort(v, axis=1), np.zeros((4, 0), np.float32))
    assert_same_as_jax(lambda v: jnp.sort(v), np.array([3.0, 1.0, 2.0], np.float32))


_CALL_COMPARATOR = """
func.func private @less(%a: tensor<i32>, %b: tensor<i32>) -> tensor<i1> {
  %c = stablehlo.compare GT, %a, %b, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
  return %c : tensor<i1>
}
func.func @main(%x: tensor<3x17xi32>, %y: tensor<3x17xf32>) -> (tensor<3x17xi32>, tensor<3x17xf32>) {
  %r:2 = "stablehlo.sort"(%x, %y) ({
    ^bb0(%a: tensor<i32>, %b: tensor<i32>, %c: tensor<f32>, %d: tensor<f32>):
      %less = func.call @less(%a, %b) : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %less : tensor<i1>
  }) {dimension = 1 : i64, is_stable = true}
    : (tensor<3x17xi32>, tensor<3x17xf32>) -> (tensor<3x17xi32>, tensor<3x17xf32>)
  return %r#0, %r#1 : tensor<3x17xi32>, tensor<3x17xf32>
}
"""


def test_comparator_with_a_call_sorts_pairwise_and_stably():
    x = RNG.integers(0, 5, (3, 17)).astype(np.int32)
    y = RNG.normal(size=(3, 17)).astype(np.float32)
    ours, theirs = ours_and_xla(_CALL_COMPARATOR, [x, y])
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fn", [
    lambda x: lax.approx_max_k(x, 2),
    lambda x: lax.approx_min_k(x, 3, recall_target=0.5, aggregate_to_topk=False),
    lambda x: lax.approx_max_k(x, 2, reduction_dimension=0),
], ids=["max_k", "min_k_not_aggregated", "max_k_dim0"])
def test_approx_top_k_is_xla_cpus_exact_top_k(fn):
    """`custom_call @ApproxTopK` (interpreter/ops/approx_top_k.py): XLA CPU's
    exact fallback, ties included (NaN is left out: under JAX's `GT`
    comparator it is unordered, and XLA's sort places it where its
    algorithm happens to)."""
    x = RNG.normal(size=(3, 7)).astype(np.float32)
    x[0, 2] = x[0, 5]
    assert_same_as_jax(fn, x)
