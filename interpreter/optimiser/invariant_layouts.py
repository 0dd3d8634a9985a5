"""Plan-time rewrite: a matrix that a `while` never changes, read by a
product in its body as a transposed operand, is copied to row-major once
per run of the loop instead of being read transposed at every iteration.

JAX's gradient of `h @ W` with respect to `h` is `dy . W^T`, a
`dot_general` contracting W's second dimension, which BLAS reads as a
transposed operand (CblasTrans). In a scan's backward loop W is a carried
value the body returns unchanged (spec "while": the body's results are the
next iteration's operands), read at every step. BLAS is quicker on the
row-major layout, and on it OpenBLAS's small-product kernels may apply
(`blas.fine_blocks`): W9's `dy . W_h^T`, 32x1024 by 1024x256, benchmarks/
README.md "W9".

So, for such a product, the pass inserts before the `while` a step that
makes the operand's matrix row-major (`row_major_operand`, once per run of
the loop), and the product in the body reads that copy as well (regions
read values of the enclosing region directly: `steps.slots_read_by`).

Bits: the product reads the same numbers in another layout, and BLAS may
pack and sum them otherwise. The product step asks `blas.layouts_agree`,
once per shape and layout, whether both layouts give the same bits on
random operands, and reads the original where they do not. So the results
are those of the unrewritten plan.

Applies to f32/f64 products of 2-d operands (`dots.product_dimensions`)
directly in a `while` body, big enough to be cut into blocks
(`blas.product_blocks`), whose transposed operand is a block argument
returned unchanged.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pjrt_ref.interpreter.native import blas
from pjrt_ref.interpreter.ops import control
from pjrt_ref.interpreter.native.blas import matrix_operands
from pjrt_ref.interpreter.steps import FunctionPlan, OpInfo, RegionPlan, Step
from pjrt_ref.interpreter.types import TensorType
from pjrt_ref.interpreter.optimiser import dots


def copy_transposed_invariants(plan: FunctionPlan) -> None:
    """Rewrite every qualifying product in the `while` bodies of `plan`."""
    _rewrite_region(plan, plan.body)


def _rewrite_region(plan: FunctionPlan, region: RegionPlan) -> None:
    index = 0
    while index < len(region.steps):
        step = region.steps[index]
        for nested in step.regions:
            _rewrite_region(plan, nested)
        copies = _copy_steps(plan, step) if step.kernel is control.while_ else []
        region.steps[index:index] = copies
        if copies:
            region.runners = None
        index += len(copies) + 1


def _copy_steps(plan: FunctionPlan, loop: Step) -> list[Step]:
    """Rewrite the products of `loop`'s body that read an invariant block
    argument transposed; return the copy steps to run before the loop."""
    body = loop.regions[1]
    invariant = {arg: loop.operands[k] for k, arg in enumerate(body.arg_slots)
                 if body.result_slots[k] == arg}
    copies = []
    for index, step in enumerate(body.steps):
        position = _transposed_invariant_operand(step, invariant)
        if position is None:
            continue
        copy_slot = plan.num_slots
        plan.num_slots += 1
        copies.append(_copy_step(step, position, invariant[step.operands[position]], copy_slot))
        body.steps[index] = _reading_copy(step, position, copy_slot)
        body.runners = None
    return copies


def _transposed_invariant_operand(step: Step, invariant: dict) -> int | None:
    """0 or 1: the operand of product `step` that is an invariant block
    argument and that BLAS would read transposed; else None."""
    dims = dots.product_dimensions(step)
    if dims is None or any(len(t.shape) != 2 for t in step.op.operand_types):
        return None
    (rows, columns), inner = step.op.result_type.shape, step.op.operand_types[0].shape[dims[2][0]]
    if blas.product_blocks(rows, inner, columns).count == 1:
        return None   # small: quick in either layout, not worth a step
    lhs_free, rhs_free, lhs_contract, rhs_contract = dims
    if step.operands[1] in invariant and rhs_contract == (1,):
        return 1
    if step.operands[0] in invariant and lhs_contract == (0,):
        return 0
    return None


def _copy_step(product: Step, position: int, source: int, copy_slot: int) -> Step:
    """The step making operand `position` of `product` row-major, as the
    matrix BLAS multiplies (its transpose), from the loop's operand `source`."""
    ttype = product.op.operand_types[position]
    rows, columns = ttype.shape
    copy_type = TensorType((columns, rows), ttype.dtype, ttype.element_type)
    info = OpInfo("pjrt_ref.row_major_operand", product.op.location, {}, (ttype,), (copy_type,),
                  product.op.module)
    return Step(kernel=row_major_operand, op=info, operands=(source,), results=(copy_slot,))


def row_major_operand(op, matrix):
    """The transpose of 2-d `matrix`, row-major (C-contiguous)."""
    return np.ascontiguousarray(matrix.T)


def _reading_copy(product: Step, position: int, copy_slot: int) -> Step:
    info = dataclasses.replace(
        product.op, attrs={"product_dimensions": dots.product_dimensions(product),
                           "copied_operand": position},
        operand_types=(*product.op.operand_types, product.op.operand_types[position]))
    return Step(kernel=product_of_row_major_operand, op=info,
                operands=(*product.operands, copy_slot), results=product.results)


def product_of_row_major_operand(op, lhs, rhs, copy):
    """Spec "dot_general" of `lhs` and `rhs` (a matrix product,
    `dots.product_dimensions`), BLAS reading `copy`, the row-major form of
    the operand `op.attrs["copied_operand"]` as it multiplies it, where
    that gives the same bits as reading the operand itself."""
    a, b, shape = matrix_operands(lhs, rhs, *op.attrs["product_dimensions"])
    if op.attrs["copied_operand"] == 0:
        a = copy if blas.layouts_agree(a, b, copy, 0) else a
    else:
        b = copy if blas.layouts_agree(a, b, copy, 1) else b
    with np.errstate(all="ignore"):
        return blas.matmul(a, b).reshape(shape)
