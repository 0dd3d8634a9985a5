"""The ops that move, gather or combine elements: what the fuzzer writes of them,
and the spec's result of each, computed from its index formula.

Each op is a `Structural` with three jobs: `make` chooses the op's
attributes for an operand (or returns None where the operand does not
suit it), `line` writes the op in MLIR's generic form, and `evaluate`
computes the result element by element from the spec's definition
(`result[i] = operand[...]`), on numpy arrays but without numpy's own
transpose, slicing or sorting, so the answer owes nothing to the kernels
pjrt-ref runs. Reductions fold the body's op with the elementwise oracle;
a float sum or product's order is the implementation's choice (spec:
reduce, "the order is implementation-defined"), so only integer folds and
order-free ones (max, min, and, or, xor) give a decisive answer.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import ml_dtypes
import numpy as np

from pjrt_ref.interpreter.types import is_float
from pjrt_ref.judge.opset import comparison_type, element_class
from pjrt_ref.judge.oracle import float_result, wrap
from pjrt_ref.judge.values import dtype_of, has_infinity


def tensor_type(shape, element_type: str) -> str:
    """`tensor<2x3xf32>`: the MLIR type of a value of `shape` and `element_type`."""
    return "tensor<" + "".join(f"{d}x" for d in shape) + element_type + ">"


def _i64s(values) -> str:
    return "array<i64" + (": " + ", ".join(str(int(v)) for v in values) if len(values) else "") + ">"


def _indices(shape):
    return itertools.product(*[range(d) for d in shape])


@dataclass(frozen=True)
class Structural:
    name: str
    make: Callable            # (rng, shape, element_type) -> (attrs dict, result shape) or None
    # (attrs, result name, operand names, operand types, element type, result type) -> the op's lines
    text: Callable
    # (attrs with "result_shape", operand arrays, element type, the elementwise oracle's
    # apply(op, a, b, element_type)) -> (result array or None, why the spec is silent or None)
    evaluate: Callable
    classes: tuple = ("bool", "signed", "unsigned", "float", "complex")
    # (attrs, operand shape) -> the parameters it takes besides the operand: (element type,
    # or None for the operand's, shape) each, drawn like any input (pad's value, start indices).
    extra: Callable = lambda attrs, shape: []
    results: int = 1          # while: the loop's counter is a second result

    @property
    def mlir_name(self) -> str:
        return f"stablehlo.{self.name}"


# ------------------------------------------------------------ data movement
def _make_transpose(rng, shape, element_type):
    permutation = [int(d) for d in rng.permutation(len(shape))]
    return {"permutation": permutation}, tuple(shape[d] for d in permutation)


def _transpose(attrs, operands, element_type, apply):
    (x,) = operands
    permutation = attrs["permutation"]
    result = np.empty(tuple(x.shape[d] for d in permutation), x.dtype)
    for index in _indices(result.shape):        # result[i] = operand[j], j[permutation[k]] = i[k]
        source = [0] * x.ndim
        for k, d in enumerate(permutation):
            source[d] = index[k]
        result[index] = x[tuple(source)]
    return result, None


def _make_reverse(rng, shape, element_type):
    dimensions = [d for d in range(len(shape)) if rng.random() < 0.5]
    return {"dimensions": dimensions}, tuple(shape)


def _reverse(attrs, operands, element_type, apply):
    (x,) = operands
    result = np.empty_like(x)
    for index in _indices(x.shape):
        source = tuple(x.shape[d] - 1 - i if d in attrs["dimensions"] else i for d, i in enumerate(index))
        result[index] = x[source]
    return result, None


def _make_slice(rng, shape, element_type):
    starts, limits, strides = [], [], []
    for d in shape:
        start = int(rng.integers(0, d + 1))
        limit = int(rng.integers(start, d + 1))
        starts.append(start), limits.append(limit), strides.append(int(rng.integers(1, 3)))
    result = tuple(-(-(limit - start) // stride) for start, limit, stride in zip(starts, limits, strides))
    return {"start_indices": starts, "limit_indices": limits, "strides": strides}, result


def _slice(attrs, operands, element_type, apply):
    (x,) = operands
    starts, limits, strides = attrs["start_indices"], attrs["limit_indices"], attrs["strides"]
    shape = tuple(-(-(lim - s) // st) for s, lim, st in zip(starts, limits, strides))
    result = np.empty(shape, x.dtype)
    for index in _indices(shape):
        result[index] = x[tuple(s + i * st for s, i, st in zip(starts, index, strides))]
    return result, None


def _make_reshape(rng, shape, element_type):
    size = int(np.prod(shape, dtype=np.int64))
    choices = [(size,), (1, size), (size, 1)] + ([(2, size // 2)] if size % 2 == 0 and size else []) + \
              ([()] if size == 1 else [])
    return {}, tuple(choices[int(rng.integers(len(choices)))])


def _reshape(attrs, operands, element_type, apply):
    (x,) = operands
    flat = [x[index] for index in _indices(x.shape)]          # row-major order, as the spec reads it
    result = np.empty(attrs["result_shape"], x.dtype)
    for value, index in zip(flat, _indices(result.shape)):
        result[index] = value
    return result, None


def _make_broadcast(rng, shape, element_type):
    extra = int(rng.integers(0, 2))
    result = tuple([2] * extra) + tuple(d if d != 1 or rng.random() < 0.5 else 3 for d in shape)
    return {"broadcast_dimensions": list(range(extra, extra + len(shape)))}, result


def _broadcast(attrs, operands, element_type, apply):
    (x,) = operands
    dims = attrs["broadcast_dimensions"]
    result = np.empty(tuple(attrs["result_shape"]), x.dtype)
    for index in _indices(result.shape):          # operand[j], j[k] = 0 where dim k has size 1
        result[index] = x[tuple(0 if x.shape[k] == 1 else index[d] for k, d in enumerate(dims))]
    return result, None


def _make_pad(rng, shape, element_type):
    low = [int(rng.integers(-1, 3)) for _ in shape]
    high = [int(rng.integers(-1, 3)) for _ in shape]
    interior = [int(rng.integers(0, 2)) for _ in shape]
    result = []
    for d, lo, hi, inner in zip(shape, low, high, interior):
        size = lo + hi + d + max(d - 1, 0) * inner
        if size < 0:
            return None
        result.append(size)
    return {"edge_padding_low": low, "edge_padding_high": high, "interior_padding": interior}, tuple(result)


def _pad(attrs, operands, element_type, apply):
    x, padding = operands
    low, interior = attrs["edge_padding_low"], attrs["interior_padding"]
    shape = tuple(attrs["result_shape"])
    result = np.full(tuple(shape), padding.reshape(()), x.dtype)
    for index in _indices(x.shape):               # operand[i] lands at low + i * (interior + 1)
        target = tuple(lo + i * (inner + 1) for lo, i, inner in zip(low, index, interior))
        if all(0 <= t < s for t, s in zip(target, shape)):
            result[target] = x[index]
    return result, None


# ------------------------------------------------------------ reductions and sort
_REDUCERS = {"bool": ("and", "or", "xor", "maximum"), "signed": ("add", "multiply", "maximum", "minimum"),
             "unsigned": ("add", "maximum", "minimum", "xor"), "float": ("add", "maximum", "minimum")}
_INITS = {"add": 0, "multiply": 1, "and": 1, "or": 0, "xor": 0}


def _random_body(rng, element_type: str) -> str | None:
    """A fold's or a map's body op for `element_type`, or None where its class has none."""
    bodies = _REDUCERS.get(element_class(element_type))
    return None if bodies is None else bodies[int(rng.integers(len(bodies)))]


def _make_reduce(rng, shape, element_type):
    body = _random_body(rng, element_type)
    if body is None or not shape:
        return None
    dimensions = sorted(d for d in range(len(shape)) if rng.random() < 0.6) or [0]
    result = tuple(d for k, d in enumerate(shape) if k not in dimensions)
    return {"body": body, "dimensions": dimensions}, result


def evaluate_fold(body: str, values: list, element_type: str, apply):
    """`values` folded left to right with the body's op, by the elementwise oracle
    (`apply(op, a, b, element_type)`; None where the spec leaves a step open)."""
    accumulator = values[0]
    for value in values[1:]:
        accumulator = apply(body, accumulator, value, element_type)
        if accumulator is None:
            return None
    return accumulator


_INITIAL_OF_MAX = {"maximum": "lowest", "minimum": "highest"}


def init_value(body: str, element_type: str, dtype: np.dtype):
    """The reduction's init: the body's identity (max: the type's lowest value). The spec
    folds the init in an implementation-defined number of times, so anything else is
    the implementation's choice."""
    if body in _INITIAL_OF_MAX:
        if element_class(element_type) == "float":     # +-inf, or the largest finite value without one
            info = ml_dtypes.finfo(dtype)
            largest = np.inf if has_infinity(dtype) else float(info.max)
            return np.array(-largest if body == "maximum" else largest).astype(dtype)
        if element_class(element_type) == "bool":
            return np.array(body == "minimum")
        info = ml_dtypes.iinfo(dtype)
        return np.array(info.min if body == "maximum" else info.max).astype(dtype)
    return np.array(_INITS[body]).astype(dtype)


def _reduce(attrs, operands, element_type, apply):
    (x,) = operands
    body, dimensions = attrs["body"], attrs["dimensions"]
    kept = [d for d in range(x.ndim) if d not in dimensions]
    init = init_value(body, element_type, x.dtype)

    def values_at(index):
        values = [init]
        for reduced in _indices(tuple(x.shape[d] for d in dimensions)):
            full = [0] * x.ndim
            for k, d in enumerate(kept):
                full[d] = index[k]
            for k, d in enumerate(dimensions):
                full[d] = reduced[k]
            values.append(x[tuple(full)])
        return values
    return fold_each(tuple(x.shape[d] for d in kept), x.dtype, body, element_type, apply, values_at)


def fold_each(shape, dtype, body: str, element_type: str, apply, values_at):
    """result[index] = `values_at(index)` folded with the body's op (the init first) by the
    elementwise oracle. A float sum's or product's order is the implementation's (spec:
    reduce, "the order is implementation-defined"), so only the other folds decide."""
    result = np.empty(shape, dtype)
    for index in _indices(shape):
        folded = evaluate_fold(body, values_at(index), element_type, apply)
        if folded is None:
            return None, f"{body}: a step the spec leaves to the implementation"
        result[index] = folded
    order_free = body not in ("add", "multiply") or element_class(element_type) != "float"
    return result, None if order_free else "a float reduction's order is implementation-defined"


def _make_sort(rng, shape, element_type):
    if not shape or element_class(element_type) == "complex":
        return None
    direction = "LT" if rng.random() < 0.5 else "GT"
    total = element_class(element_type) == "float" and rng.random() < 0.5
    return {"dimension": int(rng.integers(len(shape))), "direction": direction,
            "compare_type": "TOTALORDER" if total else comparison_type(element_type)}, tuple(shape)


def _total_order_key(value) -> tuple:
    """IEEE 754 totalOrder: -NaN < -inf < ... < -0 < +0 < ... < inf < NaN."""
    v = float(np.asarray(value).astype(np.float64))
    negative = bool(np.signbit(v))
    if np.isnan(v):
        return (-2,) if negative else (2,)
    return (0, v, 0 if negative else 1)        # -0 before +0


def _sort(attrs, operands, element_type, apply):
    (x,) = operands
    dimension, direction = attrs["dimension"], attrs["direction"]
    floats = element_class(element_type) == "float"
    if floats and attrs["compare_type"] == "FLOAT" and np.isnan(x.astype(np.float64)).any():
        return None, "a FLOAT comparator with NaN is no strict weak order: the order is implementation-defined"
    if floats:
        key = _total_order_key
    else:
        key = int if element_class(element_type) != "bool" else bool
    result = np.empty_like(x)
    other = [d for d in range(x.ndim) if d != dimension]
    for outer in _indices(tuple(x.shape[d] for d in other)):
        positions = []
        for i in range(x.shape[dimension]):
            full = [0] * x.ndim
            for k, d in enumerate(other):
                full[d] = outer[k]
            full[dimension] = i
            positions.append(tuple(full))
        line = sorted((x[p] for p in positions), key=key, reverse=direction == "GT")   # stable
        for p, value in zip(positions, line):
            result[p] = value
    return result, None


# ------------------------------------------------------------ indices and control flow
def _make_dynamic_slice(rng, shape, element_type):
    if not shape:
        return None
    sizes = [int(rng.integers(0, d + 1)) for d in shape]
    return {"slice_sizes": sizes}, tuple(sizes)


def _dynamic_slice(attrs, operands, element_type, apply):
    x, *starts = operands
    sizes = attrs["slice_sizes"]
    # spec: dynamic_slice (C?): each start is clamped to [0, dim - size].
    clamped = [min(max(int(s), 0), d - size) for s, d, size in zip(starts, x.shape, sizes)]
    result = np.empty(tuple(sizes), x.dtype)
    for index in _indices(tuple(sizes)):
        result[index] = x[tuple(c + i for c, i in zip(clamped, index))]
    return result, None


def _make_dynamic_update_slice(rng, shape, element_type):
    if not shape:
        return None
    return {"update_shape": [int(rng.integers(0, d + 1)) for d in shape]}, tuple(shape)


def _dynamic_update_slice(attrs, operands, element_type, apply):
    x, update, *starts = operands
    # spec: dynamic_update_slice (C?): each start is clamped to [0, dim - update's size].
    clamped = [min(max(int(s), 0), d - size) for s, d, size in zip(starts, x.shape, update.shape)]
    result = x.copy()
    for index in _indices(update.shape):
        result[tuple(c + i for c, i in zip(clamped, index))] = update[index]
    return result, None


def _make_gather(rng, shape, element_type):
    """x[indices] along one axis (jnp.take's form): each of `count` indices picks a slice of
    `slice_sizes` whose `axis` dimension is collapsed, the other dimensions kept as offsets."""
    axes = [d for d in range(len(shape)) if shape[d] > 0]
    if not axes:
        return None
    axis, count = axes[int(rng.integers(len(axes)))], int(rng.integers(0, 4))
    sizes = [1 if d == axis else int(rng.integers(0, shape[d] + 1)) for d in range(len(shape))]
    return ({"axis": axis, "count": count, "slice_sizes": sizes},
            (count,) + tuple(size for d, size in enumerate(sizes) if d != axis))


def _gather(attrs, operands, element_type, apply):
    """result[b, offsets] = x[start + offsets], start[axis] = indices[b] clamped to
    [0, dim - 1] (spec: gather, full_start_index is clamped), the collapsed axis dropped."""
    x, indices = operands
    axis = attrs["axis"]
    result = np.empty(tuple(attrs["result_shape"]), x.dtype)
    for index in _indices(result.shape):
        start = min(max(int(indices[index[0], 0]), 0), x.shape[axis] - 1)
        offsets = list(index[1:])
        offsets.insert(axis, 0)
        result[index] = x[tuple(offsets[d] + (start if d == axis else 0) for d in range(x.ndim))]
    return result, None


_SCATTER_COMBINERS = {kind: ("replace",) + ops for kind, ops in _REDUCERS.items()}


def _make_scatter(rng, shape, element_type):
    """x[indices] op= updates along one axis (jnp's .at[].add form): each of `count`
    indices names a row of `axis`; its update is a whole window of the other dimensions."""
    kind = element_class(element_type)
    if not shape or kind not in _SCATTER_COMBINERS:
        return None
    combiners = _SCATTER_COMBINERS[kind]
    attrs = {"axis": int(rng.integers(len(shape))), "count": int(rng.integers(0, 4)),
             "combiner": combiners[int(rng.integers(len(combiners)))]}
    return attrs, tuple(shape)


def _scatter_update_shape(attrs, shape) -> tuple:
    return (attrs["count"],) + tuple(d for k, d in enumerate(shape) if k != attrs["axis"])


# A combiner whose result does not depend on the order of the updates to one element.
_ORDER_FREE = {"maximum", "minimum", "and", "or", "xor"}


def _scatter(attrs, operands, element_type, apply):
    """Each update element combined into the element it names; an index out of bounds drops
    that update (spec: scatter, "Otherwise, updated_results = results"). The order of the
    updates is an implementation-defined schedule: where two reach one element, only an
    order-free combiner (integer add and multiply wrap, max, min, bitwise) gives one answer."""
    x, indices, updates = operands
    axis, combiner = attrs["axis"], attrs["combiner"]
    result, touched = x.copy(), {}
    for index in _indices(updates.shape):
        row = int(indices[index[0], 0])
        if not 0 <= row < x.shape[axis]:
            continue
        target = list(index[1:])
        target.insert(axis, row)
        target = tuple(target)
        touched[target] = touched.get(target, 0) + 1
        value = updates[index] if combiner == "replace" else apply(combiner, result[target], updates[index],
                                                                   element_type)
        if value is None:
            return None, f"{combiner}: a step the spec leaves to the implementation"
        result[target] = value
    order_free = combiner in _ORDER_FREE or (combiner != "replace" and element_class(element_type) != "float")
    if not order_free and any(count > 1 for count in touched.values()):
        return None, "two updates reach one element and the order of scatter's updates is implementation-defined"
    return result, None


# ------------------------------------------------------------ windows
def _window_output_size(size: int, low: int, high: int, base_dilation: int, window: int,
                        window_dilation: int, stride: int) -> int:
    """How many windows fit along one dimension (spec: reduce_window (C16), convolution (C25))."""
    padded = (size - 1) * base_dilation + 1 + low + high if size else low + high
    dilated = (window - 1) * window_dilation + 1
    return (padded - dilated) // stride + 1 if padded >= dilated else 0


def _make_window(rng, shape, dilated: bool = True):
    """Window attributes for each of `shape`'s dimensions, and the number of windows along each
    (without `dilated`, base and window dilations are 1: select_and_scatter has none)."""
    attrs = {"window": [], "strides": [], "base_dilations": [], "window_dilations": [], "padding": []}
    result = []
    for size in shape:
        window, stride = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        base, dilation = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) if dilated else (1, 1)
        low, high = int(rng.integers(0, 2)), int(rng.integers(0, 2))
        result.append(_window_output_size(size, low, high, base, window, dilation, stride))
        for key, value in zip(attrs, (window, stride, base, dilation, [low, high])):
            attrs[key].append(value)
    return attrs, tuple(result)


