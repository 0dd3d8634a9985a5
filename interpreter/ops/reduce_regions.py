"""Looking inside reduction bodies, and running them over whole arrays.

Used by reduce, reduce_window, select_and_scatter and sort. Two ideas:

* `binary_ufuncs(plan)` recognises a body that is just `add` / `multiply` /
  `maximum` / `minimum` / `and` / `or` / `xor` of its two block arguments
  (one such op per operand of a variadic reduce), so the kernel can call
  numpy's `ufunc.reduce` instead of running the body at all.
* Every other body made only of element-wise ops (compare, select, ...) is
  run *vectorised*: its block arguments are whole arrays instead of 0-d
  tensors, so one run of the body combines many pairs of elements at once.
  `tree_reduce` folds a trailing axis that way in log2(n) runs of the body,
  pairing neighbours so that the left operand always precedes the right one
  (the spec leaves the schedule implementation-defined; any associative body
  gives the same result as a left-to-right fold).

Bodies with other ops (calls, while loops, ...) run element by element.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from pjrt_ref.interpreter.native.regions import folder
from pjrt_ref.interpreter.ops.elementwise_binary import maximum_values, minimum_values
from pjrt_ref.interpreter.types import is_bool, is_float

# Region body op -> the numpy ufunc it computes on two arrays of one dtype
# (all commutative, so the order of the body's operands does not matter).
BODY_UFUNCS = {
    "stablehlo.add": np.add,
    "stablehlo.multiply": np.multiply,
    "stablehlo.maximum": np.maximum,
    "stablehlo.minimum": np.minimum,
    "stablehlo.and": np.bitwise_and,
    "stablehlo.or": np.bitwise_or,
    "stablehlo.xor": np.bitwise_xor,
}
# On i1, add is `or` and multiply is `and` (spec "add", "multiply").
_BOOL_UFUNCS = {np.add: np.logical_or, np.multiply: np.logical_and}

# Ops whose kernels combine arrays of any (broadcastable) shape element by
# element, so a body made only of these can run on whole arrays at once.
ELEMENTWISE_OPS = frozenset({
    "stablehlo.constant", "stablehlo.add", "stablehlo.subtract", "stablehlo.multiply",
    "stablehlo.divide", "stablehlo.remainder", "stablehlo.maximum", "stablehlo.minimum",
    "stablehlo.and", "stablehlo.or", "stablehlo.xor", "stablehlo.not",
    "stablehlo.compare", "stablehlo.select", "stablehlo.negate", "stablehlo.abs",
    "stablehlo.convert", "stablehlo.exponential", "stablehlo.log", "stablehlo.log_plus_one",
    "stablehlo.exponential_minus_one", "stablehlo.sqrt", "stablehlo.is_finite",
    "stablehlo.real", "stablehlo.imag", "stablehlo.complex", "stablehlo.sign",
    "stablehlo.power", "stablehlo.clamp", "stablehlo.shift_left",
    "stablehlo.shift_right_logical", "stablehlo.shift_right_arithmetic",
    "stablehlo.bitcast_convert", "stablehlo.floor", "stablehlo.ceil",
    "stablehlo.tanh", "stablehlo.logistic", "stablehlo.atan2", "stablehlo.popcnt",
    "chlo.next_after",
})


@dataclass(frozen=True)
class BodyAnalysis:
    """What a kernel needs to know about one region body, found at plan time."""

    ufuncs: tuple | None      # per-result ufunc of a plain add/max/... body
    elementwise: bool         # every step element-wise: the body can run on arrays


def analyse_body(plan) -> BodyAnalysis:
    ufuncs = binary_ufuncs(plan)
    return BodyAnalysis(tuple(ufuncs) if ufuncs is not None else None, is_elementwise(plan))


def analyse_regions(op) -> None:
    """Validate hook helper: analyse every region of `op` once, at load time."""
    op.cache["bodies"] = tuple(analyse_body(plan) for plan in op.region_plans)


def body_analysis(op, index: int) -> BodyAnalysis:
    """The analysis of region `index` of `op` (made at plan time)."""
    if "bodies" not in op.cache:
        analyse_regions(op)
    return op.cache["bodies"][index]


def binary_ufuncs(plan) -> list | None:
    """The ufuncs of a body `(a0..aN-1, b0..bN-1) -> (op_i(a_i, b_i))...`, or None.

    Each result must come straight from one add/multiply/max/min/and/or/xor
    step whose two operands are the block arguments a_i and b_i (in either
    order: these ops commute), and the body must have no other steps.
    """
    n = len(plan.result_slots)
    if len(plan.arg_slots) != 2 * n or len(plan.steps) != n:
        return None
    producers = {step.results[0]: step for step in plan.steps if len(step.results) == 1}
    ufuncs = []
    for i, slot in enumerate(plan.result_slots):
        step = producers.get(slot)
        if step is None or step.op.name not in BODY_UFUNCS:
            return None
        if sorted(step.operands) != sorted((plan.arg_slots[i], plan.arg_slots[n + i])):
            return None
        ufunc = BODY_UFUNCS[step.op.name]
        dtype = step.op.result_types[0].dtype
        if is_bool(dtype):
            ufunc = _BOOL_UFUNCS.get(ufunc, ufunc)
        elif ufunc in (np.bitwise_and, np.bitwise_or, np.bitwise_xor) and is_float(dtype):
            return None
        elif ufunc is np.multiply and dtype.kind == "c":
            # XLA rounds complex products with fused multiply-adds; the body's
            # own multiply kernel knows how, numpy's does not.
            return None
        ufuncs.append(ufunc)
    return ufuncs


def is_elementwise(plan) -> bool:
    """True if every step of the body is an element-wise op (see above)."""
    return all(step.op.name in ELEMENTWISE_OPS and not step.regions and _scalar_constant(step)
               for step in plan.steps)


def _scalar_constant(step) -> bool:
    return step.op.name != "stablehlo.constant" or np.ndim(step.op.attrs.get("value")) == 0


def run_body(region, dtypes, shape, *args) -> list[np.ndarray]:
    """Run `region` on arrays (vectorised) and return arrays of `shape`.

    The body's results are cast to `dtypes` and broadcast to `shape` (a body
    returning a constant yields a 0-d array).
    """
    results = region(*args)
    return [np.broadcast_to(np.asarray(r, dtype=d), shape) for r, d in zip(results, dtypes)]


def tree_reduce(region, dtypes, values: list[np.ndarray]) -> list[np.ndarray]:
    """Combine the last axis of each array in `values` with a vectorised body.

    `values` are N arrays of shape (..., n), n > 0; the result is N arrays of
    shape (...). Neighbours are paired, so the order of elements is kept.
    """
    while values[0].shape[-1] > 1:
        length = values[0].shape[-1]
        half = length // 2
        lhs = [v[..., 0:2 * half:2] for v in values]
        rhs = [v[..., 1:2 * half:2] for v in values]
        combined = run_body(region, dtypes, lhs[0].shape, *lhs, *rhs)
        if length % 2:
            combined = [np.concatenate([c, v[..., -1:]], axis=-1) for c, v in zip(combined, values)]
        values = combined
    return [v[..., 0] for v in values]


def scalar_reduce(region, dtypes, values: list[np.ndarray], inits) -> list[np.ndarray]:
    """Left fold of the last axis, element by element: the slow, general path.

    Starts from `inits` (N 0-d arrays) for every output element. The same
    fold runs compiled when interpreter/native can translate the body.
    """
    compiled = folder(region, dtypes)
    if compiled is not None:
        return compiled(values, inits)
    out_shape = values[0].shape[:-1]
    outputs = [np.empty(out_shape, dtype=d) for d in dtypes]
    for index in np.ndindex(*out_shape):
        acc = [np.asarray(i, dtype=d) for i, d in zip(inits, dtypes)]
        for k in range(values[0].shape[-1]):
            items = [np.asarray(v[index + (k,)]) for v in values]
            acc = [np.asarray(r, dtype=d) for r, d in zip(region(*acc, *items), dtypes)]
        for out, a in zip(outputs, acc):
            out[index] = a
    return outputs


def reduce_last_axis(region, body: BodyAnalysis, dtypes, values: list[np.ndarray],
                     inits) -> list[np.ndarray]:
    """`body(init, fold(values along the last axis))` with the fastest safe path.

    `values`: N arrays of shape (..., n); `inits`: N 0-d arrays. An empty
    axis gives the init values.
    """
    out_shape = values[0].shape[:-1]
    if values[0].shape[-1] == 0:
        return [np.full(out_shape, i, dtype=d) for i, d in zip(inits, dtypes)]
    if body.ufuncs is not None:
        return [_ufunc_reduce(u, v, i, d) for u, v, i, d in zip(body.ufuncs, values, inits, dtypes)]
    if body.elementwise:
        folded = tree_reduce(region, dtypes, values)
        inits_b = [np.broadcast_to(np.asarray(i, dtype=d), out_shape) for i, d in zip(inits, dtypes)]
        return [np.asarray(r, order="C") for r in run_body(region, dtypes, out_shape, *inits_b, *folded)]
    return scalar_reduce(region, dtypes, values, inits)


# 2- and 4-bit integers have no ufunc loops: they work in 8 bits.
_NARROW_INTEGER_WORK = {
    np.dtype(ml_dtypes.int2): np.dtype(np.int8), np.dtype(ml_dtypes.int4): np.dtype(np.int8),
    np.dtype(ml_dtypes.uint2): np.dtype(np.uint8), np.dtype(ml_dtypes.uint4): np.dtype(np.uint8),
}


def ufunc_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype numpy's ufuncs can work in for `dtype`: 2- and 4-bit
    integers have no ufunc loops, so they use 8 bits and wrap on the way back.
    (A dict of dtypes: looking up `dtype.name` is slow on a per-call path.)"""
    return _NARROW_INTEGER_WORK.get(dtype, dtype)


