"""Ops a compiled loop hands back to the interpreter, one op at a time.

Some ops cannot be compiled so that they give the interpreter's bits: a
float dot_general that numpy does not make by one BLAS call the loop can
make too (small_products.py), a float64 transcendental where numpy's SIMD
function is not libm's
(float64_math.py), an op no template translates. Before this module one of
them kept the whole loop interpreted, every op of every iteration. Now the
loop stays compiled and only that op leaves it: the generated code runs it
in numba's object mode (`with objmode(...)`), where `run` calls the very
kernel the interpreter would (the step's own, with its OpInfo), on numpy
arrays of the op's shapes and types. A hand-back costs a few microseconds
per iteration (entering object mode, boxing the operands), not the
interpreter's dispatch of every op.

The generated module is cached by its source, so it names the op by a key
(`register`), a digest of what the op computes (name, attributes, types):
any program whose loop has the same source hands back an equivalent op.
Each process registers its ops when it translates the loop, before the
loop can run.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from pjrt_ref.interpreter.native import half_precision

_OPS: dict[str, tuple] = {}

# Ops never handed back: their kernels read the execution's context
# (collectives, ids, callbacks, feeds) or may write an operand in place
# (optimiser/in_place.py's dynamic_update_slice and scatter).
NOT_HANDED_BACK = frozenset(f"stablehlo.{name}" for name in (
    "custom_call", "replica_id", "partition_id", "all_reduce", "all_gather", "all_to_all", "reduce_scatter",
    "collective_permute", "collective_broadcast", "send", "recv", "infeed", "outfeed", "rng",
    "optimization_barrier", "dynamic_update_slice", "scatter"))


# Products with an operand bigger than this keep the loop interpreted: the
# interpreted loop's rewrites pay off there (optimiser/in_place.py accumulates
# into the product's output inside gemm, optimiser/invariant_layouts.py keeps
# loop-invariant weights row-major), and object mode's few microseconds
# do not matter.
MAX_PRODUCT_OPERAND = 4096
PRODUCTS = ("stablehlo.dot_general", "stablehlo.dot")


def can_hand_back(step) -> bool:
    """Whether `step` may run in object mode inside a compiled loop: one
    result, no regions, a kernel that reads only its operands, and not a
    big product."""
    op = step.op
    if len(step.results) != 1 or step.regions or op.name in NOT_HANDED_BACK or op.name == "func.call":
        return False
    return op.name not in PRODUCTS or all(math.prod(t.shape) <= MAX_PRODUCT_OPERAND for t in op.operand_types)


def register(step) -> str:
    """The key generated code passes to `run` for `step`'s op."""
    op = step.op
    described = repr((op.name, sorted((k, repr(v)) for k, v in op.attrs.items()),
                      [str(t) for t in op.operand_types], [str(t) for t in op.result_types]))
    key = hashlib.sha256(described.encode()).hexdigest()[:20]
    _OPS.setdefault(key, (step.kernel, op))
    return key


def numba_type(dtype, is_array: bool) -> str:
    """The objmode type of a value of `dtype` as compiled code holds it."""
    name = "float32" if half_precision.is_half(dtype) else ("boolean" if dtype == np.bool_ else dtype.name)
    return f"{name}[::1]" if is_array else name


def run(key: str, *values):
    """The op of `key` on `values` (flat arrays or scalars, halves as
    float32), its result as compiled code holds it: a flat contiguous array,
    or a scalar for a 0-d result."""
    kernel, op = _OPS[key]
    operands = []
    for value, ttype in zip(values, op.operand_types):
        array = np.asarray(value).astype(ttype.dtype, copy=False)
        # a flat array, or a scalar standing for a splat of the operand's shape
        operands.append(array.reshape(ttype.shape) if array.ndim else np.broadcast_to(array, ttype.shape))
    result = np.asarray(kernel(op, *operands))
    held = np.float32 if half_precision.is_half(result.dtype) else result.dtype
    if op.result_types[0].shape == ():
        return result.astype(held)[()]
    return np.ascontiguousarray(result, dtype=held).reshape(-1)
