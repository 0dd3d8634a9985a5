"""The C product pool (gemm_pool.c) seen from Python: loading its cffi
module, describing `a @ b` as the gemm call the pool makes, and running
that call as blocks.

The module is built by cffi at install time (build_gemm_pool.py). It runs
the whole product without the GIL, and its threads spin briefly between
products; its design: docs/performance-design.md. It takes numpy's
OpenBLAS's ILP64 cblas gemm functions (gemm_pool.h declares 64-bit integer
arguments); where the module or those functions are missing, `load` is
None and products are shared over Python threads instead (products.py).

    PJRT_REF_POOL_SPIN_US=n    how long the C pool's threads spin for the
                               next product before sleeping (default
                               DEFAULT_SPIN_US; 0: sleep at once)
    PJRT_REF_GEMM_POOL=0       Python threads instead of the C pool
"""
from __future__ import annotations

import numpy as np

from pjrt_ref import settings
from pjrt_ref.interpreter.native import openblas
from pjrt_ref.interpreter.native.blocks import Blocks

# How long the C pool's threads spin for the next product before sleeping.
# Long enough to bridge the gap between back-to-back calls (W2 through JAX)
# and most gaps between the products of a training step (W4), short enough
# that an idle plugin gives its CPU back at once (benchmarks/README.md).
DEFAULT_SPIN_US = settings.default("PJRT_REF_POOL_SPIN_US")
# CBLAS's transpose flags (cblas.h).
_NO_TRANS, _TRANS = 111, 112

# What this file uses of the C module (gemm_pool.h), and the version of its
# declarations it was written for.
NAMES = ("gemm_pool_multiply", "gemm_pool_spinning", "gemm_pool_workers",
         "GEMM_POOL_MAX_BLOCKS", "GEMM_POOL_COLUMN_BLOCKS", "GEMM_POOL_ABI")
ABI = 2


class GemmPool:
    """The loaded C module and OpenBLAS's ILP64 gemm functions (addresses),
    by dtype."""

    def __init__(self, lib, gemms: dict):
        self.lib = lib
        self.gemms = gemms
        # Most blocks the pool takes in one product (gemm_pool.h).
        self.max_blocks = lib.GEMM_POOL_MAX_BLOCKS

    def spinning(self) -> int:
        """The pool's threads spinning for the next product right now:
        runnable tasks to the kernel, yet ready to give their CPU away."""
        return self.lib.gemm_pool_spinning()

    def call(self, a: np.ndarray, b: np.ndarray) -> tuple | None:
        """gemm_pool_multiply's arguments up to ldb for `a @ b`, or None
        when the pool cannot compute it: pool switched off
        (PJRT_REF_GEMM_POOL=0), other dtypes, byte order or layouts, or `a`
        and `b` the same memory."""
        if not settings.get("PJRT_REF_GEMM_POOL") or a.dtype != b.dtype or a.dtype not in self.gemms:
            return None
        if not a.dtype.isnative:
            return None
        rows, inner = a.shape
        columns = b.shape[1]
        lhs = _operand(a, rows, inner)
        rhs = _operand(b, inner, columns)
        if lhs is None or rhs is None or lhs[0] == rhs[0]:
            return None
        return (self.gemms[a.dtype], int(a.dtype == np.float64), lhs[1], rhs[1], rows, columns,
                inner, lhs[0], lhs[2], rhs[0], rhs[2])

    def multiply(self, call: tuple, out: np.ndarray, blocks: Blocks, helpers: int,
                 accumulate: bool = False) -> bool:
        """Run `call` (`GemmPool.call`) into the C-contiguous `out` as
        `blocks` with up to `helpers` pool threads (0: all on this thread);
        with `accumulate`, add the product to `out` (gemm's beta = 1).
        False if another thread's product has the pool, or the pool refuses
        the block count (nothing done)."""
        lib = self.lib
        axis = (lib.GEMM_POOL_ROW_BLOCKS, lib.GEMM_POOL_COLUMN_BLOCKS)[blocks.axis]
        gemm, is_double, trans_a, trans_b, rows, columns, inner, a, lda, b, ldb = call
        return bool(lib.gemm_pool_multiply(
            gemm, is_double, trans_a, trans_b, rows, columns, inner, a, lda, b, ldb,
            address(out), columns, int(accumulate), axis, blocks.count, helpers, spin_ns()))


def load() -> GemmPool | None:
    """The C pool, or None: module not built, built from an older
    gemm_pool.h (missing names or another GEMM_POOL_ABI: an editable
    install after a pull; `pip install -e .` rebuilds it), or no ILP64
    cblas gemm in numpy's OpenBLAS (gemm_pool.h declares 64-bit integer
    arguments)."""
    try:
        from pjrt_ref.interpreter.native import _gemm_pool
    except ImportError:
        return None
    if not all(hasattr(_gemm_pool.lib, name) for name in NAMES):
        return None
    if _gemm_pool.lib.GEMM_POOL_ABI != ABI:
        return None
    library = openblas.find()
    if library is None or not library.gemms:
        return None
    return GemmPool(_gemm_pool.lib, library.gemms)


def spin_ns() -> int:
    """PJRT_REF_POOL_SPIN_US in nanoseconds, read per product."""
    return settings.get("PJRT_REF_POOL_SPIN_US") * 1000


def address(x: np.ndarray) -> int:
    return x.__array_interface__["data"][0]


def _operand(x: np.ndarray, rows: int, columns: int) -> tuple[int, int, int] | None:
    """(address, CBLAS transpose flag, leading dimension) describing the
    row-major `rows` x `columns` matrix `x` the way a row-major CBLAS call
    takes it, as numpy's own matmul passes it: rows contiguous (NoTrans) or
    columns contiguous (a transposed view: Trans). None when BLAS cannot
    read it in place (numpy would copy it first) or the address is not
    aligned to the element size."""
    size = x.itemsize
    start = address(x)
    row_stride, column_stride = x.strides
    if start % size:
        return None
    if column_stride == size and row_stride % size == 0 and row_stride // size >= max(1, columns):
        return start, _NO_TRANS, row_stride // size
    if row_stride == size and column_stride % size == 0 and column_stride // size >= max(1, rows):
        return start, _TRANS, column_stride // size
    return None