def _source_index(index, attrs, dims, shape) -> tuple | None:
    """The index in an operand of `shape` of position `index` of its padded and
    base-dilated form along `dims`, or None for a position in the padding or a hole."""
    source = list(index)
    for k, d in enumerate(dims):
        at = index[d] - attrs["padding"][k][0]
        base = attrs["base_dilations"][k]
        if at < 0 or at % base or at // base >= shape[d]:
            return None
        source[d] = at // base
    return tuple(source)


def _padded_value(x, index, attrs, dims, fill):
    """Element `index` of `x` padded and base-dilated along `dims` (spec: the padded
    input; holes and edges hold `fill`), or `fill`."""
    source = _source_index(index, attrs, dims, x.shape)
    return fill if source is None else x[source]


def _window_positions(result_index, attrs, dims):
    """The padded input's positions along `dims` that the window at `result_index` covers."""
    ranges = [range(attrs["window"][k]) for k in range(len(dims))]
    for offset in itertools.product(*ranges):
        yield [result_index[d] * attrs["strides"][k] + offset[k] * attrs["window_dilations"][k]
               for k, d in enumerate(dims)]


def _make_reduce_window(rng, shape, element_type):
    if element_class(element_type) not in _REDUCERS or not shape:
        return None
    attrs, result = _make_window(rng, shape)
    return dict(attrs, body=_random_body(rng, element_type)), result