def _ufunc_reduce(ufunc, values: np.ndarray, init, dtype) -> np.ndarray:
    """`body(init, ufunc.reduce(values, axis=-1))`, computed in `dtype`
    (integers wrap around; narrow floats round at every step, as the body
    would)."""
    work = ufunc_dtype(dtype)
    fold, combine = ufunc_folder(ufunc, work)
    with np.errstate(all="ignore"):
        reduced = fold(values.astype(work, copy=False))
        result = combine(np.asarray(init).astype(work), reduced)
    return np.asarray(result).astype(dtype).reshape(np.shape(reduced))


def body_function(ufunc, dtype: np.dtype):
    """The function a plain body computes on two arrays of `dtype`: `ufunc`,
    except float maximum/minimum, whose kernels give the spec's signed zeros
    (numpy's functions return whichever of two equal zeros comes first)."""
    if ufunc in (np.maximum, np.minimum) and is_float(dtype):
        return maximum_values if ufunc is np.maximum else minimum_values
    return ufunc


def ufunc_folder(ufunc, dtype: np.dtype):
    """(fold, combine) for a body that is `ufunc` on `dtype`: `fold(values)`
    reduces the last axis, `combine(init, folded)` applies the body once.

    numpy's maximum/minimum return whichever of two equal zeros comes first;
    the spec's (and the body kernel's) max(-0, +0) is +0 and min(-0, +0) is
    -0 whatever the order, so on floats a zero result gets the winning
    zero if its row holds one, and `combine` uses the body's own kernel
    where a zero init could meet one."""
    body = body_function(ufunc, dtype)
    if body is ufunc:
        def fold(values):
            return ufunc.reduce(values, axis=-1, dtype=dtype)
        return fold, ufunc
    negative_wins = ufunc is np.minimum

    def fold_with_signed_zeros(values):
        folded = ufunc.reduce(values, axis=-1, dtype=dtype)
        zero = folded == 0
        if not zero.any():
            return folded
        winners = np.logical_or.reduce((values == 0) & (np.signbit(values) == negative_wins),
                                       axis=-1)
        folded = np.array(folded)
        np.copyto(folded, np.asarray(-0.0 if negative_wins else 0.0, dtype), where=zero & winners)
        return folded

    def combine_with_signed_zeros(init, folded):
        # Only a zero init can meet a zero of the other sign (the usual
        # -inf / +inf init takes numpy's function as it is).
        return body(init, folded) if init == 0 else ufunc(init, folded)
    return fold_with_signed_zeros, combine_with_signed_zeros


