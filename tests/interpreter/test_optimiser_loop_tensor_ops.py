"""Loop bodies that leave one shape (interpreter/native/tensor_ops.py):
iota, reshape, transpose, broadcasts, slices, concatenate, dynamic slices
and updates, reductions and integer products compile with the whole loop,
give the interpreted loop's bits (PJRT_REF_OPTIMIZE=0) and XLA CPU's values;
float products make numpy's BLAS call (small_products.py) or are handed back."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.jit_support import assert_same_values, entry_steps, load_with  # noqa: E402
from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from pjrt_ref.interpreter.native import small_products, tensor_ops  # noqa: E402

N = 8


def compiled_and_interpreted(monkeypatch, fn, *args):
    """(program with the optimiser on, its results); the results must equal
    the unoptimised interpreter's bit for bit and XLA CPU's closely."""
    text = lower_to_text(fn, *args)
    program = load_with(text, monkeypatch, optimize=True)
    results = program(*args)
    plain = load_with(text, monkeypatch, optimize=False)(*args)
    for ours, theirs in zip(results, plain):
        assert_same_values(ours, theirs)
    xla = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    for ours, theirs in zip(results, xla):
        np.testing.assert_allclose(np.asarray(ours, np.float64), np.asarray(theirs, np.float64),
                                   rtol=1e-5, atol=1e-6)
    return program, results


def is_compiled(program) -> bool:
    names = {step.op.name for step in entry_steps(program)}
    return "pjrt_ref.compiled_while" in names and "stablehlo.while" not in names


def loop(body, n=7):
    return lambda *args: lax.fori_loop(0, n, lambda i, c: body(i, c, *args[1:]), args[0])


def vector(dtype=np.float32, size=N, seed=0):
    values = np.random.default_rng(seed).standard_normal(size) * 3
    return values.astype(dtype)


BODIES = {
    "iota": (lambda i, c, y: c + lax.iota(np.int32, N) * y, np.int32),
    "iota 2-d, dimension 1": (lambda i, c, y: c + lax.broadcasted_iota(np.int32, (2, 4), 1).reshape(N) * y,
                              np.int32),
    "reduce sum": (lambda i, c, y: c * 0.5 + jnp.sum(c) * y, np.float32),
    "reduce sum float64": (lambda i, c, y: c * 0.5 + jnp.sum(c) * y, np.float64),
    "reduce max": (lambda i, c, y: c - jnp.max(c) + y, np.int32),
    "reduce min float": (lambda i, c, y: c - jnp.min(c) * 0.5 + y, np.float32),
    "reduce product": (lambda i, c, y: c * 0.9 + jnp.prod(c * 0.1 + 1) * y, np.float64),
    "partial reduce sum": (lambda i, c, y: (c.reshape(2, 4) + jnp.sum(c.reshape(2, 4), axis=1,
                                                                      keepdims=True) * 0.01).reshape(N) + y,
                           np.float32),
    "partial reduce product": (lambda i, c, y: (c.reshape(2, 4) * 0.5 + jnp.prod(c.reshape(2, 4) * 0.1 + 1,
                                                                               axis=0)).reshape(N) + y, np.float32),
    "reduce of size-1 dims": (lambda i, c, y: jnp.max(c.reshape(N, 1), axis=1) * 0.5 + y, np.float32),
    "any and all": (lambda i, c, y: jnp.where(jnp.any(c > 3) & jnp.all(c > -50), c - y, c + y), np.float32),
    "dynamic_slice": (lambda i, c, y: c + lax.dynamic_slice(
        jnp.concatenate([c, y]), (lax.convert_element_type(c[0], np.int32) % 8,), (N,)), np.float32),
    "dynamic_slice clamped": (lambda i, c, y: c * 0.5 + lax.dynamic_slice(
        jnp.concatenate([c, y]), (i * 5 - 10,), (N,)), np.float32),
    "dynamic_update_slice": (lambda i, c, y: lax.dynamic_update_slice(
        c, y[:2] + c[3], (lax.convert_element_type(jnp.abs(c[0]), np.int32) % 9 - 1,)), np.float32),
    "strided slice and concatenate": (lambda i, c, y: jnp.concatenate([c[::2] + y[1::2], c[1::2]]), np.float32),
    "transpose": (lambda i, c, y: c.reshape(2, 4).T.reshape(N) * 0.5 + y, np.float32),
    "outer product": (lambda i, c, y: (jnp.tanh(c[:, None] * y[None, :]) * 0.1).sum(axis=0) + c * 0.5,
                      np.float32),
    "integer matrix-vector product": (lambda i, c, y: (jnp.outer(y, y) @ c) % 1000 - 500, np.int32),
    "unsigned start index": (lambda i, c, y: c + lax.dynamic_slice(
        jnp.concatenate([c, y]), (lax.convert_element_type(i, np.uint32) * 3,), (N,)), np.float32),
}


# Bodies with float sums or products: they compile where numpy's order is
# confirmed on this machine (tensor_ops.fold_orders_agree).
FLOAT_FOLDS = {"reduce sum", "reduce sum float64", "reduce product", "partial reduce product"}
# Partial float sums: numpy's order follows the operand's strides.
INTERPRETED = {"partial reduce sum", "outer product"}


def sums_compile(dtype) -> bool:
    return tensor_ops.fold_orders_agree(np.dtype(dtype))


@pytest.mark.parametrize("name", list(BODIES))
def test_loop_body_compiles_with_the_interpreters_bits(name, monkeypatch):
    body, dtype = BODIES[name]
    program, _ = compiled_and_interpreted(monkeypatch, loop(body), vector(dtype), vector(dtype, seed=1))
    expected = name not in INTERPRETED and (name not in FLOAT_FOLDS or sums_compile(dtype))
    assert is_compiled(program) == expected, name


def test_long_sums_follow_numpys_pairwise_order(monkeypatch):
    """Rows longer than 128 elements: numpy's blocks of 128 and halves."""
    fn = loop(lambda i, c, y: c * 0.999 + jnp.sum(c * y) * 1e-3, n=3)
    for size in (7, 8, 9, 129, 300, 1000):
        program, _ = compiled_and_interpreted(monkeypatch, fn, vector(np.float32, size),
                                              vector(np.float32, size, seed=1))
        assert is_compiled(program) == sums_compile(np.float32), size