def _reduce_window(attrs, operands, element_type, apply):
    """results[i] = reduce of the window at i * strides of the padded input, which holds
    the init value at its edges and in the base dilation's holes (spec: reduce_window)."""
    (x,) = operands
    body, dims = attrs["body"], list(range(x.ndim))
    init = init_value(body, element_type, x.dtype)
    return fold_each(tuple(attrs["result_shape"]), x.dtype, body, element_type, apply,
                     lambda index: [init] + [_padded_value(x, position, attrs, dims, init)
                                             for position in _window_positions(index, attrs, dims)])


def _make_select_and_scatter(rng, shape, element_type):
    """select keeps the greater (compare GE) or the lesser (LE) element; scatter folds with a
    reduction's body. The source holds one value per window."""
    body = _random_body(rng, element_type)
    if body is None or not shape or element_class(element_type) == "bool":
        return None
    attrs, windows = _make_window(rng, shape, dilated=False)
    direction = "GE" if rng.random() < 0.5 else "LE"
    return dict(attrs, body=body, direction=direction, windows=list(windows)), tuple(shape)


def _select_and_scatter(attrs, operands, element_type, apply):
    """Each window of the padded operand keeps one element by `select`, and the window's
    source value goes there; result[i] folds the values that reach element i with
    `scatter`, from the init value (spec: select_and_scatter). The spec picks with
    `reduce_window` over the window's operand elements only (padding is never picked), whose
    order is implementation-defined: a window whose pick depends on that order (a tie, a
    NaN), or of padding alone ("unspecified", #731), leaves the answer open."""
    x, source = operands
    dims, keep_greater = list(range(x.ndim)), attrs["direction"] == "GE"
    reached: dict[tuple, list] = {}
    for index in _indices(tuple(attrs["windows"])):
        inside = [p for p in (_source_index(position, attrs, dims, x.shape)
                              for position in _window_positions(index, attrs, dims)) if p is not None]
        if not inside:
            return None, "a window of padding alone: select_and_scatter's pick is unspecified there"
        kept = _only_pick([x[p] for p in inside], is_float(x.dtype), keep_greater)
        if kept is None:
            return None, "a tie or a NaN in a window: which element select keeps depends on the order"
        reached.setdefault(inside[kept], []).append(source[index])
    init = init_value(attrs["body"], element_type, x.dtype)
    result = np.empty(x.shape, x.dtype)
    for index in _indices(x.shape):
        folded = evaluate_fold(attrs["body"], [init] + reached.get(index, []), element_type, apply)
        if folded is None:
            return None, f"{attrs['body']}: a step the spec leaves to the implementation"
        result[index] = folded
    order_free = attrs["body"] in _ORDER_FREE or element_class(element_type) != "float"
    if not order_free and any(len(values) > 1 for values in reached.values()):
        return None, "two source values reach one element and a float fold's order is implementation-defined"
    return result, None


