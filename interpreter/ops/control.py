"""Control flow: while, if, case, optimization_barrier.

Spec sections "while", "if", "case" and "optimization_barrier"
(docs/spec.md). Regions arrive as callables bound to the running frame
(`region(*args) -> list`), so a body sees the values it captures from the
enclosing function without them being passed explicitly.

Values are never copied: kernels treat their operands as immutable, so a
loop-carried value that a body returns unchanged is simply the same array.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.limits import loop_limit_error, max_steps
from pjrt_ref.interpreter.registry import register


def as_results(op, values):
    """A kernel's return value: one value for one result, else a tuple."""
    values = tuple(values)
    return values[0] if len(op.result_types) == 1 else values


def is_true(predicate) -> bool:
    """The Python truth of a 0-d `tensor<i1>` (what cond regions return)."""
    return bool(np.asarray(predicate).reshape(()))


@register("stablehlo.while")
def while_(op, *operands, regions):
    """Spec "while": run `body` while `cond` returns true (0 or more times).

    `cond` and `body` receive the loop-carried values as block arguments;
    `body` returns the next ones. With no iteration the results are the
    operands themselves. Tokens and tuples are carried like any other value.
    With PJRT_REF_MAX_STEPS=N, a loop still running after N iterations is
    RESOURCE_EXHAUSTED naming this op (pjrt_ref/limits.py).
    """
    cond, body = regions
    values = list(operands)
    limit = max_steps()
    iterations = 0
    while is_true(cond(*values)[0]):
        if limit is not None and iterations >= limit:
            raise loop_limit_error(op.name, op.location, iterations)
        values = body(*values)
        iterations += 1
    return as_results(op, values)


@register("stablehlo.if")
def if_(op, pred, *, regions):
    """Spec "if": run `true_branch` if `pred` is true, else `false_branch`.

    Neither branch takes arguments; both return values of the result types.
    """
    true_branch, false_branch = regions
    branch = true_branch if is_true(pred) else false_branch
    return as_results(op, branch())


def selected_branch_index(index, num_branches: int) -> int:
    """Spec "case": `index` if `0 <= index < num_branches`, else the last."""
    index = int(np.asarray(index).reshape(()))
    return index if 0 <= index < num_branches else num_branches - 1


@register("stablehlo.case")
def case(op, index, *, regions):
    """Spec "case": run exactly one of `branches`, chosen by `index`.

    An out-of-range `index` (negative or >= the number of branches) selects
    the last branch, as the spec requires.
    """
    branch = regions[selected_branch_index(index, len(regions))]
    return as_results(op, branch())


@register("stablehlo.optimization_barrier")
def optimization_barrier(op, *operands):
    """Spec "optimization_barrier": the identity on all its operands.

    It only constrains compiler reordering, which an interpreter that runs
    ops in program order never does.
    """
    return as_results(op, operands)