def test_cond_may_reduce_the_carried_array(monkeypatch):
    fn = lambda c: lax.while_loop(lambda c: jnp.max(c) < 100, lambda c: c * 1.5 + 1, c)  # noqa: E731
    program, _ = compiled_and_interpreted(monkeypatch, fn, np.abs(vector()))
    assert is_compiled(program)


def loop_source(program) -> str:
    (loop_step,) = [s for s in entry_steps(program) if s.op.name == "pjrt_ref.compiled_while"]
    return loop_step.kernel.source


# Float products numpy makes by one BLAS call (small_products.py), by case.
FLOAT_PRODUCTS = {
    "matrix @ vector": (lambda i, c, y: jnp.tanh(jnp.outer(y, y) @ c), np.float32),
    "transposed matrix @ vector": (lambda i, c, y: jnp.tanh(jnp.outer(y, c).T @ c), np.float32),
    "vector @ matrix": (lambda i, c, y: jnp.tanh(c @ jnp.outer(y, y)), np.float32),
    "vector . vector": (lambda i, c, y: jnp.tanh(c * 0.5 + jnp.dot(c, y)), np.float32),
    "matrix @ matrix": (lambda i, c, y: jnp.tanh(c.reshape(2, 4) @ y.reshape(4, 2) @ c.reshape(2, 4)
                                                 ).reshape(N), np.float32),
    "matrix @ matrix float64": (lambda i, c, y: jnp.tanh((c.reshape(4, 2) @ (c * y).reshape(2, 4))[:2]
                                                         ).reshape(N), np.float64),
    "matrix times its transpose": (lambda i, c, y: jnp.tanh((jnp.outer(c, y) @ jnp.outer(c, y).T)[0] * 1e-3),
                                   np.float32),
}


@pytest.mark.parametrize("name", list(FLOAT_PRODUCTS))
def test_float_products_make_numpys_blas_call_or_are_handed_back(name, monkeypatch):
    """A float dot_general in a compiled loop makes the BLAS call numpy
    makes, where its probe confirms the interpreter's bits on this machine,
    else runs by the interpreter's kernel (native/hand_back.py). Either
    way the loop stays compiled and gives the interpreter's bits."""
    body, dtype = FLOAT_PRODUCTS[name]
    program, _ = compiled_and_interpreted(monkeypatch, loop(body), vector(dtype), vector(dtype, seed=1))
    assert is_compiled(program)
    source = loop_source(program)
    assert ("cblas_" in source) or ("hand_back_run(" in source), source