def _only_pick(values, floats: bool, keep_greater: bool) -> int | None:
    """The position of the one element that select (GE or LE) keeps whatever the order,
    or None when that depends on the order (several equal extremes, -0 and +0 among
    them, or a NaN, which compares false both ways)."""
    numbers = [float(np.float64(v)) if floats else int(v) for v in values]   # exact either way
    if floats and any(math.isnan(v) for v in numbers):
        return None
    extreme = max(numbers) if keep_greater else min(numbers)
    positions = [k for k, v in enumerate(numbers) if v == extreme]
    return positions[0] if len(positions) == 1 else None


def _make_convolution(rng, shape, element_type):
    """lhs [batch, spatial..., feature] by kernel [spatial..., in, out], the kernel's spatial
    sizes being the window's (lhs_dilation is the window's base dilation, rhs_dilation its
    window dilation): no feature or batch groups, no window reversal; one or two spatial
    dimensions, or none (a matrix product)."""
    if not 2 <= len(shape) <= 4 or shape[-1] == 0:
        return None
    attrs, sizes = _make_window(rng, shape[1:-1])     # the kernel's spatial sizes are the window
    attrs["outputs"] = int(rng.integers(1, 4))
    return attrs, (shape[0],) + sizes + (attrs["outputs"],)


def _convolution_kernel_shape(attrs, shape) -> tuple:
    return tuple(attrs["window"]) + (shape[-1], attrs["outputs"])


def _convolution(attrs, operands, element_type, apply):
    """result[b, s..., o] = sum over the window k... and input feature i of
    padded_lhs[b, s * stride + k * rhs_dilation, i] * kernel[k..., i, o], padding and the
    lhs dilation's holes being zero (spec: convolution, through dot_general):
    integers exactly, wrapped; floats exactly, rounded once."""
    lhs, kernel = operands
    dims = list(range(1, lhs.ndim - 1))
    floats = element_class(element_type) == "float"
    zero = np.zeros((), lhs.dtype)
    result = np.empty(tuple(attrs["result_shape"]), lhs.dtype)
    for index in _indices(result.shape):
        products = []
        for offset, position in zip(_indices(tuple(attrs["window"])), _window_positions(index, attrs, dims)):
            for feature in range(lhs.shape[-1]):
                at = [index[0]] + position + [feature]
                products.append((_padded_value(lhs, at, attrs, dims, zero),
                                 kernel[tuple(offset) + (feature, index[-1])]))
        value = sum_of_products(products, element_type)
        if value is None:
            return None, OVERFLOW_OPEN
        result[index] = value
    return result, "a float convolution's summation order is implementation-defined" if floats else None


# ------------------------------------------------------------ reduce_precision
# The IEEE 754 formats reduce_precision is drawn for: (exponent bits, mantissa bits).
_IEEE_FORMATS = {"f16": (5, 10), "bf16": (8, 7), "f32": (8, 23), "f64": (11, 52)}


def _make_reduce_precision(rng, shape, element_type):
    if element_type not in _IEEE_FORMATS:
        return None
    exponent, mantissa = _IEEE_FORMATS[element_type]
    return {"exponent_bits": int(rng.integers(1, exponent + 2)),
            "mantissa_bits": int(rng.integers(0, mantissa + 2))}, tuple(shape)


