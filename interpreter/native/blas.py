"""Matrix products on numpy's OpenBLAS: OpenBLAS on one thread, and big
products cut into blocks, fixed by their shape, that several threads
compute. This module is their face to the rest of pjrt-ref (the ops, the
optimiser, the plugin, the benchmarks): each function here asks the
process's `ProductEngine`, built at its first use.

The work is done in:

    openblas_threads.py  OpenBLAS on one thread for the process
                         (`limit_blas_threads`), or on several for one
                         product where the timing found them faster
    blocks.py            the blocks a product's shape cuts it into
    gemm_pool.py         the C pool that computes the blocks without the GIL
    product_strategy.py  how each shape runs best on this machine, timed
                         once and kept on disk; product_probes.py runs that
                         timing and the checks of which ways give the same
                         bits (`blocks_are_exact`, `accumulate_is_exact`,
                         `layouts_agree`)
    products.py          `ProductEngine`: a product computed from those
                         parts (who computes which block, and when not to
                         cut at all)

Tests build engines of their own (`build_engine`, with the part they fake)
and run a program's products on one (`engine_in_use`).

Settings: PJRT_REF_BLAS_THREADS (openblas_threads.py),
PJRT_REF_MATMUL_THREADS (products.py), PJRT_REF_POOL_SPIN_US and
PJRT_REF_GEMM_POOL (gemm_pool.py), PJRT_REF_PRODUCT_PROBE
(product_strategy.py).
"""
from __future__ import annotations

import contextlib
import math
import threading
from typing import Iterator

import numpy as np

from pjrt_ref.interpreter.native import gemm_pool
from pjrt_ref.interpreter.native.blocks import COLUMN_BLOCKS, ROW_BLOCKS, Blocks, fine_blocks, product_blocks
from pjrt_ref.interpreter.native import openblas_threads
from pjrt_ref.interpreter.native.products import ProductEngine, matmul_threads

__all__ = ["COLUMN_BLOCKS", "ROW_BLOCKS", "Blocks", "ProductEngine", "accumulate_is_exact",
           "blas_threads", "blocks_are_exact", "build_engine", "engine", "engine_in_use",
           "fine_blocks", "idle_cpus", "layouts_agree", "limit_blas_threads", "matmul",
           "matmul_add", "matmul_threads", "matrix_operands", "product_blocks"]

# OpenBLAS's threads, one setting for the whole process as OpenBLAS's own is.
_OPENBLAS = openblas_threads.PROCESS
# The process's engine (`engine`), None until the first product.
_ENGINE: ProductEngine | None = None
_BUILDING = threading.Lock()


def limit_blas_threads() -> int | None:
    """Apply PJRT_REF_BLAS_THREADS to this process's OpenBLAS, once
    (`OpenBlasThreads.limit`); the thread count set, or None."""
    return _OPENBLAS.limit()


def blas_threads() -> int | None:
    """OpenBLAS's thread count once `limit_blas_threads` ran (None:
    unknown, or left alone by PJRT_REF_BLAS_THREADS=0)."""
    return _OPENBLAS.threads


def build_engine(**parts) -> ProductEngine:
    """An engine on this process's OpenBLAS threads and on the C pool
    (loaded now; None if it does not load), with `parts` (ProductEngine's
    keyword arguments, `pool` too) in place of the real ones: the
    process's engine has none, a test's the ones it fakes."""
    if "pool" not in parts:
        parts["pool"] = gemm_pool.load()
    return ProductEngine(_OPENBLAS, **parts)


def engine() -> ProductEngine:
    """This process's engine, built at its first use (which loads the C pool)."""
    return _ENGINE or _first_engine()


def _first_engine() -> ProductEngine:
    """Build the process's engine, once however many threads ask at once."""
    global _ENGINE
    with _BUILDING:
        if _ENGINE is None:
            _ENGINE = build_engine()
        return _ENGINE


@contextlib.contextmanager
def engine_in_use(products: ProductEngine) -> Iterator[ProductEngine]:
    """`products` as this process's engine while the `with` block runs, the
    one before it back afterwards: a test's engine computing the products
    of whole programs."""
    global _ENGINE
    previous, _ENGINE = _ENGINE, products
    try:
        yield products
    finally:
        _ENGINE = previous


def matmul(a: np.ndarray, b: np.ndarray, threads: int | None = None) -> np.ndarray:
    """`a @ b` for 2-d arrays, with the bits of its blocks (`ProductEngine.matmul`)."""
    return engine().matmul(a, b, threads)


def matmul_add(a: np.ndarray, b: np.ndarray, c: np.ndarray, threads: int | None = None) -> np.ndarray:
    """`c + a @ b` written into `c` and returned, with the bits of the add
    after `matmul` (`ProductEngine.matmul_add`)."""
    return engine().matmul_add(a, b, c, threads)


def idle_cpus() -> int:
    """CPUs with nothing to run right now (products.IdleCpus): products and
    fused loops (threads.py) wake no more helpers than this."""
    return engine().idle_cpus()


def blocks_are_exact(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the blocks of `a @ b` give the bits of one np.matmul call
    (`ExactnessProbes.blocks_are_exact`)."""
    return engine().exactness.blocks_are_exact(a, b)


def accumulate_is_exact(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether `matmul_add`'s gemm with beta = 1 gives the bits of the add
    after the product (`ExactnessProbes.accumulate_is_exact`)."""
    return engine().exactness.accumulate_is_exact(a, b)


def layouts_agree(a: np.ndarray, b: np.ndarray, copy: np.ndarray, position: int) -> bool:
    """Whether `matmul` gives the same bits with operand `position` replaced
    by its row-major `copy` (`ExactnessProbes.layouts_agree`)."""
    return engine().exactness.layouts_agree(a, b, copy, position)


def matrix_operands(lhs, rhs, lhs_free, rhs_free, lhs_contract, rhs_contract):
    """(a, b, shape): the matrices whose product, reshaped to `shape`, is
    dot_general's result (free dimensions flattened into rows of `a` and
    columns of `b`, contracting ones into the inner dimension)."""
    lhs_free_shape = [lhs.shape[d] for d in lhs_free]
    rhs_free_shape = [rhs.shape[d] for d in rhs_free]
    contract = math.prod([lhs.shape[d] for d in lhs_contract])
    lhs2 = np.transpose(lhs, list(lhs_free) + list(lhs_contract))
    rhs2 = np.transpose(rhs, list(rhs_contract) + list(rhs_free))
    return (lhs2.reshape(math.prod(lhs_free_shape), contract),
            rhs2.reshape(contract, math.prod(rhs_free_shape)), lhs_free_shape + rhs_free_shape)
