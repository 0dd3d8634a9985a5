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
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .opset import comparison_type, element_class


def _tensor(shape, element_type: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + element_type + ">"


def _i64s(values) -> str:
    return "array<i64" + (": " + ", ".join(str(int(v)) for v in values) if len(values) else "") + ">"


def _indices(shape):
    return itertools.product(*[range(d) for d in shape])


@dataclass(frozen=True)
class Structural:
    name: str
    make: Callable            # (rng, shape, element_type) -> (attrs dict, result shape) or None
    attributes: Callable      # (attrs, operand names, operand types) -> (attribute text, region text)
    # (attrs with "result_shape", operand arrays, element type, the elementwise oracle's
    # apply(op, a, b, element_type)) -> (result array or None, why the spec is silent or None)
    evaluate: Callable
    classes: tuple = ("bool", "signed", "unsigned", "float", "complex")

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


def _make_reduce(rng, shape, element_type):
    kind = element_class(element_type)
    if kind not in _REDUCERS or not shape:
        return None
    body = _REDUCERS[kind][int(rng.integers(len(_REDUCERS[kind])))]
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
    """The reduction's init: the body's identity (max: the type's lowest value)."""
    import ml_dtypes

    if body in _INITIAL_OF_MAX:
        if element_class(element_type) == "float":
            return np.array(-np.inf if body == "maximum" else np.inf).astype(dtype)
        if element_class(element_type) == "bool":
            return np.array(body == "minimum")
        info = ml_dtypes.iinfo(dtype)
        return np.array(info.min if body == "maximum" else info.max).astype(dtype)
    return np.array(_INITS[body]).astype(dtype)


def _reduce(attrs, operands, element_type, apply):
    (x,) = operands
    body, dimensions = attrs["body"], attrs["dimensions"]
    kept = [d for d in range(x.ndim) if d not in dimensions]
    result = np.empty(tuple(x.shape[d] for d in kept), x.dtype)
    init = init_value(body, element_type, x.dtype)
    for index in _indices(result.shape):
        values = [init]
        for reduced in _indices(tuple(x.shape[d] for d in dimensions)):
            full = [0] * x.ndim
            for k, d in enumerate(kept):
                full[d] = index[k]
            for k, d in enumerate(dimensions):
                full[d] = reduced[k]
            values.append(x[tuple(full)])
        folded = evaluate_fold(body, values, element_type, apply)
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


# ------------------------------------------------------------ the text
def _plain(attrs, names, types):
    return "", ""


def _array_attributes(*keys):
    def text(attrs, names, types):
        return "{" + ", ".join(f"{k} = {_i64s(attrs[k])}" for k in keys) + "}", ""
    return text


def _reduce_text(attrs, names, types):
    element = types[0][1]
    scalar = _tensor((), element)
    region = (f'({{\n  ^bb0(%p: {scalar}, %q: {scalar}):\n'
              f'    %s = "stablehlo.{attrs["body"]}"(%p, %q) : ({scalar}, {scalar}) -> {scalar}\n'
              f'    "stablehlo.return"(%s) : ({scalar}) -> ()\n  }})')
    return "{dimensions = " + _i64s(attrs["dimensions"]) + "}", region


def _sort_text(attrs, names, types):
    element = types[0][1]
    scalar = _tensor((), element)
    region = (f'({{\n  ^bb0(%p: {scalar}, %q: {scalar}):\n'
              f'    %s = "stablehlo.compare"(%p, %q) {{comparison_direction = '
              f'#stablehlo<comparison_direction {attrs["direction"]}>, compare_type = '
              f'#stablehlo<comparison_type {attrs["compare_type"]}>}} : ({scalar}, {scalar}) -> tensor<i1>\n'
              f'    "stablehlo.return"(%s) : (tensor<i1>) -> ()\n  }})')
    return f'{{dimension = {attrs["dimension"]} : i64, is_stable = true}}', region


STRUCTURAL: dict[str, Structural] = {s.name: s for s in [
    Structural("transpose", _make_transpose, _array_attributes("permutation"), _transpose),
    Structural("reverse", _make_reverse, _array_attributes("dimensions"), _reverse),
    Structural("slice", _make_slice, _array_attributes("start_indices", "limit_indices", "strides"), _slice),
    Structural("reshape", _make_reshape, _plain, _reshape),
    Structural("broadcast_in_dim", _make_broadcast, _array_attributes("broadcast_dimensions"), _broadcast),
    Structural("pad", _make_pad, _array_attributes("edge_padding_low", "edge_padding_high", "interior_padding"),
               _pad),
    Structural("reduce", _make_reduce, _reduce_text, _reduce, ("bool", "signed", "unsigned", "float")),
    Structural("sort", _make_sort, _sort_text, _sort, ("bool", "signed", "unsigned", "float")),
]}
# pad's second operand, its padding value: a 0-d parameter (any value of the type).
SCALAR_OPERAND = ("pad",)