def reduce_precision_bits(bits: int, element_type: str, exponent_bits: int, mantissa_bits: int) -> int:
    """One element's bits after reduce_precision, as the spec's formal text says: the
    stored mantissa rounded to `mantissa_bits` (ties to even; a carry goes into the
    exponent), then an exponent outside the range of `exponent_bits` overflows to
    infinity or underflows to zero, keeping the sign. Infinities stay; so does a NaN
    (the op is a conversion to a narrower format and back), where the format has one."""
    exponent, mantissa = _IEEE_FORMATS[element_type]
    sign = bits & (1 << (exponent + mantissa))
    field = (bits >> mantissa) & ((1 << exponent) - 1)
    if field == (1 << exponent) - 1:
        return bits
    if mantissa_bits < mantissa:
        cut = mantissa - mantissa_bits
        kept_lowest = (bits >> cut) & 1
        bits = (bits + (1 << (cut - 1)) - 1 + kept_lowest) & ~((1 << cut) - 1)
        field = (bits >> mantissa) & ((1 << exponent) - 1)
    if exponent_bits < exponent and field != (1 << exponent) - 1:
        bias, reduced_bias = (1 << (exponent - 1)) - 1, (1 << (exponent_bits - 1)) - 1
        if field - bias > reduced_bias:
            return sign | (((1 << exponent) - 1) << mantissa)
        if field - bias <= -reduced_bias:
            return sign
    return bits


def _reduce_precision(attrs, operands, element_type, apply):
    (x,) = operands
    unsigned = f"u{x.dtype.itemsize}"
    bits = [reduce_precision_bits(int(b), element_type, attrs["exponent_bits"], attrs["mantissa_bits"])
            for b in x.reshape(-1).view(unsigned)]
    silent = None
    if attrs["mantissa_bits"] == 0 and np.isnan(x.astype(np.float64)).any():
        silent = "a format with no mantissa bits has no NaN: the spec does not say what a NaN becomes"
    return np.array(bits, unsigned).view(x.dtype).reshape(x.shape), silent


# ------------------------------------------------------------ batch_norm_inference
_EPSILONS = (0.0, 1e-5, 1e-3, 1.0)


def _make_batch_norm_inference(rng, shape, element_type):
    """Normalise along one feature dimension with given per-feature scale, offset, mean and variance."""
    if not shape:
        return None
    return {"feature_index": int(rng.integers(len(shape))),
            "epsilon": float(np.float32(_EPSILONS[int(rng.integers(len(_EPSILONS)))]))}, tuple(shape)


def _batch_norm_parameters(attrs, shape):
    return [(None, (shape[attrs["feature_index"]],))] * 4     # scale, offset, mean, variance


def _batch_norm_inference(attrs, operands, element_type, apply):
    """The spec's decomposition, element by element: scale * ((x - mean) / sqrt(variance +
    epsilon)) + offset, each op by the elementwise oracle, epsilon rounded to the element type
    (spec: batch_norm_inference). The spec leaves its numeric precision to the
    implementation: the answer is the reference the two sides are measured against."""
    x, scale, offset, mean, variance = operands
    feature = attrs["feature_index"]
    epsilon = np.float32(attrs["epsilon"]).astype(x.dtype)
    result = np.empty(x.shape, x.dtype)
    for index in _indices(x.shape):
        k = index[feature]
        stddev = apply("sqrt", apply("add", variance[k], epsilon, element_type), None, element_type)
        centered = apply("subtract", x[index], mean[k], element_type)
        if stddev is None or centered is None:
            return None, "a step the spec leaves to the implementation"
        normalized = apply("divide", centered, stddev, element_type)
        scaled = None if normalized is None else apply("multiply", scale[k], normalized, element_type)
        value = None if scaled is None else apply("add", scaled, offset[k], element_type)
        if value is None:
            return None, "a step the spec leaves to the implementation"
        result[index] = value
    return result, "numeric precision is implementation-defined"


# ------------------------------------------------------------ iota and map
def _make_iota(rng, shape, element_type):
    """An iota of the operand's shape (the operand only lends its shape: iota takes none)."""
    if not shape or element_class(element_type) not in ("signed", "unsigned", "float"):
        return None
    return {"iota_dimension": int(rng.integers(len(shape)))}, tuple(shape)


def _iota(attrs, operands, element_type, apply):
    """result[i] = i[iota_dimension], converted to the element type (spec: iota)."""
    result = np.empty(tuple(attrs["result_shape"]), dtype_of(element_type))
    for index in _indices(result.shape):
        value = index[attrs["iota_dimension"]]
        result[index] = wrap(value, element_type) if element_class(element_type) != "float" \
            else float_result(Fraction(value) if value else 0.0, element_type)
    return result, None


def _make_map(rng, shape, element_type):
    body = _random_body(rng, element_type)
    return None if body is None else ({"body": body}, tuple(shape))


def _map(attrs, operands, element_type, apply):
    """result[i] = body(x[i], y[i]) (spec: map), each by the elementwise oracle."""
    x, y = operands
    result = _apply_each(attrs["body"], x, element_type, apply, y)
    return (None, f"{attrs['body']}: a step the spec leaves to the implementation") if result is None \
        else (result, None)


# The ops a case branch or a while body applies: each exact for its classes.
_BRANCH_OPS = {"bool": ("not",), "signed": ("negate", "not", "abs"), "unsigned": ("not", "popcnt"),
               "float": ("negate", "abs", "floor"), "complex": ("negate",)}


def _make_case(rng, shape, element_type):
    ops = _BRANCH_OPS[element_class(element_type)]
    branches = [None] + [ops[int(rng.integers(len(ops)))] for _ in range(int(rng.integers(1, 3)))]
    return {"branches": branches}, tuple(shape)


def _apply_each(op, x, element_type, apply, y=None):
    """`op` on each element of `x` (and of `y`, for a binary op) by the elementwise oracle,
    or None where the spec leaves a step open."""
    result = np.empty_like(x)
    for index in _indices(x.shape):
        value = apply(op, x[index], None if y is None else y[index], element_type)
        if value is None:
            return None
        result[index] = value
    return result


def _case(attrs, operands, element_type, apply):
    x, index = operands
    branches = attrs["branches"]
    chosen = int(index)
    op = branches[chosen if 0 <= chosen < len(branches) else len(branches) - 1]   # spec: out of range: the last
    return (x.copy() if op is None else _apply_each(op, x, element_type, apply)), None


def _make_while(rng, shape, element_type):
    ops = _BRANCH_OPS[element_class(element_type)]
    return {"body": ops[int(rng.integers(len(ops)))], "trips": int(rng.integers(0, 4))}, tuple(shape)


def _while(attrs, operands, element_type, apply):
    (x,) = operands
    for _ in range(attrs["trips"]):
        x = _apply_each(attrs["body"], x, element_type, apply)
        if x is None:
            return None, f"{attrs['body']}: a step the spec leaves to the implementation"
    return x.copy(), None


