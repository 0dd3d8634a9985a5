"""`sort` (spec "sort", docs/spec.md#sort) with any comparator.

Three paths, chosen from the comparator's body:

* a single `compare LT/GT` of the first operand's two block arguments (an
  integer, boolean or TOTALORDER compare) is numpy's stable argsort on a
  key that orders like the compare; so is a `compare` of g(lhs) and g(rhs)
  for an element-wise g (JAX's float comparators), keyed on g(row);
* a comparator of scalar element-wise ops that numba can compile drives a
  stable merge sort in numba (interpreter/native/regions.py);
* any other comparator made of element-wise ops runs vectorised inside a
  bitonic sorting network: O(log^2 n) runs of the comparator, each on
  whole arrays of pairs;
* other comparators (calls, loops...) are called pair by pair from Python's
  (stable, merge-based) sort.

All three are stable: elements the comparator finds equivalent keep their
order, which is a valid result whether or not `is_stable` is set.
"""
from __future__ import annotations

import functools

import numpy as np

from pjrt_ref.interpreter.native.regions import sort_order, sort_orderer
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_bool, is_complex, is_float
from pjrt_ref.interpreter.ops.reduce_regions import is_elementwise, run_body


def _dimension(op, rank: int) -> int:
    dimension = op.attrs.get("dimension", -1)
    return dimension + rank if dimension < 0 else dimension


@register("stablehlo.sort")
def sort(op, *inputs, regions):
    """Spec "sort": sort all `inputs` together along `dimension`, ordered by
    `comparator(lhs_0, rhs_0, lhs_1, rhs_1, ...)`, a strict "less than"."""
    comparator = regions[0]
    plan = op.region_plans[0]
    rank = inputs[0].ndim
    axis = _dimension(op, rank)
    rows = [np.moveaxis(x, axis, -1) for x in inputs]
    order = stable_order(rows, comparator, plan, op)
    results = [np.asarray(np.moveaxis(np.take_along_axis(r, order, axis=-1), -1, axis), order="C")
               for r in rows]
    return results[0] if len(results) == 1 else tuple(results)


def stable_order(rows: list, comparator, plan, op=None) -> np.ndarray:
    """The permutation that sorts `rows` (sorted along their last axis)
    stably by `comparator` (bound to its `plan`); the numba path needs the
    sort `op` whose region the comparator is."""
    if rows[0].shape[-1] <= 1 or rows[0].size == 0:
        return np.broadcast_to(np.arange(rows[0].shape[-1]), rows[0].shape)
    key = _simple_sort_key(plan, rows)
    if key is None:
        key = _derived_sort_key(comparator, plan, rows)
    if key is not None:
        return np.argsort(key, axis=-1, kind="stable")
    orderer = None if op is None else sort_orderer(op)
    if orderer is not None:
        return sort_order(orderer, rows)  # numba merge sort (interpreter/native)
    if is_elementwise(plan):
        return _bitonic_order(comparator, rows)
    return _python_order(comparator, rows)


# ---------------------------------------------------------------------------
# Fast path: the comparator is one compare of the first operand.

def _simple_sort_key(plan, rows):
    """A key for np.argsort if the comparator is `compare LT/GT, a0, b0`."""
    if len(plan.steps) != 1 or len(plan.result_slots) != 1:
        return None
    step = plan.steps[0]
    if step.op.name != "stablehlo.compare" or step.results[0] != plan.result_slots[0]:
        return None
    direction = step.op.attrs.get("comparison_direction")
    compare_type = step.op.attrs.get("compare_type")
    lhs, rhs = plan.arg_slots[0], plan.arg_slots[1]
    if direction not in ("LT", "GT"):
        return None
    if tuple(step.operands) == (rhs, lhs):
        direction = "GT" if direction == "LT" else "LT"
    elif tuple(step.operands) != (lhs, rhs):
        return None
    values = rows[0]
    if is_complex(values.dtype) or (is_float(values.dtype) and compare_type != "TOTALORDER"):
        return None
    return _argsort_key(values, direction, compare_type)


def _argsort_key(values, direction, compare_type):
    """A key whose ascending order is `compare direction` on `values`."""
    key = total_order_key(values) if is_float(values.dtype) else values
    if is_bool(key.dtype):
        key = key.astype(np.uint8)
    if compare_type == "UNSIGNED" and key.dtype.kind == "i":
        key = key.view(key.dtype.str.replace("i", "u"))
    if compare_type == "SIGNED" and key.dtype.kind == "u":
        key = key.view(key.dtype.str.replace("u", "i"))
    # `~` reverses the order of any integer type without overflow.
    return ~key if direction == "GT" else key


