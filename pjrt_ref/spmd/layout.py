"""Shardings as layouts: which tile of a global array each device holds.

A compiled SPMD program describes how each global array is split over the
devices with a *sharding* annotation, in one of two spellings:

- Shardy (what JAX >= 0.7 sends; `jax_use_shardy_partitioner` is on by
  default): a module-level `sdy.mesh @mesh = <["x"=2, "y"=2]>` names the
  axes of a device mesh, and `#sdy.sharding<@mesh, [{"x"}, {}]>` says that
  dimension 0 is split over axis "x" and dimension 1 is whole. A dimension
  split over several axes (`{"x", "y"}`) is split over their product, major
  to minor; a sub-axis `"x":(1)2` is the size-2 factor of "x" whose
  pre-size is 1 (see openxla/shardy `docs/sharding_representation.md`).
  Mesh positions are numbered row-major over the axes and map to device
  ids through `device_ids=[...]` (iota when absent).
- GSPMD (`mhlo.sharding = "{devices=[4,1]<=[4]}"`, XLA's HloSharding text):
  a tile-assignment array of device ids whose shape is the number of tiles
  per dimension, plus trailing sub-group dimensions (`last_tile_dim_replicate`,
  `last_tile_dims={...}`) over which devices hold the same tile;
  `{replicated}` and `{maximal device=N}` give every device the whole array.

Both become one `Layout`: the number of tiles along each dimension and, for
each device (its partition id), the index of the tile it holds. Cutting a
shard out of a global array and putting a global array back together from
shards are then plain slicing, with no knowledge of either spelling.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from pjrt_ref.errors import InvalidArgument, Unimplemented


@dataclass(frozen=True)
class Layout:
    """How an array of any shape with this rank is split into tiles.

    `tile_counts[d]` is the number of equal tiles along dimension d;
    `tile_of[device]` the tile index the device holds. Devices that hold the
    same tile hold the same values (they are replicas of that tile), unless
    the value is *unreduced*: `partial_of[device]` is then the device's
    coordinates on the unreduced mesh axes, and the value is the sum over
    those axes of the devices' partial values (Shardy's `unreduced={"x"}`,
    XLA's `last_tile_dims={unreduced}`: no all-reduce is inserted, each
    device keeps its own partial sum). Only devices with the same partial
    index hold copies of one tile.
    """

    tile_counts: tuple[int, ...]
    tile_of: dict
    partial_of: dict | None = None

    def holders(self, device: int) -> list[int]:
        """The devices whose shards make up `device`'s view of the value:
        every device, or for an unreduced value those holding the same partial sum."""
        if self.partial_of is None:
            return list(self.tile_of)
        return [d for d in self.tile_of if self.partial_of[d] == self.partial_of[device]]

    def transposed(self, permutation: tuple[int, ...]) -> "Layout":
        """The layout of `transpose(value, permutation)` (result dim j is the
        value's dim permutation[j]): each device keeps its tile, transposed."""
        return Layout(tuple(self.tile_counts[p] for p in permutation),
                      {device: tuple(tile[p] for p in permutation) for device, tile in self.tile_of.items()},
                      self.partial_of)

    def split_evenly(self, global_shape: tuple[int, ...]) -> "Layout":
        """This layout with every dimension its tiles do not divide left whole.

        What XLA gives a result whose sharding the compiler chooses: a
        propagated split of 7 rows over 2 devices is dropped from that
        dimension only (a [7, 8] array split ("a", "b") comes out split
        (None, "b")), so every result shard is an equal tile. Devices that
        differed only along a dropped dimension become replicas."""
        uneven = [d for d, (size, count) in enumerate(zip(global_shape, self.tile_counts))
                  if size % count]
        if not uneven:
            return self
        counts = tuple(1 if d in uneven else count for d, count in enumerate(self.tile_counts))
        tile_of = {device: tuple(0 if d in uneven else index for d, index in enumerate(tile))
                   for device, tile in self.tile_of.items()}
        return Layout(counts, tile_of, self.partial_of)

    def shard_shape(self, global_shape: tuple[int, ...], what: str) -> tuple[int, ...]:
        """The shape of one device's shard; tiles must divide the dimensions."""
        if len(global_shape) != len(self.tile_counts):
            raise InvalidArgument(f"{what}: a rank-{len(self.tile_counts)} sharding on an "
                                  f"array of shape {list(global_shape)}")
        for size, count in zip(global_shape, self.tile_counts):
            if size % count:
                raise Unimplemented(f"{what}: dimension of size {size} is not divisible into "
                                    f"{count} tiles (uneven shardings are not supported)")
        return tuple(size // count for size, count in zip(global_shape, self.tile_counts))

    def shard_slices(self, global_shape: tuple[int, ...], device: int, what: str) -> tuple:
        """The index expression that cuts `device`'s shard out of a global array."""
        shard = self.shard_shape(global_shape, what)
        tile = self.tile_of[device]
        return tuple(slice(t * s, (t + 1) * s) for t, s in zip(tile, shard))

    def cut(self, array: np.ndarray, device: int, what: str) -> np.ndarray:
        """`device`'s shard of the global `array` (a copy: shards are separate buffers)."""
        return np.array(array[self.shard_slices(array.shape, device, what)], copy=True)

    def assemble(self, shards: dict, global_shape: tuple[int, ...], dtype, what: str,
                 view_of: int | None = None) -> np.ndarray:
        """The global array from each device's shard (`shards[device]`).

        Every tile is taken from the first device (in device order) that
        holds it; its replicas are expected to hold the same values and are
        not read. `view_of` names the device whose view is wanted: its own
        tile comes from its own shard (as on XLA, where a shard_map result
        that is not the same on every device, `check_vma=False`, stays each
        device's local value), and for an unreduced value only the devices
        holding the same partial sum are read. A shard of the wrong shape is
        an error naming `what`.
        """
        order = sorted(shards)
        if view_of is not None:
            held = set(self.holders(view_of))
            order = sorted((d for d in shards if d in held), key=lambda d: (d != view_of, d))
        shard_shape = self.shard_shape(global_shape, what)
        result = np.empty(global_shape, dtype=dtype)
        filled = set()
        for device in order:
            tile = self.tile_of[device]
            if tile in filled:
                continue
            shard = np.asarray(shards[device])
            if shard.dtype != np.dtype(dtype):
                raise InvalidArgument(f"{what}: device {device}'s shard has element type "
                                      f"{shard.dtype}, the program takes {np.dtype(dtype)}")
            if shard.shape != shard_shape:
                raise InvalidArgument(f"{what}: device {device}'s shard has shape "
                                      f"{list(shard.shape)}, the sharding needs {list(shard_shape)}")
            result[self.shard_slices(global_shape, device, what)] = shard
            filled.add(tile)
        missing = set(itertools.product(*map(range, self.tile_counts))) - filled
        if missing:
            raise InvalidArgument(f"{what}: no device holds tile(s) {sorted(missing)[:4]}")
        return result


def gathered(sources: list[tuple["Layout | None", int]], devices) -> "Layout | None":
    """The layout whose dimension k is split as dimension `sources[k][1]` of
    layout `sources[k][0]` is (None: whole), device by device; None when
    such a layout would leave some tile to no device (two sources split
    over the same devices, so only a diagonal of tiles is held)."""
    counts = tuple(1 if layout is None else layout.tile_counts[dim] for layout, dim in sources)
    tile_of = {d: tuple(0 if layout is None else layout.tile_of[d][dim] for layout, dim in sources)
               for d in devices}
    if len(set(tile_of.values())) != int(np.prod(counts, dtype=np.int64)):
        return None
    return Layout(counts, tile_of)


def replicated(rank: int, devices) -> Layout:
    """Every device holds the whole array."""
    return Layout((1,) * rank, {d: (0,) * rank for d in devices})


# ------------------------------------------------------------------ Shardy
@dataclass(frozen=True)
class Mesh:
    """An `sdy.mesh`: named axes (major to minor) and the device at each position."""

    axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod([size for _, size in self.axes], dtype=np.int64))

    def coordinates(self) -> dict:
        """device id -> {axis name: coordinate}."""
        sizes = [size for _, size in self.axes]
        names = [name for name, _ in self.axes]
        return {device: dict(zip(names, np.unravel_index(position, sizes) if sizes else ()))
                for position, device in enumerate(self.device_ids)}


@dataclass(frozen=True)
class AxisRef:
    """An axis, or the sub-axis `name:(pre_size)size` of it."""

    name: str
    pre_size: int = 1
    size: int | None = None     # None: the whole axis

    def coordinate(self, coordinates: dict, mesh: Mesh) -> int:
        """This (sub-)axis's coordinate: the axis of size n reshaped to
        [pre_size, size, n / (pre_size * size)], the middle index."""
        value = int(coordinates[self.name])
        post_size = dict(mesh.axes)[self.name] // (self.pre_size * self.extent(mesh))
        return (value // post_size) % self.extent(mesh)

    def extent(self, mesh: Mesh) -> int:
        if self.size is not None:
            return self.size
        return dict(mesh.axes)[self.name] // self.pre_size


_MESH_AXIS = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_DEVICE_IDS = re.compile(r"device_ids\s*=\s*\[([^\]]*)\]")
_AXIS_REF = re.compile(r'"([^"]+)"(?:\s*:\s*\((\d+)\)\s*(\d+))?')


def parse_mesh(text: str) -> Mesh:
    """`<["x"=2, "y"=2], device_ids=[...]>` (the `sdy.mesh` op's attribute or an inline mesh)."""
    axes = tuple((name, int(size)) for name, size in _MESH_AXIS.findall(text))
    ids = _DEVICE_IDS.search(text)
    size = int(np.prod([s for _, s in axes], dtype=np.int64))
    device_ids = (tuple(int(i) for i in ids.group(1).split(",") if i.strip())
                  if ids else tuple(range(size)))
    if len(device_ids) != size:
        raise InvalidArgument(f"sdy mesh {text}: {len(device_ids)} device ids for {size} positions")
    return Mesh(axes, device_ids)


def _axis_refs(group: str) -> tuple[AxisRef, ...]:
    return tuple(AxisRef(name, int(pre) if pre else 1, int(size) if size else None)
                 for name, pre, size in _AXIS_REF.findall(group))


@dataclass(frozen=True)
class TensorSharding:
    """`#sdy.sharding<@mesh, [{"x"}, {}]>`: the mesh (by name or inline) and
    the axes each dimension is split over."""

    mesh_name: str | None
    inline_mesh: Mesh | None
    dims: tuple[tuple[AxisRef, ...], ...]
    unreduced: tuple[AxisRef, ...] = ()

    def mesh(self, meshes: dict) -> Mesh:
        if self.inline_mesh is not None:
            return self.inline_mesh
        if self.mesh_name not in meshes:
            raise InvalidArgument(f"sharding refers to an unknown mesh @{self.mesh_name}")
        return meshes[self.mesh_name]

    def layout(self, meshes: dict, keep_axes=None) -> Layout:
        """The layout over the mesh's devices; with `keep_axes`, only those
        axes split the array (a manual computation's local view)."""
        mesh = self.mesh(meshes)
        dims = [tuple(a for a in axes if keep_axes is None or a.name in keep_axes)
                for axes in self.dims]
        counts = tuple(int(np.prod([a.extent(mesh) for a in axes], dtype=np.int64))
                       for axes in dims)
        tile_of = {}
        for device, coordinates in mesh.coordinates().items():
            tile = []
            for axes in dims:
                index = 0
                for axis in axes:      # major to minor: mixed radix
                    index = index * axis.extent(mesh) + axis.coordinate(coordinates, mesh)
                tile.append(index)
            tile_of[device] = tuple(tile)
        unreduced = [a for a in self.unreduced if keep_axes is None or a.name in keep_axes]
        if not unreduced:
            return Layout(counts, tile_of)
        partial_of = {device: tuple(a.coordinate(coordinates, mesh) for a in unreduced)
                      for device, coordinates in mesh.coordinates().items()}
        return Layout(counts, tile_of, partial_of)


def parse_tensor_sharding(text: str) -> TensorSharding:
    """One Shardy tensor sharding, with or without its `#sdy.sharding` wrapper.

    Open dimensions (`{"x", ?}`) and the `replicated=` list do not change
    which tile a device holds, so they are read past; `unreduced={"x"}`
    (the value is a sum of partial values over those axes) is kept.
    """
    body = text.strip()
    if body.startswith("#sdy.sharding<"):
        body = body[len("#sdy.sharding"):]
    body = body.strip()
    if body.startswith("<") and body.endswith(">"):
        body = body[1:-1].strip()
    inline_mesh, mesh_name = None, None
    if body.startswith("@"):
        match = re.match(r"@([\w.$-]+)\s*,", body)
        if not match:
            raise InvalidArgument(f"cannot read the sharding {text}")
        mesh_name, rest = match.group(1), body[match.end():]
    elif body.startswith("mesh<"):
        end = _matching(body, body.index("<"))
        inline_mesh, rest = parse_mesh(body[4:end + 1]), body[end + 1:].lstrip(" ,")
    else:
        raise InvalidArgument(f"cannot read the sharding {text}")
    rest = rest.strip()
    if not rest.startswith("["):
        raise InvalidArgument(f"cannot read the dimension shardings of {text}")
    dims_text = rest[1:_matching(rest, 0)]
    dims = tuple(_axis_refs(group) for group in re.findall(r"\{([^}]*)\}", dims_text))
    unreduced = re.search(r"unreduced\s*=\s*\{([^}]*)\}", rest[_matching(rest, 0):])
    return TensorSharding(mesh_name, inline_mesh, dims,
                          _axis_refs(unreduced.group(1)) if unreduced else ())


def parse_sharding_per_value(text: str) -> list[TensorSharding]:
    """`#sdy.sharding_per_value<[<@mesh, [...]>, ...]>` -> one sharding per value."""
    return [parse_tensor_sharding(one) for one in sharding_texts_per_value(text)]


def sharding_texts_per_value(text: str) -> list[str]:
    """`#sdy.sharding_per_value<[<@mesh, [...]>, ...]>` -> each value's `<@mesh, [...]>`."""
    start = text.index("[")
    inner = text[start + 1:_matching(text, start)]
    texts, depth, begin = [], 0, None
    for i, ch in enumerate(inner):
        if ch == "<":
            if depth == 0:
                begin = i
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                texts.append(inner[begin:i + 1])
    return texts


def parse_manual_axes(text: str) -> frozenset:
    """`#sdy<manual_axes{"x", "y"}>` -> {"x", "y"}."""
    return frozenset(re.findall(r'"([^"]+)"', text))


def _matching(text: str, open_index: int) -> int:
    """The index of the bracket closing the one at `open_index`."""
    pairs = {"[": "]", "<": ">", "{": "}", "(": ")"}
    opener = text[open_index]
    closer, depth = pairs[opener], 0
    for i in range(open_index, len(text)):
        if text[i] == opener:
            depth += 1
        elif text[i] == closer:
            depth -= 1
            if depth == 0:
                return i
    raise InvalidArgument(f"unbalanced {opener} in {text}")


# ------------------------------------------------------------------- GSPMD
_IOTA = re.compile(r"<=\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?")


def parse_hlo_sharding(text: str, rank: int, devices) -> Layout:
    """XLA's HloSharding text (`mhlo.sharding`) as a layout over `devices`.

    `{replicated}`, `{maximal device=N}` and `{manual}` give every device the
    whole array (for maximal, the other devices' copies are the same values:
    the reference computes one global array). Tuple shardings are not
    expected on a single value.
    """
    assignment = _tile_assignment(text, rank)
    if assignment is None:
        return replicated(rank, devices)
    ids, _ = assignment
    tile_of = {int(ids[index]): tuple(int(i) for i in index[:rank]) for index in np.ndindex(*ids.shape)}
    return Layout(tuple(ids.shape[:rank]), tile_of)


def hlo_manual_groups(text: str, rank: int, devices) -> dict:
    """device -> its index along the manual sub-group dimensions of the
    sharding (`last_tile_dims={manual, ...}`): in a partially manual region,
    devices with different indices hold different values, so only devices
    with the same index make up one value. Without manual sub-groups every
    device is in group ()."""
    assignment = _tile_assignment(text, rank)
    if assignment is None:
        return {d: () for d in devices}
    ids, kinds = assignment
    manual = [rank + k for k, kind in enumerate(kinds) if kind == "manual"]
    return {int(ids[index]): tuple(int(index[k]) for k in manual) for index in np.ndindex(*ids.shape)}


def _tile_assignment(text: str, rank: int):
    """(array of device ids, kinds of its trailing sub-group dimensions), or
    None for a sharding that gives every device the whole array."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1].strip()
    if body in ("", "replicated", "manual") or body.startswith("maximal") or body.startswith("unknown"):
        return None
    match = re.match(r"devices=\[([\d,\s]+)\]\s*", body)
    if not match:
        raise Unimplemented(f"HloSharding {text} is not supported")
    dims = [int(d) for d in match.group(1).split(",")]
    rest = body[match.end():]
    iota = _IOTA.match(rest)
    if iota:
        reshape = [int(d) for d in iota.group(1).split(",")]
        perm = [int(p) for p in iota.group(2).split(",")] if iota.group(2) else list(range(len(reshape)))
        ids = np.arange(int(np.prod(reshape))).reshape(reshape).transpose(perm).reshape(dims)
        rest = rest[iota.end():]
    else:
        listed = re.match(r"([\d,\s]+)", rest)
        if not listed:
            raise Unimplemented(f"HloSharding {text}: cannot read the device list")
        ids = np.array([int(i) for i in listed.group(1).split(",") if i.strip()]).reshape(dims)
        rest = rest[listed.end():]
    kinds_match = re.search(r"last_tile_dims=\{([^}]*)\}", rest)
    if kinds_match:
        kinds = [k.strip() for k in kinds_match.group(1).split(",")]
    elif "last_tile_dim_replicate" in rest:
        kinds = ["replicated"]
    else:
        kinds = []
    if len(dims) - rank != len(kinds):
        raise InvalidArgument(f"HloSharding {text} does not fit a rank-{rank} array")
    return ids, kinds


def hlo_sharding_text(layout: Layout, devices) -> str:
    """`layout` in XLA's HloSharding text, the spelling PJRT reports shardings in.

    A tile held by several devices becomes trailing sub-group dimensions:
    first the devices holding different partial sums of an unreduced value
    (`last_tile_dims={unreduced}`, as XLA's HloSharding::Unreduced /
    `OpSharding.Type.UNREDUCED`), then the copies of one partial sum
    (`replicated`), devices in increasing order. XLA's parser
    canonicalizes the result (`{devices=[2]0,1 last_tile_dims={unreduced}}`
    is `{unreduced}`), and so do JAX's comparisons.
    """
    devices = sorted(devices)
    partial_of = layout.partial_of or {d: () for d in devices}
    if all(count == 1 for count in layout.tile_counts) and layout.partial_of is None:
        return "{replicated}"
    holders: dict = {}
    for device in devices:
        holders.setdefault(layout.tile_of[device], {}) \
            .setdefault(partial_of[device], []).append(device)
    partials = {len(by_partial) for by_partial in holders.values()}
    copies = {len(held) for by_partial in holders.values() for held in by_partial.values()}
    if len(partials) != 1 or len(copies) != 1:
        raise Unimplemented(f"tiles held by different numbers of devices: {holders}")
    (unreduced,), (replication,) = partials, copies
    ids = [device for tile in itertools.product(*map(range, layout.tile_counts))
           for partial in sorted(holders[tile]) for device in holders[tile][partial]]
    kinds = (["unreduced"] if layout.partial_of is not None else []) + \
        (["replicated"] if replication > 1 else [])
    dims = list(layout.tile_counts) + ([unreduced] if layout.partial_of is not None else []) + \
        ([replication] if replication > 1 else [])
    text = "{devices=[" + ",".join(map(str, dims)) + "]" + ",".join(map(str, ids))
    if kinds == ["replicated"]:
        return text + " last_tile_dim_replicate}"
    return text + (" last_tile_dims={" + ", ".join(kinds) + "}}" if kinds else "}")