def _make_concatenate(rng, shape, element_type):
    if not shape:
        return None
    dimension, other = int(rng.integers(len(shape))), int(rng.integers(0, 3))
    result = tuple(d + other if k == dimension else d for k, d in enumerate(shape))
    return {"dimension": dimension, "other": other}, result


def _other_shape(attrs, shape) -> tuple:
    return tuple(attrs["other"] if k == attrs["dimension"] else d for k, d in enumerate(shape))


def _concatenate(attrs, operands, element_type, apply):
    x, y = operands
    dimension = attrs["dimension"]
    result = np.empty(tuple(attrs["result_shape"]), x.dtype)
    for index in _indices(result.shape):      # the first operand's elements, then the second's
        i = index[dimension]
        source, at = (x, i) if i < x.shape[dimension] else (y, i - x.shape[dimension])
        result[index] = source[index[:dimension] + (at,) + index[dimension + 1:]]
    return result, None


def _make_dot(rng, shape, element_type):
    if len(shape) != 2:
        return None
    columns = int(rng.integers(0, 4))
    return {"columns": columns}, (shape[0], columns)


OVERFLOW_OPEN = ("an infinity in a float sum of products that could also overflow: the precision of the "
                 "products and the sum is the implementation's choice")


def sum_of_products(pairs, element_type: str):
    """The sum of a * b over `pairs`: integers exactly, wrapped to the type; floats by
    `float_sum_of_products` (None where the spec leaves it open)."""
    if element_class(element_type) == "float":
        return float_sum_of_products(pairs, element_type)
    return wrap(sum(int(a) * int(b) for a, b in pairs), element_type)


def float_sum_of_products(pairs, element_type: str):
    """The sum of a * b over `pairs`, exact and rounded once, or None where the spec leaves
    it open. A NaN, an infinity times zero, or infinite products of both signs give NaN in
    any order and precision; infinite products of one sign give that infinity. But where a
    finite product or a partial sum of them could overflow to an infinity of its own, the
    answer depends on how wide the products and the sum are computed, which is the
    implementation's choice (dot_general's precision_config)."""
    wide = [(float(np.asarray(a).astype(np.float64)), float(np.asarray(b).astype(np.float64))) for a, b in pairs]
    finite = [Fraction(a) * Fraction(b) for a, b in wide if math.isfinite(a) and math.isfinite(b)]
    specials = {a * b for a, b in wide if not (math.isfinite(a) and math.isfinite(b))}
    if any(math.isnan(p) for p in specials) or {math.inf, -math.inf} <= specials:
        return float_result(math.nan, element_type)
    if sum(abs(p) for p in finite) > Fraction(float(ml_dtypes.finfo(dtype_of(element_type)).max)):
        return None
    if specials:
        return float_result(specials.pop(), element_type)
    exact = sum(finite, Fraction(0))
    if exact == 0:       # -0 only if every product is -0 (IEEE 754: x + -x and +0 + -0 are +0)
        negative = bool(wide) and all(math.copysign(1, a) * math.copysign(1, b) < 0 for a, b in wide)
        return float_result(-0.0 if negative else 0.0, element_type)
    return float_result(exact, element_type)


def _dot(attrs, operands, element_type, apply):
    """result[i, j] = sum over k of lhs[i, k] * rhs[k, j]: integers exactly, wrapped to the type;
    floats exactly, rounded once (the spec leaves a float sum's order to the implementation)."""
    lhs, rhs = operands
    rows, inner, columns = lhs.shape[0], lhs.shape[1], attrs["columns"]
    result = np.empty((rows, columns), lhs.dtype)
    floats = element_class(element_type) == "float"
    for i, j in _indices((rows, columns)):
        pairs = [(lhs[i, k], rhs[k, j]) for k in range(inner)]
        value = sum_of_products(pairs, element_type)
        if value is None:
            return None, OVERFLOW_OPEN
        result[i, j] = value
    return result, "a float dot product's summation order is implementation-defined" if floats else None


# ------------------------------------------------------------ the text
def _op_line(name: str, attributes: str = "", regions: str = ""):
    """The text of one op: `result = "stablehlo.name"(operands) regions attributes : types`."""
    def text(attrs, result, names, types, element_type, result_type):
        return (f'{result} = "stablehlo.{name}"({", ".join(names)}) {regions} {attributes} : '
                f"({', '.join(types)}) -> {result_type}")
    return text


def _with_arrays(name: str, *keys):
    def text(attrs, result, names, types, element_type, result_type):
        attributes = "{" + ", ".join(f"{k} = {_i64s(attrs[k])}" for k in keys) + "}"
        return _op_line(name, attributes)(attrs, result, names, types, element_type, result_type)
    return text


def _concatenate_text(attrs, result, names, types, element_type, result_type):
    return (f'{result} = "stablehlo.concatenate"({", ".join(names)}) {{dimension = {attrs["dimension"]} : i64}} : '
            f"({', '.join(types)}) -> {result_type}")


def _dot_text(attrs, result, names, types, element_type, result_type):
    dimensions = ("#stablehlo.dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], "
                  "lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>")
    return (f'{result} = "stablehlo.dot_general"({", ".join(names)}) {{dot_dimension_numbers = {dimensions}}} : '
            f"({', '.join(types)}) -> {result_type}")


def _scalar_region(arguments: int, element_type: str, lines: list[str], returned: str) -> str:
    scalar = tensor_type((), element_type)
    header = ", ".join(f"%p{k}: {scalar}" for k in range(arguments))
    body = "".join(f"    {line}\n" for line in lines)
    return f'{{\n  ^bb0({header}):\n{body}    "stablehlo.return"({returned}) : ({scalar}) -> ()\n  }}'


def _binary_region(op: str, element_type: str) -> str:
    """A region of two scalars returning `op` of them (a reduction's, a map's, a scatter's body)."""
    scalar = tensor_type((), element_type)
    return _scalar_region(2, element_type, [f'%s = "stablehlo.{op}"(%p0, %p1) : ({scalar}, {scalar}) -> {scalar}'],
                          "%s")


def _init_line(name: str, body: str, element_type: str) -> str:
    """`name`, a scalar constant holding the init value of a fold with `body`."""
    value = init_value(body, element_type, dtype_of(element_type))
    return f"{name} = stablehlo.constant dense<{constant_text(value)}> : {tensor_type((), element_type)}"


