"""`python -m benchmarks.products`: how each way of running a matrix product
fares on this machine, for the shapes of W2, W4 and W5.

For each shape, in one process with OpenBLAS on one thread (as pjrt-ref
sets it), the candidates of interpreter/native/product_strategy.py are timed
in turns: one np.matmul call; the shape's blocks (blas.product_blocks)
computed by this thread alone; the blocks shared with the C pool's
threads; and one np.matmul call on OpenBLAS's own threads (all usable
CPUs). Then the strategy pjrt-ref's probe picks for the shape, measured
afresh (no cache). Times are the median and best of the rounds, in µs.

    python -m benchmarks.products [--rounds 200] [--json FILE]

Run it on a quiet machine: the candidates that use a second CPU suffer
most from other work.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from . import machine
from pjrt_ref.interpreter.native import blas, openblas_threads, product_strategy

# (name, rows, inner, columns): W2's product, W4's forward and weight-
# gradient products, W5's second convolution as im2col (8*32*32 x 3*3*16).
SHAPES = [("W2", 256, 256, 256), ("W4 forward", 128, 784, 512),
          ("W4 gradient", 784, 128, 512), ("W4 hidden", 128, 512, 512),
          ("W5 conv", 8192, 144, 32)]


def candidates(a: np.ndarray, b: np.ndarray) -> dict:
    engine = blas.engine()
    blocks = blas.product_blocks(a.shape[0], a.shape[1], b.shape[1])
    call = engine.gemm_call(a, b)
    cpus = product_strategy.usable_cpus()
    found = {"one call": lambda: np.matmul(a, b)}
    if blocks.count > 1:
        found["blocks, one thread"] = lambda: engine.compute_blocks(a, b, blocks, call, 0)
        if cpus > 1:
            helpers = min(blocks.count, cpus) - 1
            found["blocks, C pool"] = lambda: engine.compute_blocks(a, b, blocks, call, helpers)
    if cpus > 1 and openblas_threads.thread_local_setter() is not None:
        found[f"OpenBLAS, {cpus} threads"] = lambda: engine.openblas.threaded_matmul(a, b, cpus)
    return found


def time_in_turns(runs: dict, rounds: int) -> dict:
    for run in runs.values():
        run()
    samples: dict = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    return {name: {"median_us": round(statistics.median(s) * 1e6, 1),
                   "best_us": round(min(s) * 1e6, 1)} for name, s in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.products", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)

    blas.limit_blas_threads()
    engine = blas.engine()
    info = machine.describe()
    print(f"machine: {machine.summary(info)}\n")
    rng = np.random.default_rng(0)
    report = {"machine_info": info, "rounds": args.rounds, "shapes": []}
    for name, rows, inner, columns in SHAPES:
        a = rng.standard_normal((rows, inner), dtype=np.float32)
        b = rng.standard_normal((inner, columns), dtype=np.float32)
        blocks = blas.product_blocks(rows, inner, columns)
        times = time_in_turns(candidates(a, b), args.rounds)
        strategy = engine.strategies.measure(a, b, blocks, engine.gemm_call(a, b) is not None)
        entry = {"name": name, "shape": [rows, inner, columns], "blocks": blocks._asdict(),
                 "exact": blas.blocks_are_exact(a, b), "times": times,
                 "probe": None if strategy is None else strategy.__dict__}
        report["shapes"].append(entry)
        axis = "rows" if blocks.axis == blas.ROW_BLOCKS else "columns"
        print(f"{name}: {rows}x{inner} @ {inner}x{columns}, {blocks.count} block(s) of {axis}, "
              f"blocks {'equal' if entry['exact'] else 'differ from'} one call's bits")
        for candidate, t in times.items():
            print(f"  {candidate:24s} median {t['median_us']:9.1f}  best {t['best_us']:9.1f}")
        print(f"  probe: {'machine busy, no verdict' if strategy is None else strategy}\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
