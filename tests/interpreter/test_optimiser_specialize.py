"""Plan-time specialised kernels (registry `specialize`, asked by
interpreter/optimiser/direct_kernels.py): reduce, broadcast_in_dim, reshape, transpose,
point gathers and scatters. Each must give the generic kernel's bits
(PJRT_REF_OPTIMIZE=0) and XLA CPU's values, and must actually be the kernel
that ran (checked by name, so a test cannot pass on the generic path)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.jit_support import assert_same_values  # noqa: E402
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402

SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-39, -3.5, 1e30, -1e-45]


def floats(shape, dtype=np.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(int(np.prod(shape))) * 10).astype(dtype)
    x[:len(SPECIALS)] = np.asarray(SPECIALS[:x.size], dtype=dtype)[:min(x.size, len(SPECIALS))]
    return rng.permutation(x).reshape(shape)


def kernel_names(program) -> set[str]:
    names = set()

    def visit(region):
        for step in region.steps:
            names.add(getattr(step.kernel, "__name__", "?"))
            for nested in step.regions:
                visit(nested)
    for plan in program.module_plan.functions.values():
        visit(plan.body)
    return names


def check(fn, args, monkeypatch, expect: set[str], exact_xla: bool = False):
    """Optimised results == PJRT_REF_OPTIMIZE=0's bit for bit (NaN payloads
    aside), close to (or equal to) XLA's; the kernels named `expect` ran."""
    text = lower_to_text(fn, *args)
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1")
    fast = load(text)
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "0")
    plain = load(text)
    assert expect <= kernel_names(fast), kernel_names(fast)
    assert not expect & kernel_names(plain)
    ours, reference = fast(*args), plain(*args)
    for a, b in zip(ours, reference):
        assert_same_values(np.asarray(a), np.asarray(b))
    xla = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    assert len(xla) == len(ours)
    for a, b in zip(ours, xla):
        b = np.asarray(b)
        if exact_xla or a.dtype.kind in "biu":
            assert_same_values(np.asarray(a), b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, equal_nan=True)
    return ours


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduce_float_bodies(dtype, monkeypatch):
    """add/max/min over leading, trailing, several and all axes, with NaN,
    -0.0 and infinities in the data; one operand reduced from a transposed
    (non-contiguous) view."""
    x = floats((6, 7, 5), dtype)
    def fn(x):
        t = jnp.transpose(x, (1, 0, 2))
        return (jnp.sum(x, axis=0), jnp.sum(x, axis=2), jnp.max(x, axis=(0, 2)),
                jnp.min(x), jnp.sum(t, axis=(0, 2)), jnp.max(t, axis=1))
    check(fn, (x,), monkeypatch, {"reduce_with_ufunc"})


def test_reduce_max_min_signed_zeros_and_nan(monkeypatch):
    """max over {-0, +0} is +0, min is -0; a NaN anywhere wins."""
    x = np.array([[-0.0, 0.0, -0.0], [0.0, -0.0, -0.0], [-0.0, -0.0, -0.0],
                  [1.0, np.nan, 2.0]], np.float32)
    fn = lambda x: (jnp.max(x, axis=1), jnp.min(x, axis=1), jnp.max(x, axis=0),
                    jnp.max(x, axis=1, initial=0.0), jnp.min(x, axis=1, initial=-0.0))
    check(fn, (x,), monkeypatch, {"reduce_with_ufunc"}, exact_xla=True)


def test_reduce_window_signed_zeros(monkeypatch):
    """Windows of zeros of both signs (reduce_window shares the folds)."""
    x = np.array([[-0.0, 0.0, -0.0, -0.0], [0.0, -0.0, -0.0, 1.0], [-0.0, -0.0, 2.0, -0.0]],
                 np.float32)
    fn = lambda x: (jax.lax.reduce_window(x, -np.inf, jax.lax.max, (2, 2), (1, 1), "VALID"),
                    jax.lax.reduce_window(x, np.inf, jax.lax.min, (1, 3), (1, 1), "VALID"))
    check(fn, (x,), monkeypatch, set(), exact_xla=True)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.int64])