def _derived_sort_key(comparator, plan, rows):
    """A key for np.argsort if the comparator is `compare LT/GT, g(lhs), g(rhs)`
    for one element-wise function g of the lhs (resp. rhs) block arguments,
    e.g. JAX's float sorts, which map -0 to +0 and every NaN to one NaN
    before a TOTALORDER compare.

    The body runs once, vectorised, with lhs = rhs = the rows; if both compare
    operands then hold the same bits, g(lhs) and g(rhs) agree on every
    element and the comparator orders elements as `compare` orders g(row).
    """
    if len(plan.result_slots) != 1 or not is_elementwise(plan):
        return None
    producers = {step.results[0]: step for step in plan.steps if len(step.results) == 1}
    compare = producers.get(plan.result_slots[0])
    if compare is None or compare.op.name != "stablehlo.compare":
        return None
    direction = compare.op.attrs.get("comparison_direction")
    compare_type = compare.op.attrs.get("compare_type")
    if direction not in ("LT", "GT"):
        return None
    lhs_args, rhs_args = set(plan.arg_slots[0::2]), set(plan.arg_slots[1::2])
    x, y = compare.operands
    if not (_reads_only(x, producers, lhs_args, rhs_args)
            and _reads_only(y, producers, rhs_args, lhs_args)):
        return None
    comparator(*_interleave(rows, rows))
    x_values, y_values = (np.asarray(comparator.frame[slot]) for slot in (x, y))
    if x_values.shape != rows[0].shape or y_values.shape != rows[0].shape:
        return None
    if x_values.dtype != y_values.dtype or x_values.tobytes() != y_values.tobytes():
        return None
    if is_complex(x_values.dtype):
        return None
    if is_float(x_values.dtype) and compare_type != "TOTALORDER":
        # IEEE "<" is a strict weak order only without NaN; -0 and +0 tie.
        if np.isnan(x_values).any():
            return None
        x_values = np.where(x_values == 0, np.zeros_like(x_values), x_values)
    return _argsort_key(x_values, direction, compare_type)


def _reads_only(slot, producers, allowed, forbidden) -> bool:
    """True if `slot` depends on no block argument in `forbidden`."""
    if slot in forbidden:
        return False
    step = producers.get(slot)
    if step is None:
        return True  # a block argument in `allowed`, or a value from outside
    return all(_reads_only(s, producers, allowed, forbidden) for s in step.operands)


def total_order_key(values: np.ndarray) -> np.ndarray:
    """Signed integers ordered like the floats' IEEE totalOrder
    (-NaN < -inf < ... < -0 < +0 < ... < inf < NaN).

    Floats of fewer than 8 bits (f4, f6) keep their sign below the top bit
    of their byte; they are ordered through f32, which holds them exactly."""
    if values.dtype.itemsize == 1 and values.dtype.name.startswith(("float4", "float6")):
        values = values.astype(np.float32)
    width = values.dtype.itemsize
    bits = np.ascontiguousarray(values).view(np.dtype(f"i{width}"))
    magnitude = np.array(np.iinfo(bits.dtype).max, dtype=bits.dtype)
    return np.where(bits < 0, bits ^ magnitude, bits)


# ---------------------------------------------------------------------------
# Vectorised path: a bitonic network over padded power-of-two rows.

def _bitonic_order(comparator, rows) -> np.ndarray:
    """The stable sorting permutation of each row (along the last axis)."""
    n = rows[0].shape[-1]
    size = 1 << (n - 1).bit_length()
    batch = rows[0].shape[:-1]
    # order[..., i] is the original index now at position i; indices >= n
    # are padding, which sorts after everything.
    order = np.broadcast_to(np.arange(size), batch + (size,)).copy()
    span = 2
    while span <= size:
        step = span // 2
        while step >= 1:
            _compare_exchange(comparator, rows, order, span, step, n)
            step //= 2
        span *= 2
    return order[..., :n]


def _compare_exchange(comparator, rows, order, span, step, n) -> None:
    positions = np.arange(order.shape[-1])
    low = positions[(positions & step) == 0]
    high = low + step
    ascending = (low & span) == 0
    a, b = order[..., low], order[..., high]
    b_first = _precedes(comparator, rows, b, a, n)
    swap = np.where(ascending, b_first, ~b_first)
    order[..., low] = np.where(swap, b, a)
    order[..., high] = np.where(swap, a, b)


def _precedes(comparator, rows, p, q, n) -> np.ndarray:
    """True where original element p sorts strictly before element q
    (comparator order, ties broken by original index, padding last)."""
    p_real, q_real = p < n, q < n
    p_values = [np.take_along_axis(r, np.minimum(p, n - 1), axis=-1) for r in rows]
    q_values = [np.take_along_axis(r, np.minimum(q, n - 1), axis=-1) for r in rows]
    bool_type = [np.dtype(bool)]
    less, = run_body(comparator, bool_type, p.shape, *_interleave(p_values, q_values))
    greater, = run_body(comparator, bool_type, p.shape, *_interleave(q_values, p_values))
    before = less | (~greater & (p < q))
    return p_real & (~q_real | before)


def _interleave(lhs, rhs) -> list:
    return [x for pair in zip(lhs, rhs) for x in pair]


# ---------------------------------------------------------------------------
# General path: Python's sort calling the comparator per pair.

def _python_order(comparator, rows) -> np.ndarray:
    n = rows[0].shape[-1]
    batch = rows[0].shape[:-1]
    order = np.empty(batch + (n,), dtype=np.int64)
    for index in np.ndindex(*batch):
        row = [r[index] for r in rows]

        def compare(i, j, row=row):
            args = _interleave([np.asarray(r[i]) for r in row], [np.asarray(r[j]) for r in row])
            if bool(comparator(*args)[0]):
                return -1
            swapped = _interleave([np.asarray(r[j]) for r in row], [np.asarray(r[i]) for r in row])
            return 1 if bool(comparator(*swapped)[0]) else 0

        order[index] = sorted(range(n), key=functools.cmp_to_key(compare))
    return order
