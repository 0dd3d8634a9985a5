"""What a product engine (products.py) finds out on random operands of a
shape and layout before it trusts a way of computing a product: how the
shape runs fastest (`ShapeStrategies`, the timing probe; its candidates'
rules and the file that keeps its verdicts per machine are
product_strategy.py), and whether two ways of computing it give the same
bits (`ExactnessProbes`).

BLAS's sequence of floating-point operations depends on the shapes, types
and layouts only, never on the values, so one check on random operands of
a shape and layout answers for all operands: each answer is kept per shape
and layout (`shape_key`), for the life of the engine. The probes compute
with the engine's own code (its C pool or its Python threads), the code
that computes the real products.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

from pjrt_ref.interpreter.native import product_strategy
from pjrt_ref.interpreter.native.blocks import Blocks, fine_blocks, product_blocks
from pjrt_ref.interpreter.native.openblas_threads import thread_local_setter

if TYPE_CHECKING:
    from pjrt_ref.interpreter.native.products import ProductEngine


def layout(x: np.ndarray) -> str:
    """How BLAS reads a 2-d operand: rows contiguous, columns contiguous
    (a transposed view), or neither (numpy copies it first)."""
    if x.strides[1] == x.itemsize:
        return "rows"
    if x.strides[0] == x.itemsize:
        return "columns"
    return "copied"


def shape_key(a: np.ndarray, b: np.ndarray, call: tuple | None) -> str:
    """What a strategy is kept under: dtype, sizes, layouts and which
    helpers (C pool or Python threads) would compute the blocks."""
    (rows, inner), columns = a.shape, b.shape[1]
    helpers = "c" if call is not None else "python"
    return f"{a.dtype.name} {rows}x{inner}x{columns} {layout(a)},{layout(b)} {helpers}"


def random_like(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random values in `x`'s shape, dtype and layout (`layout`)."""
    kind = layout(x)
    if kind == "copied":
        wide = rng.standard_normal((x.shape[0], 2 * x.shape[1])).astype(x.dtype)
        return wide[:, ::2]
    values = rng.standard_normal(x.shape).astype(x.dtype)
    return np.asfortranarray(values) if kind == "columns" else values


