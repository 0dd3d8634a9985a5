"""Plan-time rewrite: an elementwise step writes its result into a matrix
product's array when nothing else reads that product.

A product's kernel always returns an array it has just allocated (BLAS
writes into new memory, dots.py's transposed product too), and a value read
by one step only is dead after it. So when the one reader is a plain
elementwise step (direct_kernels.EXACT_OPS: add, subtract, multiply...) of the
product's type and shape, it can give numpy that array as `out=` instead of
allocating another: one pass over fresh memory less. The typical case is a
scan's gradient accumulator, `dW + x^T . dy` per step (W9 spends two such
adds of 256x1024 per step; numbers in benchmarks/README.md, W9).

Which step reads a value, and how often, is counted over the region and the
regions nested in it (`fusion.count_uses`, which counts the region's
results as reads too), so a product that is returned, read by a loop body
or read twice keeps its own array. Same ufunc, same operands: the bits are
those of the unrewritten step.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pjrt_ref.interpreter.steps import RegionPlan, Step
from pjrt_ref.interpreter.optimiser import direct_kernels, dots
from pjrt_ref.interpreter.optimiser.fusion import count_uses


def write_into_dead_products(region: RegionPlan) -> None:
    """Rewrite the steps described above in `region` and, separately, in
    every region nested in it."""
    uses = count_uses(region)
    products = {step.results[0] for step in region.steps if _returns_new_matrix(step)}
    for index, step in enumerate(region.steps):
        for nested in step.regions:
            write_into_dead_products(nested)
        function = direct_kernels.exact_function(step)
        if function is None:
            continue
        for position, slot in enumerate(step.operands):
            if slot in products and uses.get(slot) == 1 and _same_type(step, position):
                # A new Step: the old one may be kept elsewhere (fusion's unfused_steps).
                region.steps[index] = dataclasses.replace(step, kernel=_into_operand(function, position))
                region.runners = None
                break


def _returns_new_matrix(step: Step) -> bool:
    """A 2-d f32/f64 product (ops/dot.py `matrix_product`, alone or as
    dots.py's transposed product): its kernel returns newly allocated memory."""
    return dots.product_dimensions(step) is not None


def _same_type(step: Step, position: int) -> bool:
    return step.op.operand_types[position] == step.op.result_type


def _into_operand(function, position: int):
    """A kernel applying `function` with the operand at `position` as `out`.
    An operand numpy cannot write (not expected of a product) gets a new array."""
    def kernel(op, *operands):
        target = operands[position]
        if not target.flags.writeable:
            return np.asarray(function(*operands))
        return function(*operands, out=target)
    kernel.writes_into_operand = position
    return kernel