def test_reduce_integers_wrap(dtype, monkeypatch):
    info = np.iinfo(dtype)
    x = np.random.default_rng(1).integers(info.min, info.max, (9, 13), dtype=dtype, endpoint=True)
    fn = lambda x: (jnp.sum(x, axis=1, dtype=dtype), jnp.max(x, axis=0), jnp.min(x))
    check(fn, (x,), monkeypatch, {"reduce_with_ufunc"})


def test_reduce_bool(monkeypatch):
    x = np.random.default_rng(2).random((8, 6)) > 0.7
    x[0] = True
    x[1] = False
    fn = lambda x: (jnp.all(x, axis=1), jnp.any(x, axis=1), jnp.any(x, axis=0))
    check(fn, (x,), monkeypatch, {"reduce_with_ufunc"})


def test_reduce_empty_stays_generic(monkeypatch):
    """Empty folds give the init (the generic kernel's case)."""
    x = np.zeros((3, 0), np.float32)
    fn = lambda x: (jnp.sum(x, axis=1), jnp.max(x, axis=1, initial=-2.0), jnp.sum(x))
    check(fn, (x,), monkeypatch, set())


def test_reduce_single_elements(monkeypatch):
    """Only size-1 dims reduced: each result is its element (-0.0 and NaN
    kept, bool and int too), from row-major and from transposed operands."""
    y, t = floats((4, 1, 3)), floats((1, 5))
    b = np.array([[True], [False]])
    fn = lambda y, t, b: (jnp.sum(y, axis=1), jnp.max(y.transpose(2, 1, 0), axis=1),
                          jnp.sum(t.T, axis=1), jnp.all(b, axis=1),
                          jnp.sum(y.astype(jnp.int32), axis=1))
    check(fn, (y, t, b), monkeypatch, {"reduce_single_elements"}, exact_xla=True)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_broadcast_reshape_transpose(dtype, monkeypatch):
    """Unsorted broadcast dims, size-1 expansion, reshapes and transposes;
    results used by an add (the W4 bias add: row-major operands)."""
    x = floats((3, 1, 4)).astype(dtype)
    b = floats((4,), seed=1).astype(dtype)
    def fn(x, b):
        wide = jax.lax.broadcast_in_dim(x, (4, 5, 3, 2), (2, 3, 0))  # dims not increasing
        bias = jnp.broadcast_to(b.reshape(1, 4), (6, 4))
        flat = jnp.reshape(jnp.transpose(wide, (3, 1, 0, 2)), (10, 12))
        total = bias + bias if dtype != np.bool_ else bias | bias
        return wide, total, flat, jnp.transpose(x, (2, 0, 1))
    check(fn, (x, b), monkeypatch,
          {"broadcast_in_place", "reshape_static", "transpose_fixed"}, exact_xla=True)


def test_broadcast_inserting_size_one_dims_is_a_view(monkeypatch):
    """512 -> 1x512 (and 0-d -> 1x1): a view of a row-major operand; a
    transposed operand is copied row-major, as the generic kernel does."""
    b, m = floats((512,)), floats((6, 4))
    def fn(b, m):
        row = jax.lax.broadcast_in_dim(b, (1, 512), (1,))
        col = jax.lax.broadcast_in_dim(m.T, (4, 1, 6), (0, 2))
        one = jax.lax.broadcast_in_dim(b[3], (1, 1), ())
        return row, col, one, jnp.sum(col, axis=2) + jnp.sum(row)
    check(fn, (b, m), monkeypatch, {"broadcast_as_view"}, exact_xla=False)
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1")
    program = load(lower_to_text(fn, b, m))
    (step,) = [s for s in program.function.body.steps
               if s.kernel.__name__ == "broadcast_as_view" and s.op.result_type.shape == (4, 1, 6)]
    contiguous, strided = np.ones((4, 6), np.float32), np.ones((6, 4), np.float32).T
    viewed, copied = step.kernel(step.op, contiguous), step.kernel(step.op, strided)
    assert viewed.shape == copied.shape == (4, 1, 6)
    assert np.shares_memory(viewed, contiguous)
    assert copied.flags.c_contiguous and not np.shares_memory(copied, strided)


