"""Plan-time rewrite: a matrix product whose only use is a transpose of it
computes the transposed product directly.

JAX's gradients of `x @ w` come out as `transpose(dot_general(g, x))`: the
weight gradient is formed as (in, out)^T. Interpreted as written, the
product is made in one layout and the transpose is a strided view that the
next elementwise step copies (`ravel`) before it can loop over it: a second
pass over the array. Since (A . B)^T = B^T . A^T, the pair becomes one step
that computes `dot_general(rhs, lhs)` with the contracting dimensions
swapped, which BLAS writes in the transposed layout at once.

Not bit for bit: each element is the same sum of the same products, but
BLAS may add them in another order when the operands swap roles, so results
agree with the unrewritten plan to the rounding of a dot product
(tests/interpreter/test_optimiser_dots.py). Which rewrites keep the bits: optimiser/__init__.py,
"Bits".

Applies to f32/f64 `dot_general` without batch dimensions whose result is
2-d, used once, by `transpose` with permutation [1, 0].
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.ops.dot import BLAS_FLOATS, dot_general, matrix_product
from pjrt_ref.interpreter.steps import OpInfo, Step
from pjrt_ref.interpreter.native.scope import CONTROL_FLOW_OPS
from pjrt_ref.interpreter.optimiser.fusion import count_uses


def fold_transposes(region) -> None:
    """Rewrite the pairs described above in `region` and in the bodies of
    the control-flow ops inside it."""
    uses = count_uses(region)
    producers = {step.results[0]: index for index, step in enumerate(region.steps)
                 if is_matrix_product(step)}
    steps: list = list(region.steps)
    folded = False
    for index, step in enumerate(region.steps):
        if step.op.name in CONTROL_FLOW_OPS:
            for nested in step.regions:
                fold_transposes(nested)
        if not _swaps_two_dims(step):
            continue
        producer = producers.get(step.operands[0])
        if producer is None or uses.get(step.operands[0]) != 1:
            continue
        steps[producer] = _transposed_product_step(region.steps[producer], step)
        steps[index] = None
        folded = True
    if folded:
        region.steps = [step for step in steps if step is not None]
        region.runners = None


def is_matrix_product(step: Step) -> bool:
    op = step.op
    if op.name != "stablehlo.dot_general" or step.regions or len(step.results) != 1:
        return False
    numbers = op.attrs.get("dot_dimension_numbers")
    if numbers is None or numbers.lhs_batching_dimensions:
        return False
    types = (*op.operand_types, op.result_type)
    return (all(getattr(t, "quant", None) is None and getattr(t, "dtype", None) == op.result_type.dtype
                for t in types)
            and op.result_type.dtype in BLAS_FLOATS and len(op.result_type.shape) == 2)


def product_dimensions(step: Step) -> tuple | None:
    """(lhs_free, rhs_free, lhs_contract, rhs_contract), as `matrix_product`
    takes them, of a step computing a 2-d f32/f64 product with BLAS (a
    `dot_general` that `is_matrix_product`, or a transposed product); None
    for any other step. Such a step's result is newly allocated memory."""
    if step.kernel is transposed_product:
        dims = step.op.attrs["swapped"]
        return dims["lhs_free"], dims["rhs_free"], dims["lhs_contract"], dims["rhs_contract"]
    if step.kernel is not dot_general or not is_matrix_product(step):
        return None
    numbers = step.op.attrs["dot_dimension_numbers"]
    lhs_type, rhs_type = step.op.operand_types
    return (_free_dims(lhs_type, numbers.lhs_contracting_dimensions),
            _free_dims(rhs_type, numbers.rhs_contracting_dimensions),
            tuple(numbers.lhs_contracting_dimensions), tuple(numbers.rhs_contracting_dimensions))


def _swaps_two_dims(step: Step) -> bool:
    return (step.op.name == "stablehlo.transpose"
            and tuple(step.op.attrs.get("permutation", ())) == (1, 0))


def _transposed_product_step(product: Step, transpose: Step) -> Step:
    """One step computing `transpose`'s result from `product`'s operands.
    It keeps the product's name and location (errors and profiles point at
    the dot_general)."""
    numbers = product.op.attrs["dot_dimension_numbers"]
    lhs_type, rhs_type = product.op.operand_types
    swapped = dict(
        lhs_contract=tuple(numbers.rhs_contracting_dimensions),
        rhs_contract=tuple(numbers.lhs_contracting_dimensions),
        lhs_free=_free_dims(rhs_type, numbers.rhs_contracting_dimensions),
        rhs_free=_free_dims(lhs_type, numbers.lhs_contracting_dimensions),
    )
    info = OpInfo(product.op.name, product.op.location, {"swapped": swapped},
                  (rhs_type, lhs_type), transpose.op.result_types, product.op.module)
    return Step(kernel=transposed_product, op=info,
                operands=(product.operands[1], product.operands[0]), results=transpose.results)


def _free_dims(ttype, contracting) -> tuple:
    return tuple(d for d in range(len(ttype.shape)) if d not in contracting)


def transposed_product(op: OpInfo, lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """`transpose(dot_general(rhs, lhs))`, computed as dot_general(lhs, rhs)
    with `op`'s swapped dimension numbers (see the module docstring)."""
    dims = op.attrs["swapped"]
    return matrix_product(lhs, rhs, dims["lhs_free"], dims["rhs_free"], dims["lhs_contract"],
                          dims["rhs_contract"])
