"""Parts to build product engines from in tests (interpreter/native/products.py,
`blas.build_engine`): a strategy decided by the test, a C pool or Python
threads that record what they are handed, and bit probes with answers
given. A test builds the engine it needs instead of patching blas.py."""
from __future__ import annotations

import contextlib
from typing import Iterator

from pjrt_ref.interpreter.native import blas, gemm_pool
from pjrt_ref.interpreter.native.gemm_pool import GemmPool
from pjrt_ref.interpreter.native.helper_threads import run_shared
from pjrt_ref.interpreter.native.product_probes import ExactnessProbes
from pjrt_ref.interpreter.native.product_strategy import DEFAULT, Strategy


@contextlib.contextmanager
def cpus_said_idle(count: int) -> Iterator[blas.ProductEngine]:
    """The process's products, and fused loops (threads.py asks the same
    engine), see `count` CPUs idle while the `with` block runs, whatever
    the machine's load."""
    with blas.engine_in_use(blas.build_engine(idle_cpus=lambda: count)) as engine:
        yield engine


class FixedStrategy:
    """In place of an engine's ShapeStrategies: every shape runs `strategy`,
    what the timing probe (product_strategy.py) might decide, decided here."""

    def __init__(self, strategy: Strategy = DEFAULT):
        self.strategy = strategy

    def for_product(self, a, b, blocks, call) -> Strategy:
        return self.strategy


def c_pool() -> GemmPool:
    """The C pool, which every test machine builds."""
    pool = gemm_pool.load()
    assert pool is not None, "the C pool (interpreter/native/gemm_pool.c) was not built"
    return pool


class RecordingPool(GemmPool):
    """The C pool, recording each product handed to it: (block count,
    helpers) in `entries`, whether it adds into its output in `accumulated`."""

    def __init__(self, pool: GemmPool):
        super().__init__(pool.lib, pool.gemms)
        self.entries: list[tuple[int, int]] = []
        self.accumulated: list[bool] = []

    def multiply(self, call, out, blocks, helpers, accumulate=False) -> bool:
        self.entries.append((blocks.count, helpers))
        self.accumulated.append(accumulate)
        return super().multiply(call, out, blocks, helpers, accumulate)


class RecordingThreads:
    """Python threads (helper_threads.run_shared) for an engine's blocks,
    recording (jobs, helpers) of each product in `entries`."""

    def __init__(self):
        self.entries: list[tuple[int, int]] = []

    def __call__(self, jobs: list, helpers: int) -> None:
        self.entries.append((len(jobs), helpers))
        run_shared(jobs, helpers)


class GivenAnswers(ExactnessProbes):
    """An engine's bit probes with some answers given, by method name
    (`blocks_exact=True`), instead of probed; `asked` records the
    arguments of every question answered so."""

    def __init__(self, engine, **answers: bool):
        super().__init__(engine)
        self.answers = answers
        self.asked: list[tuple[str, tuple]] = []

    def _answer(self, name: str, args: tuple, probe) -> bool:
        if name not in self.answers:
            return probe(*args)
        self.asked.append((name, args))
        return self.answers[name]

    def blocks_exact(self, *args) -> bool:
        return self._answer("blocks_exact", args, super().blocks_exact)

    def accumulate_exact(self, *args) -> bool:
        return self._answer("accumulate_exact", args, super().accumulate_exact)

    def layouts_agree(self, *args) -> bool:
        return self._answer("layouts_agree", args, super().layouts_agree)

    def same_bits(self, *args) -> bool:
        return self._answer("same_bits", args, super().same_bits)
