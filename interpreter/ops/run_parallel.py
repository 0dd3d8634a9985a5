"""`interpreter.run_parallel`: the reference interpreter's test harness op that
runs a grid of functions, one per process (openxla/stablehlo
`stablehlo/reference/InterpreterOps.td`); the grid is interpreter/process_grid.py.
"""
from __future__ import annotations

from pjrt_ref.errors import InvalidArgument, PjrtRefError
from pjrt_ref.interpreter.process_grid import Process, ProcessGrid, run_processes
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.side_effects import attach_host_channel


def _validate_run_parallel(op) -> None:
    programs = op.attrs.get("programs") or []
    if not programs or not programs[0] or any(len(row) != len(programs[0]) for row in programs):
        raise op.error("`programs` must be a non-empty grid of functions", cls=InvalidArgument)
    missing = [name for row in programs for name in row if name not in op.module.function_names]
    if missing:
        raise op.error(f"no function @{missing[0]} in the program", cls=InvalidArgument)


def _run_with_grid_host(grid: ProcessGrid, function, args: list) -> list:
    """run_parallel's processes use the grid as their host channel (infeed, send/recv)."""
    with attach_host_channel(grid):
        return function.run(args)


@register("interpreter.run_parallel", validate=_validate_run_parallel)
def run_parallel(op, *inputs):
    """`interpreter.run_parallel`: run `programs[r][p]` as process (r, p).

    `inputs` and the results are the processes' arguments and results in
    row-major process order. Each process runs in its own thread.
    """
    programs = op.attrs["programs"]
    grid = ProcessGrid(len(programs), len(programs[0]))
    for name in op.attrs.get("infeed") or []:
        grid.infeed_queue.extend(op.module.function(name).run([]))
    jobs, remaining = [], list(inputs)
    for r, row in enumerate(programs):
        for p, name in enumerate(row):
            function = op.module.function(name)
            count = len(function.input_types)
            jobs.append((Process((r, p), grid), function, remaining[:count]))
            remaining = remaining[count:]
    try:
        outcomes = run_processes(grid, [
            (process, lambda f=function, a=args: _run_with_grid_host(grid, f, a))
            for process, function, args in jobs])
    except PjrtRefError:
        raise
    except Exception as first:
        raise op.error(f"a process failed: {type(first).__name__}: {first}") from first
    results = [value for outcome in outcomes for value in outcome]
    return results[0] if len(op.result_types) == 1 else tuple(results)
