"""W0, time to first result: one fresh process of a user's script.

    python -m benchmarks.first_result WORKLOAD

imports JAX, picks the backend (JAX_PLATFORMS, set by the parent), builds the
workload's inputs, runs `jax.jit(f)(*args)` once, waits for the result and
prints READY. The parent (cli.py, `first_results`) times the process from
its start to that line: everything a user's `python script.py`, a test
worker or a notebook's first cell waits for, the interpreter's own start
included.
"""
from __future__ import annotations

import sys

from .workloads import WORKLOADS


def main(name: str) -> None:
    import jax

    fn, args = WORKLOADS[name].build()
    jax.block_until_ready(jax.jit(fn)(*args))
    print("READY", jax.devices()[0].platform, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
