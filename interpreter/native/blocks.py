"""Cutting a matrix product into blocks, from its shape alone: no state, no
threads, no BLAS.

Blocks (`product_blocks`): rows or columns of the result, from the shape
alone, each one single-threaded gemm call. So a product has its blocks'
bits whichever threads compute them. These may differ from one np.matmul
call's (a kernel may sum at a block's edge in another order); where a
shape's blocks equal one call (`blas.blocks_are_exact`), a product with no
helper is that one call. The exception: a shape the timing gave to
OpenBLAS's own threads is one threaded call, whose bits depend on the
number of CPUs it uses. Which rewrites keep the bits: optimiser/__init__.py,
"Bits".

`fine_blocks` cuts the same axis finer, for OpenBLAS's small-product
kernels; product_strategy.py times whether that pays, and uses it only
where it gives the blocks' bits. Who computes the blocks: products.py.
"""
from __future__ import annotations

from typing import NamedTuple

ROW_BLOCKS, COLUMN_BLOCKS = 0, 1
# Products with fewer multiply-adds than this are one block: handing a
# block to another thread costs about as much as 2**21 multiply-adds. From
# here on a product has at least two blocks (an LSTM step's 32x256 @
# 256x1024, 2**23: 270 us on one core, 170 to 200 on two).
SPLIT_MIN_MULTIPLY_ADDS = 1 << 22
# About this much work per block beyond two (W2's 256x256 product: two blocks).
BLOCK_MULTIPLY_ADDS = 1 << 23
# Blocks are at least this many rows or columns long (narrower ones make
# BLAS's kernels slow), and the other side of the result at least
# MIN_OTHER_SIDE (a thinner product is a matrix-vector one, memory-bound).
MIN_BLOCK = 64
MIN_OTHER_SIDE = 16
MAX_BLOCKS = 16


# Fine blocks (`fine_blocks`) have at most this much work each: OpenBLAS's
# kernels for small products, which read the operands in place instead of
# packing them, take products up to about 10^6 multiply-adds (some CPUs'
# kernels only; product_strategy.py times whether they pay).
FINE_BLOCK_MULTIPLY_ADDS = 1 << 19


class Blocks(NamedTuple):
    """How a product is cut: `count` blocks along `axis` (ROW_BLOCKS or
    COLUMN_BLOCKS) of the result, block k covering [n*k//count,
    n*(k+1)//count) of its n rows or columns (gemm_pool.c cuts the same)."""
    axis: int
    count: int

    def ranges(self, rows: int, columns: int) -> list[tuple[int, int]]:
        length = rows if self.axis == ROW_BLOCKS else columns
        return [(length * k // self.count, length * (k + 1) // self.count)
                for k in range(self.count)]


def product_blocks(rows: int, inner: int, columns: int) -> Blocks:
    """The blocks of a rows x inner @ inner x columns product, from its
    shape alone. The longer side of the result is cut (each block then
    re-reads the smaller operand); the count is a power of two (blocks
    share evenly between 2, 4, ... threads), at least two from
    SPLIT_MIN_MULTIPLY_ADDS on and beyond that about BLOCK_MULTIPLY_ADDS
    of work each, at most MAX_BLOCKS."""
    axis = ROW_BLOCKS if rows >= columns else COLUMN_BLOCKS
    work = rows * inner * columns
    if work < SPLIT_MIN_MULTIPLY_ADDS or min(rows, columns) < MIN_OTHER_SIDE:
        return Blocks(axis, 1)
    most = min(MAX_BLOCKS, max(rows, columns) // MIN_BLOCK, max(2, work // BLOCK_MULTIPLY_ADDS))
    return Blocks(axis, 1 << (most.bit_length() - 1) if most >= 1 else 1)


def fine_blocks(rows: int, inner: int, columns: int) -> Blocks:
    """`product_blocks`'s cut made finer: the same axis, the count doubled
    until each block has at most FINE_BLOCK_MULTIPLY_ADDS, at most
    MAX_BLOCKS, none shorter than MIN_OTHER_SIDE. A product of one block
    stays one (it is never split)."""
    blocks = product_blocks(rows, inner, columns)
    if blocks.count == 1:
        return blocks
    length = rows if blocks.axis == ROW_BLOCKS else columns
    count = blocks.count
    while (count < MAX_BLOCKS and rows * inner * columns // count > FINE_BLOCK_MULTIPLY_ADDS
           and length // (2 * count) >= MIN_OTHER_SIDE):
        count *= 2
    return Blocks(blocks.axis, count)