def fold_last_axis(region, body: BodyAnalysis, dtypes, values: list[np.ndarray],
                   inits) -> list[np.ndarray]:
    """Left fold `acc = body(acc, x_k)` from the init values, k in order.

    This is how XLA's CPU backend reduces windows, so sums round exactly as
    it does; each step is one vectorised ufunc or body run over all windows.
    """
    out_shape = values[0].shape[:-1]
    accs = [np.full(out_shape, i, dtype=d) for i, d in zip(inits, dtypes)]
    ufuncs = body.ufuncs
    if ufuncs is None and not body.elementwise:
        return scalar_reduce(region, dtypes, values, inits)
    if ufuncs is not None:  # the body itself on two arrays (signed zeros as its kernel)
        combines = [body_function(u, ufunc_dtype(d)) for u, d in zip(ufuncs, dtypes)]
    with np.errstate(all="ignore"):
        for k in range(values[0].shape[-1]):
            items = [v[..., k] for v in values]
            if ufuncs is not None:
                accs = [np.asarray(c(a.astype(ufunc_dtype(d)), x.astype(ufunc_dtype(d)))).astype(d)
                        for c, a, x, d in zip(combines, accs, items, dtypes)]
            else:
                accs = run_body(region, dtypes, out_shape, *accs, *items)
    return accs
