"""Loop-carried buffers updated in place: `lax.scan`'s stacked outputs and
gradient accumulators.

JAX lowers `lax.scan` to a `stablehlo.while` whose body writes each step's
output into a carried (steps, ...) buffer with `dynamic_update_slice`
(spec "dynamic_update_slice": the result is the operand with one window
replaced), usually through a private function (`func.call
@dynamic_update_index_in_dim`). Kernels treat operands as immutable, so
unrewritten, each iteration copies the whole buffer to change one row,
a large part of a scan's time (docs/performance-design.md, "Design
notes moved from the code").

When the loop is the only holder of the buffer, the copy is not needed. At
plan time, for each carried value `k` of a `while`, this pass checks that

  - the body reads its block argument `k` exactly once, as the operand
    (operand 0) of a `dynamic_update_slice`, or as the argument of a
    `func.call` whose callee reads that parameter the same way (recursively);
  - that update's result is returned as carried value `k` and read by
    nothing else in the body;

so no other value of the program can see the buffer between iterations
(not a view either: views come from reading it). Then the `while` copies
carried value `k` once on entry (it may be the caller's argument or shared
with other values), and the update writes into the buffer it is given. The
callee is cloned for that call site, so other calls of it still copy.
The written values are those the copying kernel would produce, so results
equal PJRT_REF_OPTIMIZE=0's (tests/interpreter/test_optimiser_in_place.py).

Gradient accumulators. A scan's backward loop carries each weight's
gradient as `dW + x^T . dy`: an `add` of the block argument and a matrix
product read by nothing else. Under the same conditions (the argument read
once, by that add, whose result is returned as the same carried value and
read by nothing else), the product and the add become one step,
`add_product_in_place`: `blas.matmul_add` adds the product into the owned
buffer inside gemm (beta = 1), one pass over it instead of a new product
array, a pass to add it and a new sum; where a probe on random operands of
the shape finds that gemm's sums differ from the add's
(`blas.accumulate_is_exact`: a long inner dimension is summed in panels),
it computes the product and adds it into the buffer. Same bits as the add
after the product either way.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pjrt_ref.interpreter.native import blas
from pjrt_ref.interpreter.native.scope import CONTROL_FLOW_OPS
from pjrt_ref.interpreter.ops import control, core, slicing
from pjrt_ref.interpreter.native.blas import matrix_operands
from pjrt_ref.interpreter.steps import FunctionPlan, OpInfo, RegionPlan, Step, slots_read_by
from pjrt_ref.interpreter.optimiser import direct_kernels, dots
from pjrt_ref.interpreter.optimiser.fusion import count_uses


def dynamic_update_slice_in_place(op, operand, update, *start_indices):
    """Spec "dynamic_update_slice" written into `operand`, which the plan
    proved nobody else reads (see the module docstring); start indices
    clamped as in `slicing.dynamic_update_slice`."""
    starts = slicing.clamped_starts(start_indices, operand.shape, update.shape)
    operand[slicing.window(starts, update.shape)] = update
    return operand


def update_carries_in_place(region: RegionPlan) -> None:
    """Rewrite every generic `while` in `region` (and in the bodies of
    control flow inside it) whose carried buffers qualify."""
    for index, step in enumerate(region.steps):
        for nested in step.regions if step.op.name in CONTROL_FLOW_OPS else ():
            update_carries_in_place(nested)
        if step.kernel is control.while_:
            rewritten = _while_in_place(step)
            if rewritten is not None:
                region.steps[index] = rewritten
                region.runners = None


def _while_in_place(step: Step) -> Step | None:
    """The `while` step with in-place carries, or None if none qualifies."""
    cond, body = step.regions
    owned = []
    for k, arg_slot in enumerate(body.arg_slots):
        if not _is_plain_tensor(step.op.operand_types[k]):
            continue
        if _rewrite_single_update(body, arg_slot, body.result_slots[k]):
            owned.append(k)
    if not owned:
        return None
    body.runners = None
    return dataclasses.replace(step, kernel=_while_owning(tuple(owned)))


def _is_plain_tensor(ttype) -> bool:
    return getattr(ttype, "is_static", False) and np.dtype(ttype.dtype).kind in "fiucb"


def _while_owning(positions: tuple[int, ...]):
    """`stablehlo.while` that first copies the carried values at `positions`
    (they may be the caller's arrays, or also read after the loop)."""
    def while_owning_carries(op, *operands, regions):
        operands = list(operands)
        for k in positions:
            operands[k] = np.array(operands[k], copy=True, order="C")
        return control.while_(op, *operands, regions=regions)
    return while_owning_carries


def _rewrite_single_update(region: RegionPlan, arg_slot: int, result_slot: int) -> bool:
    """If `region` reads `arg_slot` once, by an in-place-able update whose
    result is `result_slot` (returned once, read by nothing else), replace
    that step by its in-place form and return True."""
    if region.result_slots.count(result_slot) != 1 or arg_slot in region.result_slots:
        return False
    readers = [i for i, s in enumerate(region.steps) if arg_slot in slots_read_by(s)]
    result_readers = [i for i, s in enumerate(region.steps) if result_slot in slots_read_by(s)]
    if len(readers) != 1 or result_readers:
        return False
    index = readers[0]
    step = region.steps[index]
    if step.regions or list(step.operands).count(arg_slot) != 1 or result_slot not in step.results:
        return False
    if _fold_accumulation(region, index, arg_slot):
        return True
    replacement = _in_place_form(step, step.operands.index(arg_slot), step.results.index(result_slot))
    if replacement is None:
        return False
    region.steps[index] = replacement
    region.runners = None
    return True


def _in_place_form(step: Step, operand: int, result: int) -> Step | None:
    """`step` writing its operand `operand` in place as its result `result`:
    a dynamic_update_slice of it, or a call of a function that is one."""
    if step.kernel is slicing.dynamic_update_slice and operand == 0 and result == 0:
        return dataclasses.replace(step, kernel=dynamic_update_slice_in_place)
    if step.kernel is core.call and step.op.module is not None:
        callee = step.op.module.function(step.op.attrs["callee"])
        clone = _clone(callee)
        if _rewrite_single_update(clone.body, clone.body.arg_slots[operand],
                                  clone.body.result_slots[result]):
            return dataclasses.replace(step, kernel=_calling(clone))
    return None


def _fold_accumulation(region: RegionPlan, index: int, accumulator: int) -> bool:
    """If step `index` is `add(accumulator, p)` (either order) where `p` is
    the matrix product computed by the step just before it and read by
    nothing else, replace the two by one step adding the product into the
    accumulator's buffer, and return True."""
    add = region.steps[index]
    if index == 0 or direct_kernels.exact_function(add) is not np.add:
        return False
    position = add.operands.index(accumulator)
    if add.op.operand_types[position] != add.op.result_type:
        return False
    product = region.steps[index - 1]
    dims = dots.product_dimensions(product)
    term = add.operands[1 - position]
    if dims is None or product.results != (term,) or count_uses(region).get(term) != 1:
        return False
    if product.op.result_type != add.op.result_type:
        return False
    info = OpInfo(product.op.name, product.op.location, {"product_dimensions": dims},
                  (add.op.result_type, *product.op.operand_types), add.op.result_types,
                  product.op.module)
    region.steps[index - 1:index + 1] = [
        Step(kernel=add_product_in_place, op=info, operands=(accumulator, *product.operands),
             results=add.results)]
    region.runners = None
    return True


def add_product_in_place(op, accumulator, lhs, rhs):
    """Spec "add" of `accumulator` and the "dot_general" of `lhs` and `rhs`,
    written into `accumulator`, which the plan proved nobody else reads
    (module docstring): `blas.matmul_add`, the bits of the add after the
    product."""
    a, b, shape = matrix_operands(lhs, rhs, *op.attrs["product_dimensions"])
    with np.errstate(all="ignore"):
        if accumulator.shape == (a.shape[0], b.shape[1]):
            return blas.matmul_add(a, b, accumulator)
        return np.add(accumulator, blas.matmul(a, b).reshape(shape), out=accumulator)


def _clone(function: FunctionPlan) -> FunctionPlan:
    """A copy of `function` whose steps can be replaced without touching it."""
    body = dataclasses.replace(function.body, steps=list(function.body.steps), runners=None)
    return dataclasses.replace(function, body=body)


def _calling(function: FunctionPlan):
    """`func.call` of this call site's own (in-place) copy of the callee."""
    def call_in_place(op, *operands):
        results = function.run(list(operands))
        return results[0] if len(results) == 1 else tuple(results)
    return call_in_place