def _reduce_text(attrs, result, names, types, element_type, result_type):
    scalar, init = tensor_type((), element_type), f"{result}_init"
    region = _binary_region(attrs["body"], element_type)
    return (f"{_init_line(init, attrs['body'], element_type)}\n  "
            f'{result} = "stablehlo.reduce"({names[0]}, {init}) ({region}) '
            f'{{dimensions = {_i64s(attrs["dimensions"])}}} : ({types[0]}, {scalar}) -> {result_type}')


def _compare_region(direction: str, compare_type: str, element_type: str) -> str:
    """A region of two scalars returning their comparison (sort's comparator, select_and_scatter's select)."""
    scalar = tensor_type((), element_type)
    return (f'{{\n  ^bb0(%p0: {scalar}, %p1: {scalar}):\n'
            f'    %s = "stablehlo.compare"(%p0, %p1) {{comparison_direction = '
            f'#stablehlo<comparison_direction {direction}>, compare_type = '
            f'#stablehlo<comparison_type {compare_type}>}} : ({scalar}, {scalar}) -> tensor<i1>\n'
            f'    "stablehlo.return"(%s) : (tensor<i1>) -> ()\n  }}')


def _sort_text(attrs, result, names, types, element_type, result_type):
    region = _compare_region(attrs["direction"], attrs["compare_type"], element_type)
    return (f'{result} = "stablehlo.sort"({names[0]}) ({region}) '
            f'{{dimension = {attrs["dimension"]} : i64, is_stable = true}} : ({types[0]}) -> {result_type}')


def _unary_lines(op: str | None, operand: str, operand_type: str, out: str) -> list[str]:
    return [] if op is None else [f'{out} = "stablehlo.{op}"({operand}) : ({operand_type}) -> {operand_type}']


def _case_text(attrs, result, names, types, element_type, result_type):
    branches = []
    for k, op in enumerate(attrs["branches"]):
        value = names[0] if op is None else f"{result}_b{k}"
        lines = _unary_lines(op, names[0], types[0], value)
        body = "".join(f"    {line}\n" for line in lines)
        branches.append(f'{{\n{body}    "stablehlo.return"({value}) : ({types[0]}) -> ()\n  }}')
    return (f'{result} = "stablehlo.case"({names[1]}) ({", ".join(branches)}) : '
            f"({types[1]}) -> {result_type}")


def _while_text(attrs, result, names, types, element_type, result_type):
    counter = "tensor<i32>"
    x, t = names[0], types[0]
    condition = (f'{{\n  ^bb0(%x: {t}, %i: {counter}):\n'
                 f'    %k = stablehlo.constant dense<{attrs["trips"]}> : {counter}\n'
                 f'    %c = "stablehlo.compare"(%i, %k) {{comparison_direction = #stablehlo<comparison_direction LT>, '
                 f'compare_type = #stablehlo<comparison_type SIGNED>}} : ({counter}, {counter}) -> tensor<i1>\n'
                 f'    "stablehlo.return"(%c) : (tensor<i1>) -> ()\n  }}')
    step = _unary_lines(attrs["body"], "%x", t, "%y")
    body = (f'{{\n  ^bb0(%x: {t}, %i: {counter}):\n' + "".join(f"    {line}\n" for line in step) +
            f'    %one = stablehlo.constant dense<1> : {counter}\n'
            f'    %j = "stablehlo.add"(%i, %one) : ({counter}, {counter}) -> {counter}\n'
            f'    "stablehlo.return"(%y, %j) : ({t}, {counter}) -> ()\n  }}')
    return (f"{result}_zero = stablehlo.constant dense<0> : {counter}\n  "
            f'{result}_loop:2 = "stablehlo.while"({x}, {result}_zero) ({condition}, {body}) : '
            f"({t}, {counter}) -> ({result_type}, {counter})")


def _gather_text(attrs, result, names, types, element_type, result_type):
    axis, rank = attrs["axis"], len(attrs["slice_sizes"])
    dimensions = (f"#stablehlo.gather<offset_dims = [{', '.join(str(d) for d in range(1, rank))}], "
                  f"collapsed_slice_dims = [{axis}], start_index_map = [{axis}], index_vector_dim = 1>")
    return (f'{result} = "stablehlo.gather"({", ".join(names)}) {{dimension_numbers = {dimensions}, '
            f'slice_sizes = {_i64s(attrs["slice_sizes"])}, indices_are_sorted = false}} : '
            f"({', '.join(types)}) -> {result_type}")


def _scatter_text(attrs, result, names, types, element_type, result_type):
    axis, rank = attrs["axis"], types[0].count("x")
    combiner = attrs["combiner"]
    region = (_scalar_region(2, element_type, [], "%p1") if combiner == "replace"
              else _binary_region(combiner, element_type))
    dimensions = (f"#stablehlo.scatter<update_window_dims = [{', '.join(str(d) for d in range(1, rank))}], "
                  f"inserted_window_dims = [{axis}], scatter_dims_to_operand_dims = [{axis}], "
                  f"index_vector_dim = 1>")
    return (f'{result} = "stablehlo.scatter"({", ".join(names)}) ({region}) {{scatter_dimension_numbers = '
            f'{dimensions}, indices_are_sorted = false, unique_indices = false}} : '
            f"({', '.join(types)}) -> {result_type}")


def _padding_text(padding) -> str:
    rows = ", ".join(f"[{low}, {high}]" for low, high in padding)
    return f"dense<[{rows}]> : tensor<{len(padding)}x2xi64>" if padding else "dense<> : tensor<0x2xi64>"


def _reduce_window_text(attrs, result, names, types, element_type, result_type):
    scalar, init = tensor_type((), element_type), f"{result}_init"
    region = _binary_region(attrs["body"], element_type)
    window = (f'window_dimensions = {_i64s(attrs["window"])}, window_strides = {_i64s(attrs["strides"])}, '
              f'base_dilations = {_i64s(attrs["base_dilations"])}, '
              f'window_dilations = {_i64s(attrs["window_dilations"])}, padding = {_padding_text(attrs["padding"])}')
    return (f"{_init_line(init, attrs['body'], element_type)}\n  "
            f'{result} = "stablehlo.reduce_window"({names[0]}, {init}) ({region}) {{{window}}} : '
            f"({types[0]}, {scalar}) -> {result_type}")


def _select_and_scatter_text(attrs, result, names, types, element_type, result_type):
    scalar, init = tensor_type((), element_type), f"{result}_init"
    select = _compare_region(attrs["direction"], comparison_type(element_type), element_type)
    scatter = _binary_region(attrs["body"], element_type)
    window = (f'window_dimensions = {_i64s(attrs["window"])}, window_strides = {_i64s(attrs["strides"])}, '
              f'padding = {_padding_text(attrs["padding"])}')
    return (f"{_init_line(init, attrs['body'], element_type)}\n  "
            f'{result} = "stablehlo.select_and_scatter"({names[0]}, {names[1]}, {init}) ({select}, {scatter}) '
            f"{{{window}}} : ({types[0]}, {types[1]}, {scalar}) -> {result_type}")


