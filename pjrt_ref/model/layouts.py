"""Memory layouts: the order in which a buffer's elements lie in memory.

XLA describes a dense layout by `minor_to_major`, the dimensions from the
one that varies fastest in memory to the one that varies slowest; `{1,0}`
(XLA's text) is row-major for rank 2, every buffer's default here as on
XLA's CPU client. A framework may ask for another one (JAX's
`jax.experimental.layout.Layout(major_to_minor=...)`, through
`PJRT_Client_BufferFromHostBuffer`'s device layout or the
`mhlo.layout_mode` of an entry parameter or result), and then reads it back
(`PJRT_Buffer_GetMemoryLayout`, the Layouts extension).

A layout never changes a value: ops see logical arrays, and numpy reads any
strides. pjrt-ref stores a buffer in the layout it reports, so what a
caller reads as raw bytes (`PJRT_Buffer_CopyRawToHost`, a bitcast) is in
that order, as on XLA. Tiled layouts (XLA TPU's) are not dense: refused
where they are asked for.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import InvalidArgument

MinorToMajor = tuple[int, ...]


def row_major(rank: int) -> MinorToMajor:
    """XLA's default (descending) layout of rank `rank`: the last dimension varies fastest."""
    return tuple(range(rank - 1, -1, -1))


def checked(minor_to_major, rank: int) -> MinorToMajor:
    """`minor_to_major` as a tuple, if it is a permutation of the `rank` dimensions."""
    order = tuple(int(d) for d in minor_to_major)
    if sorted(order) != list(range(rank)):
        raise InvalidArgument(f"layout minor_to_major {list(order)} is not a permutation of the "
                              f"{rank} dimension(s)")
    return order


def from_layout_mode(text: str | None, rank: int) -> MinorToMajor:
    """The layout an entry parameter's or result's `mhlo.layout_mode` asks for.

    "default", "auto" (the compiler's choice: pjrt-ref's is the default) or
    no attribute give row-major; otherwise XLA's text of a dense layout,
    `{1,0}`, is parsed. A tiled layout (`{1,0:T(8,128)}`) is INVALID_ARGUMENT."""
    if text is None or text in ("default", "auto"):
        return row_major(rank)
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")) or ":" in body:
        raise InvalidArgument(f"mhlo.layout_mode = {text!r}: pjrt-ref takes \"default\", \"auto\" or "
                              "a dense layout such as \"{1,0}\"")
    inner = body[1:-1].strip()
    try:
        order = [int(d) for d in inner.split(",")] if inner else []
    except ValueError:
        raise InvalidArgument(f"mhlo.layout_mode = {text!r} is not a list of dimensions") from None
    return checked(order, rank)


def transposed(minor_to_major: MinorToMajor, permutation: tuple[int, ...]) -> MinorToMajor:
    """The layout of `transpose(x, permutation)` (result dim j = x's dim
    permutation[j]) whose memory order is `x`'s, x being in `minor_to_major`:
    the transpose moves no element."""
    result_dim_of = {source: j for j, source in enumerate(permutation)}
    return tuple(result_dim_of[d] for d in minor_to_major)


def text(minor_to_major: MinorToMajor) -> str:
    """XLA's text of a dense layout (`Layout::ToString`): `{1,0}`."""
    return "{" + ",".join(str(d) for d in minor_to_major) + "}"


def stored_in(array: np.ndarray, minor_to_major: MinorToMajor) -> np.ndarray:
    """`array`'s values, laid out densely with `minor_to_major[0]` varying fastest
    (a view of `array` when it already is, else a copy)."""
    major_to_minor = minor_to_major[::-1]
    physical = np.transpose(array, major_to_minor)
    if not (physical.flags.c_contiguous and physical.flags.aligned):
        physical = physical.copy(order="C")
    return np.transpose(physical, np.argsort(major_to_minor))


def physical(array: np.ndarray) -> np.ndarray:
    """`array` with its dimensions in memory order (major first), C-contiguous:
    a view when `array` is dense in some order, else a row-major copy."""
    order = sorted(range(array.ndim), key=lambda d: -abs(array.strides[d]))
    view = np.transpose(array, order)
    return view if view.flags.c_contiguous else np.ascontiguousarray(array)