def test_constants_start_in_the_frame(monkeypatch):
    """The optimiser takes constant steps out of the body; results (a
    constant returned as is, constants used by other ops) are unchanged."""
    x = floats((3, 4))
    def fn(x):
        c = jnp.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
        return x * 2.0 + c, c, jnp.float32(7.0)
    check(fn, (x,), monkeypatch, set(), exact_xla=True)
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1")
    program = load(lower_to_text(fn, x))
    assert not [s for s in program.function.body.steps if s.op.name == "stablehlo.constant"]
    first, second = program(x), program(x)
    for a, b in zip(first, second):
        assert_same_values(np.asarray(a), np.asarray(b))


def test_equal_constants_are_distinct_steps(monkeypatch):
    """Two constants with the same array value and location (comparing
    such steps field by field reaches the arrays: `==` is ambiguous) are
    both preset."""
    text = """
func.func @main(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %a = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32> loc("same")
  %b = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32> loc("same")
  %s = stablehlo.add %x, %a : tensor<2xf32>
  return %s, %b : tensor<2xf32>, tensor<2xf32>
}"""
    x = np.array([0.5, -0.0], np.float32)
    results = {}
    for optimize in ("1", "0"):
        monkeypatch.setenv("PJRT_REF_OPTIMIZE", optimize)
        results[optimize] = load(text)(x)
    for a, b in zip(results["1"], results["0"]):
        assert_same_values(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(results["1"][0], [1.5, 2.0])


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint32, np.int64])
def test_logical_ops_call_numpy_directly(dtype, monkeypatch):
    """and/or/xor/not: logical on booleans, bitwise on integers."""
    rng = np.random.default_rng(8)
    if dtype == np.bool_:
        x, y = rng.random(40) > 0.5, rng.random(40) > 0.3
    else:
        info = np.iinfo(dtype)
        x, y = (rng.integers(info.min, info.max, 40, dtype=dtype, endpoint=True) for _ in range(2))
    fn = lambda x, y: (x & y, x | y, x ^ y, ~x)
    check(fn, (x, y), monkeypatch, set(), exact_xla=True)
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", "1")
    names = kernel_names(load(lower_to_text(fn, x, y)))
    assert not names & {"and", "or", "xor", "not"}, names  # the generic kernels' names


def test_broadcast_result_is_row_major(monkeypatch):
    """(1, n) -> (m, n) broadcasts are laid out row-major, optimised or not
    (a column-major copy made every later elementwise op strided)."""
    b = floats((512,))
    text = lower_to_text(lambda b: jnp.broadcast_to(b.reshape(1, 512), (128, 512)), b)
    for optimize in ("1", "0"):
        monkeypatch.setenv("PJRT_REF_OPTIMIZE", optimize)
        program = load(text)
        step = [s for s in program.function.body.steps
                if s.op.name == "stablehlo.broadcast_in_dim" and s.op.result_type.shape == (128, 512)]
        frame_value = step[0].kernel(step[0].op, b.reshape(1, 512))
        assert frame_value.flags.c_contiguous


def test_take_along_axis_gather_clamps(monkeypatch):
    """W4's gather (batching dims, take_along_axis) with indices out of
    range both ways: clamped into the dim, as XLA does."""
    x = floats((128, 10))
    idx = np.random.default_rng(3).integers(-20, 30, (128, 1)).astype(np.int32)
    idx[:4, 0] = [0, 9, 10, -1]
    fn = lambda x, i: jnp.take_along_axis(x, i, axis=1, mode="clip")
    check(fn, (x, idx), monkeypatch, {"gather_points"}, exact_xla=True)


@pytest.mark.parametrize("index_dtype", [np.int32, np.uint8, np.int64])
def test_point_gather_index_types(index_dtype, monkeypatch):
    """x[i, j] pairs (index vectors along the last dim) of several index types."""
    x = floats((7, 9), np.float64)
    rng = np.random.default_rng(4)
    idx = rng.integers(0, 12, (5, 3, 2)).astype(index_dtype)
    fn = lambda x, i: x.at[i[..., 0], i[..., 1]].get(mode="clip")
    check(fn, (x, idx), monkeypatch, {"gather_points"}, exact_xla=True)