def _random_operands(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Random operands like `a` and `b`, the same for every probe of a shape."""
    rng = np.random.default_rng(0)
    return random_like(a, rng), random_like(b, rng)


class ShapeStrategies:
    """The strategy (product_strategy.Strategy) of each shape `engine` meets:
    kept in this process (`known`, by `shape_key`), else read from the
    machine's file, else timed now (`measure`) and written there."""

    def __init__(self, engine: ProductEngine):
        self.engine = engine
        self.known: dict[str, product_strategy.Strategy] = {}
        self._probe_lock = threading.Lock()

    def for_product(self, a: np.ndarray, b: np.ndarray, blocks: Blocks,
                    call: tuple | None) -> product_strategy.Strategy:
        key = shape_key(a, b, call)
        known = self.known.get(key)
        if known is None:
            known = self.known[key] = self._find(key, a, b, blocks, call is not None)
        return known

    def _find(self, key: str, a: np.ndarray, b: np.ndarray, blocks: Blocks,
              in_c: bool) -> product_strategy.Strategy:
        """The strategy on disk, or measured now (and written); DEFAULT when
        timing is off, another thread is timing, or the machine is busy."""
        if not product_strategy.probe_enabled():
            return product_strategy.DEFAULT
        known = product_strategy.lookup(key)
        if known is not None:
            return known
        if not self._probe_lock.acquire(blocking=False):
            return product_strategy.DEFAULT
        try:
            measured = self.measure(a, b, blocks, in_c)
        finally:
            self._probe_lock.release()
        if measured is None:
            return product_strategy.DEFAULT
        product_strategy.remember(key, measured)
        return measured

    def measure(self, a: np.ndarray, b: np.ndarray, blocks: Blocks,
                in_c: bool) -> product_strategy.Strategy | None:
        """Time the candidates (product_strategy.py) on random operands with
        `a` and `b`'s shapes and layouts; None if the machine was too busy."""
        engine = self.engine
        probe_a, probe_b = _random_operands(a, b)
        call = engine.gemm_call(probe_a, probe_b) if in_c else None
        exact = engine.exactness.blocks_exact(probe_a, probe_b, blocks, call)

        def serial() -> None:
            if exact:
                np.matmul(probe_a, probe_b)
            else:
                engine.compute_blocks(probe_a, probe_b, blocks, call, helpers=0)

        if product_strategy.serial_seconds(serial) > product_strategy.MAX_PROBED_SECONDS:
            return product_strategy.DEFAULT
        cpus = product_strategy.usable_cpus()
        ours = {"serial": serial}
        helpers = min(blocks.count - 1, cpus - 1)
        if helpers > 0:
            ours["split"] = lambda: engine.compute_blocks(probe_a, probe_b, blocks, call, helpers)
        fine = fine_blocks(a.shape[0], a.shape[1], b.shape[1])
        if fine.count > blocks.count and engine.exactness.same_bits(probe_a, probe_b, blocks, fine, call):
            fine_helpers = min(fine.count - 1, cpus - 1)
            ours["fine"] = lambda: engine.compute_blocks(probe_a, probe_b, fine, call, fine_helpers)
        threaded = None
        if cpus > 1 and thread_local_setter() is not None:
            threaded = lambda: engine.openblas.threaded_matmul(probe_a, probe_b, cpus)  # noqa: E731
        needed = min(blocks.count, cpus) - 1
        times = product_strategy.measure(ours, threaded, quiet=lambda: engine.idle_cpus() >= needed)
        return None if times is None else product_strategy.decide(times, cpus)


class ExactnessProbes:
    """Whether two ways `engine` may compute a product give the same bits,
    for operands of a shape and layout (module docstring): the blocks
    against one np.matmul call, gemm adding into the result against the add
    after it, an operand's row-major copy against the operand itself, and
    one cut against another."""

    def __init__(self, engine: ProductEngine):
        self.engine = engine
        self._blocks_exact: dict = {}
        self._accumulate_exact: dict = {}
        self._layouts_agree: dict = {}

    def blocks_are_exact(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether the blocks of `a @ b` (`product_blocks`) give the bits of one
        np.matmul call. BLAS's sequence of floating-point operations depends on
        the shapes, types and layouts only, never on the values, so one check
        on random operands of that shape and layout answers for all operands;
        the answer is kept per shape and layout. The blocks are computed by the
        path that computes the real ones: the C pool's code or np.matmul per
        block."""
        blocks = product_blocks(a.shape[0], a.shape[1], b.shape[1])
        return self.blocks_exact(a, b, blocks, self.engine.gemm_call(a, b))

    def blocks_exact(self, a: np.ndarray, b: np.ndarray, blocks: Blocks, call: tuple | None) -> bool:
        """`blocks_are_exact` for `blocks`, computed as `call` says (the C
        pool, or Python threads when None)."""
        key = (shape_key(a, b, call), blocks)
        exact = self._blocks_exact.get(key)
        if exact is None:
            probe_a, probe_b = _random_operands(a, b)
            probe_call = self.engine.gemm_call(probe_a, probe_b) if call is not None else None
            with np.errstate(all="ignore"):
                whole = np.matmul(probe_a, probe_b)
                split = self.engine.compute_blocks(probe_a, probe_b, blocks, probe_call, helpers=0)
            exact = self._blocks_exact[key] = bool(np.array_equal(whole, split))
        return exact

    def accumulate_is_exact(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether `matmul_add`'s gemm with beta = 1 gives the bits of adding
        `a @ b`'s blocks to `c` afterwards, for operands of this shape and
        layout. It does when gemm sums each element's products in registers and
        adds `c` once at the end; a kernel that adds partial sums to `c` (a
        long inner dimension cut into panels) or rounds `c * beta` apart does
        not. Decided as `blocks_are_exact` is: on random operands, once per
        shape and layout, by the C pool's own code."""
        call = self.engine.gemm_call(a, b)
        if call is None:
            return False
        return self.accumulate_exact(a, b, product_blocks(a.shape[0], a.shape[1], b.shape[1]), call)

    def accumulate_exact(self, a: np.ndarray, b: np.ndarray, blocks: Blocks, call: tuple) -> bool:
        """`accumulate_is_exact` for `blocks`, on the C pool (`call`)."""
        key = (shape_key(a, b, call), blocks)
        exact = self._accumulate_exact.get(key)
        if exact is None:
            rng = np.random.default_rng(0)
            probe_a, probe_b = random_like(a, rng), random_like(b, rng)
            start = rng.standard_normal((a.shape[0], b.shape[1])).astype(a.dtype)
            probe_call = self.engine.gemm_call(probe_a, probe_b)
            accumulated = start.copy()
            with np.errstate(all="ignore"):
                added = np.add(start, self.engine.compute_blocks(probe_a, probe_b, blocks, probe_call,
                                                                 helpers=0))
                done = self.engine.pool.multiply(probe_call, accumulated, blocks, helpers=0,
                                                 accumulate=True)
            exact = self._accumulate_exact[key] = done and bool(np.array_equal(added, accumulated))
        return exact

    def layouts_agree(self, a: np.ndarray, b: np.ndarray, copy: np.ndarray, position: int) -> bool:
        """Whether `matmul` gives the same bits with operand `position` (0: `a`,
        1: `b`) replaced by `copy`, the same matrix row-major, for operands of
        these shapes and layouts (optimiser/invariant_layouts.py). Checked once per
        shape and layout on random operands, as `blocks_are_exact` is; both
        products take their own strategy, as the real ones do."""
        key = (a.dtype.str, a.shape, b.shape, layout(a), layout(b), position)
        agree = self._layouts_agree.get(key)
        if agree is None:
            probe = list(_random_operands(a, b))
            with np.errstate(all="ignore"):
                original = self.engine.matmul(*probe)
                probe[position] = np.ascontiguousarray(probe[position])
                agree = self._layouts_agree[key] = bool(np.array_equal(original,
                                                                       self.engine.matmul(*probe)))
        return agree

    def same_bits(self, a: np.ndarray, b: np.ndarray, blocks: Blocks, other: Blocks,
                  call: tuple | None) -> bool:
        """Whether `a @ b` computed as `blocks` and as `other` gives the same
        bits, on these (random) operands: as for `blocks_are_exact`, BLAS's
        order of operations depends on shapes and layouts only."""
        compute = self.engine.compute_blocks
        with np.errstate(all="ignore"):
            return bool(np.array_equal(compute(a, b, blocks, call, helpers=0),
                                       compute(a, b, other, call, helpers=0)))