def _convolution_text(attrs, result, names, types, element_type, result_type):
    spatial = ", ".join(str(k) for k in range(len(attrs["window"])))
    lhs = "[b, " + (spatial + ", " if spatial else "") + "f]"
    kernel = "[" + (spatial + ", " if spatial else "") + "i, o]"
    attributes = (f"dimension_numbers = #stablehlo.conv<{lhs}x{kernel}->{lhs}>, "
                  f'window_strides = {_i64s(attrs["strides"])}, padding = {_padding_text(attrs["padding"])}, '
                  f'lhs_dilation = {_i64s(attrs["base_dilations"])}, rhs_dilation = {_i64s(attrs["window_dilations"])}, '
                  "feature_group_count = 1 : i64, batch_group_count = 1 : i64")
    return (f'{result} = "stablehlo.convolution"({", ".join(names)}) {{{attributes}}} : '
            f"({', '.join(types)}) -> {result_type}")


def _reduce_precision_text(attrs, result, names, types, element_type, result_type):
    return (f'{result} = "stablehlo.reduce_precision"({names[0]}) {{exponent_bits = {attrs["exponent_bits"]} : i32, '
            f'mantissa_bits = {attrs["mantissa_bits"]} : i32}} : ({types[0]}) -> {result_type}')


def _batch_norm_inference_text(attrs, result, names, types, element_type, result_type):
    return (f'{result} = "stablehlo.batch_norm_inference"({", ".join(names)}) '
            f'{{epsilon = {attrs["epsilon"]!r} : f32, feature_index = {attrs["feature_index"]} : i64}} : '
            f"({', '.join(types)}) -> {result_type}")


def _iota_text(attrs, result, names, types, element_type, result_type):
    return f'{result} = "stablehlo.iota"() {{iota_dimension = {attrs["iota_dimension"]} : i64}} : () -> {result_type}'


def _map_text(attrs, result, names, types, element_type, result_type):
    region = _binary_region(attrs["body"], element_type)
    rank = types[0].count("x")
    return (f'{result} = "stablehlo.map"({", ".join(names)}) ({region}) {{dimensions = {_i64s(range(rank))}}} : '
            f"({', '.join(types)}) -> {result_type}")


def constant_text(value) -> str:
    """A 0-d value as a dense attribute's element, exactly (floats by their bits)."""
    value = np.asarray(value)
    if value.dtype == np.bool_:
        return "true" if value else "false"
    if is_float(value.dtype):
        bits = value.reshape(1).view(f"u{value.dtype.itemsize}")[0]
        return f"0x{int(bits):0{2 * value.dtype.itemsize}X}"
    return str(int(value))


_ANY = ("bool", "signed", "unsigned", "float", "complex")
_ORDERED = ("bool", "signed", "unsigned", "float")

STRUCTURAL: dict[str, Structural] = {s.name: s for s in [
    Structural("transpose", _make_transpose, _with_arrays("transpose", "permutation"), _transpose),
    Structural("reverse", _make_reverse, _with_arrays("reverse", "dimensions"), _reverse),
    Structural("slice", _make_slice, _with_arrays("slice", "start_indices", "limit_indices", "strides"), _slice),
    Structural("reshape", _make_reshape, _op_line("reshape"), _reshape),
    Structural("broadcast_in_dim", _make_broadcast, _with_arrays("broadcast_in_dim", "broadcast_dimensions"),
               _broadcast),
    Structural("pad", _make_pad, _with_arrays("pad", "edge_padding_low", "edge_padding_high", "interior_padding"),
               _pad, _ANY, lambda attrs, shape: [(None, ())]),
    Structural("reduce", _make_reduce, _reduce_text, _reduce, _ORDERED),
    Structural("sort", _make_sort, _sort_text, _sort, _ORDERED),
    Structural("dynamic_slice", _make_dynamic_slice, _with_arrays("dynamic_slice", "slice_sizes"),
               _dynamic_slice, _ANY, lambda attrs, shape: [("i32", ())] * len(shape)),
    Structural("dynamic_update_slice", _make_dynamic_update_slice, _op_line("dynamic_update_slice"),
               _dynamic_update_slice, _ANY,
               lambda attrs, shape: [(None, tuple(attrs["update_shape"]))] + [("i32", ())] * len(shape)),
    Structural("gather", _make_gather, _gather_text, _gather, _ANY,
               lambda attrs, shape: [("i32", (attrs["count"], 1))]),
    Structural("scatter", _make_scatter, _scatter_text, _scatter, _ORDERED,
               lambda attrs, shape: [("i32", (attrs["count"], 1)), (None, _scatter_update_shape(attrs, shape))]),
    Structural("reduce_window", _make_reduce_window, _reduce_window_text, _reduce_window, _ORDERED),
    Structural("select_and_scatter", _make_select_and_scatter, _select_and_scatter_text, _select_and_scatter,
               ("signed", "unsigned", "float"), lambda attrs, shape: [(None, tuple(attrs["windows"]))]),
    Structural("convolution", _make_convolution, _convolution_text, _convolution, ("signed", "unsigned", "float"),
               lambda attrs, shape: [(None, _convolution_kernel_shape(attrs, shape))]),
    Structural("reduce_precision", _make_reduce_precision, _reduce_precision_text, _reduce_precision, ("float",)),
    Structural("batch_norm_inference", _make_batch_norm_inference, _batch_norm_inference_text,
               _batch_norm_inference, ("float",), _batch_norm_parameters),
    Structural("iota", _make_iota, _iota_text, _iota, ("signed", "unsigned", "float")),
    Structural("map", _make_map, _map_text, _map, _ORDERED, lambda attrs, shape: [(None, tuple(shape))]),
    Structural("case", _make_case, _case_text, _case, _ANY, lambda attrs, shape: [("i32", ())]),
    Structural("while", _make_while, _while_text, _while, _ANY, results=2),
    Structural("concatenate", _make_concatenate, _concatenate_text, _concatenate, _ANY,
               lambda attrs, shape: [(None, _other_shape(attrs, shape))]),
    Structural("dot_general", _make_dot, _dot_text, _dot, ("signed", "unsigned", "float"),
               lambda attrs, shape: [(None, (shape[1], attrs["columns"]))]),
]}