def test_the_blas_call_is_made_exactly_where_the_probe_agrees(monkeypatch):
    """Both branches on one program: the probe agreeing (as it does where
    numpy's OpenBLAS makes the call small_products mirrors) and failing
    (another numpy or BLAS)."""
    fn = loop(lambda i, c, y: jnp.tanh(jnp.outer(y, y) @ c))
    seen = []
    monkeypatch.setattr(small_products, "_agrees", lambda key, op: seen.append(key) or True)
    small_products._VERDICTS.clear()
    program, _ = compiled_and_interpreted(monkeypatch, fn, vector(), vector(seed=1))
    if small_products.function("cblas_sgemv", np.dtype(np.float32)) is not None:
        assert "cblas_sgemv(" in loop_source(program) and seen
    monkeypatch.setattr(small_products, "_agrees", lambda key, op: False)
    program, _ = compiled_and_interpreted(monkeypatch, fn, vector(), vector(seed=2))
    assert is_compiled(program)
    assert "hand_back_run(" in loop_source(program) and "cblas_" not in loop_source(program)


def test_without_numpys_openblas_products_are_handed_back(monkeypatch):
    monkeypatch.setattr(small_products, "function", lambda name, dtype: None)
    fn = loop(lambda i, c, y: jnp.tanh(jnp.outer(y, y) @ c))
    program, _ = compiled_and_interpreted(monkeypatch, fn, vector(), vector(seed=1))
    assert is_compiled(program)
    assert "hand_back_run(" in loop_source(program)


@pytest.mark.parametrize("rows, inner, columns, a_order, b_order, expected", [
    (8, 8, 1, "C", "C", ("gemv", (102, 112, 8, 8, 8, 1, 1), False)),
    (8, 8, 1, "F", "C", ("gemv", (101, 112, 8, 8, 8, 1, 1), False)),
    (1, 8, 8, "C", "C", ("gemv", (101, 112, 8, 8, 8, 1, 1), True)),
    (1, 8, 1, "C", "C", ("dot", (8, 1, 1), False)),
    (2, 4, 3, "C", "F", ("gemm", (101, 111, 112, 2, 3, 4, 4, 4, 3), False)),
    (2, 1, 3, "C", "C", None),
])
def test_numpys_choice_of_blas_call(rows, inner, columns, a_order, b_order, expected):
    """numpy's matmul (numpy/_core/src/umath/matmul.c.src) for the layouts
    a compiled loop gives it: row-major or transposed operands."""
    a = np.empty((rows, inner), np.float32, order=a_order)
    b = np.empty((inner, columns), np.float32, order=b_order)
    call = small_products.numpy_call(a.strides, b.strides, rows, inner, columns, np.float32)
    assert (None if call is None else (call.routine, call.arguments, call.swapped)) == expected


def test_a_handed_back_op_reads_the_carried_value_of_this_iteration(monkeypatch):
    """The carried array lives in two alternating rows: a handed-back op
    must read the row the last iteration wrote, not the initial value."""
    fn = loop(lambda i, c, y: jnp.tanh(jnp.outer(y, c) @ c) + c * 0.5, n=5)
    program, _ = compiled_and_interpreted(monkeypatch, fn, vector(), vector(seed=1))
    assert is_compiled(program)


def test_a_numpy_that_sums_in_another_order_keeps_sums_interpreted(monkeypatch):
    """The other branch of fold_orders_agree: the loop stays interpreted,
    with the interpreter's values."""
    monkeypatch.setattr(tensor_ops, "fold_orders_agree", lambda dtype: False)
    fn = loop(lambda i, c, y: c * 0.5 + jnp.sum(c) * y)
    program, _ = compiled_and_interpreted(monkeypatch, fn, vector(), vector(seed=1))
    assert not is_compiled(program)


def test_large_updated_arrays_stay_with_the_in_place_interpreter(monkeypatch):
    size = tensor_ops.MAX_UPDATED_ELEMENTS + 8
    fn = loop(lambda i, c, y: lax.dynamic_update_slice(c, y[:2] * 2, (i,)))
    program, _ = compiled_and_interpreted(monkeypatch, fn, vector(size=size), vector(size=size, seed=1))
    assert not is_compiled(program)


def test_values_of_another_shape_are_refilled_and_copied_where_kept(monkeypatch):
    """A value of another shape than the loop's own is refilled each
    iteration in one array made before the loop (Translator.refilled). A
    carried one is copied when rebound: the 2x2 matrix below, transposed
    each iteration, would otherwise be transposed in place."""
    def fn(c, b, y):
        def body(i, carried):
            c, b = carried
            b = b.T
            return c * 0.9 + y + jnp.sum(b[0]), b
        return lax.fori_loop(0, 5, body, (c, b))

    matrix = vector(size=4, seed=2).reshape(2, 2)
    program, _ = compiled_and_interpreted(monkeypatch, fn, vector(), matrix, vector(seed=1))
    assert is_compiled(program)
    iteration = loop_source(program).split("while True:")[1]
    assert "np.empty(" not in iteration                      # nothing allocated per iteration
    assert ".copy()," in iteration                           # but the carried matrix