def test_point_gather_scatter_on_transposed_operands(monkeypatch):
    """Operands that are non-contiguous views (a transpose's result)."""
    x = floats((10, 128))
    idx = np.random.default_rng(9).integers(-3, 13, (128, 1)).astype(np.int32)
    v = floats((128,), seed=10)
    fn = lambda x, i, v: (jnp.take_along_axis(x.T, i, axis=1, mode="clip"),
                          x.T.at[jnp.arange(128), i[:, 0]].add(v, mode="drop"))
    check(fn, (x, idx, v), monkeypatch, {"gather_points", "scatter_points"}, exact_xla=True)


HUGE_INDICES = """
func.func @main(%x: tensor<16xf32>, %i: tensor<4x1xui64>, %v: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<16xf32>) {
  %g = "stablehlo.gather"(%x, %i) <{dimension_numbers = #stablehlo.gather<
      offset_dims = [], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>,
      indices_are_sorted = false, slice_sizes = array<i64: 1>}>
      : (tensor<16xf32>, tensor<4x1xui64>) -> tensor<4xf32>
  %s = "stablehlo.scatter"(%x, %i, %v) <{indices_are_sorted = false,
      scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [],
      inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>,
      unique_indices = false}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %sum = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %sum : tensor<f32>
  }) : (tensor<16xf32>, tensor<4x1xui64>, tensor<4xf32>) -> tensor<16xf32>
  return %g, %s : tensor<4xf32>, tensor<16xf32>
}"""


def test_huge_unsigned_indices(monkeypatch):
    """uint64 indices beyond int64: a gather clamps them to the last
    element, a scatter skips them (as_int64 saturates, as the generic path)."""
    x = floats((16,))
    idx = np.array([[3], [2**63 + 5], [2**64 - 1], [15]], np.uint64)
    v = floats((4,), seed=11)
    results = {}
    for optimize in ("1", "0"):
        monkeypatch.setenv("PJRT_REF_OPTIMIZE", optimize)
        program = load(HUGE_INDICES)
        assert ({"gather_points", "scatter_points"} <= kernel_names(program)) == (optimize == "1")
        results[optimize] = program(x, idx, v)
    for a, b in zip(results["1"], results["0"]):
        assert_same_values(np.asarray(a), np.asarray(b))
    gathered, added = results["1"]
    np.testing.assert_array_equal(gathered, x[[3, 15, 15, 15]])
    expected = x.copy()
    expected[3] += v[0]
    expected[15] += v[3]
    np.testing.assert_array_equal(added, expected)


def test_take_along_axis_gradient_scatter_add(monkeypatch):
    """The gradient of W4's gather: a scatter-add with batching dims,
    duplicate targets accumulating in order. (Normal values: XLA flushes
    the subnormal gradients of SPECIALS to zero, which is not the point here.)"""
    x = np.random.default_rng(7).standard_normal((128, 10)).astype(np.float32)
    idx = np.random.default_rng(5).integers(0, 10, (128, 1)).astype(np.int32)
    fn = jax.grad(lambda x, i: jnp.sum(jnp.take_along_axis(x, i, axis=1) ** 2))
    check(lambda x, i: (fn(x, i), i + 1), (x, idx), monkeypatch, {"scatter_points"},
          exact_xla=True)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_point_scatter_skips_out_of_bounds(dtype, monkeypatch):
    """Out-of-range targets (negative or past the end) are skipped; add
    accumulates duplicates, set keeps the last update (XLA's order)."""
    x = floats((16,)).astype(dtype)
    idx = np.array([3, 3, -1, 16, 200, 0, 15, 3, -7], np.int32)
    v = floats((9,), seed=6).astype(dtype)
    fn = lambda x, i, v: (x.at[i].add(v, mode="drop"), x.at[i].set(v, mode="drop"),
                          x.at[i].max(v, mode="drop"))
    check(fn, (x, idx, v), monkeypatch, {"scatter_points"}, exact_xla=dtype != np.float32)


def test_empty_indices(monkeypatch):
    x = floats((6, 4))
    idx = np.zeros((0, 1), np.int32)
    fn = lambda x, i: (jnp.take_along_axis(x[:0], i, axis=1, mode="clip"),
                       x.at[i[:, 0], 0].add(1.0, mode="drop"))
    check(fn, (x, idx), monkeypatch, set(), exact_xla=True)
