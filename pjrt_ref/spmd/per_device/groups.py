"""Which devices talk to each other when a value changes layout.

A `Layout` says which tile of a global array each device holds. Moving a
value from one layout to another needs only two kinds of step, and both are
decided here, device by device, from the layouts alone:

- *Gathering* dimension d: the devices that hold the same tiles on every
  other dimension each bring their tile along d; an `all_gather` over each
  such group leaves every member with the whole dimension.
- *Summing partial results*: when each device reduced only its own tiles of
  a dimension (a reduce, or a dot_general whose contracted dimensions are
  split), the devices that hold the same result tile but different tiles of
  the reduced dimensions combine their partial values with an `all_reduce`.

Devices that hold the same tile (replicas) are paired off in device order,
so that each group holds every tile exactly once (the spec's replica groups
must partition the devices: StableHLO `all_gather` and `all_reduce`,
"replica_groups" with `use_global_device_ids`).
"""
from __future__ import annotations

from pjrt_ref.spmd.layout import Layout


class NoGroups(Exception):
    """The layout is not a regular tiling along the dimensions asked for."""


def groups_over(layout: Layout, dims: tuple[int, ...], devices: list[int]) -> list[list[int]]:
    """Groups of devices holding the same tiles outside `dims` and together
    every tile inside `dims` once, ordered by their tile index along `dims`
    (major to minor): the replica groups of a collective over `dims`."""
    by_key: dict = {}
    for device in devices:
        tile = layout.tile_of[device]
        outside = tuple(t for d, t in enumerate(tile) if d not in dims)
        inside = tuple(tile[d] for d in dims)
        by_key.setdefault(outside, {}).setdefault(inside, []).append(device)
    size = 1
    for d in dims:
        size *= layout.tile_counts[d]
    groups = []
    for holders in by_key.values():
        if len(holders) != size or len({len(h) for h in holders.values()}) != 1:
            raise NoGroups(f"devices do not hold every tile of dims {list(dims)} equally often")
        ordered = [holders[index] for index in sorted(holders)]
        for replica in range(len(ordered[0])):
            groups.append([members[replica] for members in ordered])
    return sorted(groups)


def with_partial(layout: Layout, partial_of: dict | None) -> Layout:
    """`layout`'s tiles holding partial sums over `partial_of` (None: whole values)."""
    return Layout(layout.tile_counts, layout.tile_of, partial_of)


def tiles_only(layout: Layout) -> Layout:
    """`layout`'s tiles with whole values: what adding up its partial sums leaves."""
    return with_partial(layout, None)


def partial_groups(layout: Layout, devices: list[int]) -> list[list[int]]:
    """Groups of devices holding the same tile and together every partial sum of
    an unreduced value once: the replica groups of the all_reduce that adds them."""
    partial = layout.partial_of
    axes = len(next(iter(partial.values())))
    counts = tuple(1 + max(partial[d][k] for d in devices) for k in range(axes))
    extended = Layout(layout.tile_counts + counts,
                      {d: layout.tile_of[d] + tuple(partial[d]) for d in devices})
    rank = len(layout.tile_counts)
    return groups_over(extended, tuple(range(rank, rank + axes)), devices)


def without_dims(layout: Layout, dims: tuple[int, ...]) -> Layout:
    """`layout` after its `dims` are gathered: whole along them."""
    counts = tuple(1 if d in dims else c for d, c in enumerate(layout.tile_counts))
    return Layout(counts, {device: tuple(0 if d in dims else t for d, t in enumerate(tile))
                           for device, tile in layout.tile_of.items()})


def kept_dims(layout: Layout, kept: list[int]) -> Layout:
    """The layout of a value made of `layout`'s dimensions `kept`, in order
    (a reduce's result: the dimensions it does not reduce)."""
    return Layout(tuple(layout.tile_counts[d] for d in kept),
                  {device: tuple(tile[d] for d in kept) for device, tile in layout.tile_of.items()})


def same_split(a: Layout, dim_a: int, b: Layout, dim_b: int) -> bool:
    """Whether every device holds the same tile of `a`'s dim `dim_a` as of `b`'s `dim_b`."""
    return (a.tile_counts[dim_a] == b.tile_counts[dim_b]
            and all(a.tile_of[d][dim_a] == b.tile_of[d][dim_b] for d in a.tile_of))


def is_split(layout: Layout) -> bool:
    """Whether some dimension is split."""
    return any(count > 1 for count in layout.tile_counts)
