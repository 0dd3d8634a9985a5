"""Replica groups named by mesh axes, as lists of ids.

Besides a dense table of ids, StableHLO's collectives (all_reduce,
all_gather, reduce_scatter, all_to_all, collective_broadcast) accept
`replica_groups` naming axes of a device mesh (StableHLO's "mesh-axes
replica groups", emitted by JAX >= 0.12 for psum & co.):

    replica_groups = #stablehlo.replica_group_mesh_axes<mesh = @mesh,
                         axes = [#stablehlo.axis_ref<name = "y">]>

The mesh is a module-level `sdy.mesh @mesh = <["x"=2, "y"=2]>` (or its
`stablehlo.mesh = {axes = [...], device_ids = ...}` attribute), or written
inline as `#stablehlo.mesh<axes = [#stablehlo.mesh_axis<name = "x", size =
2>, ...]>`. Mesh positions are numbered row-major over the axes (major
first) and hold the devices `device_ids` lists (default: position = id).

One group is the set of devices that differ only in the named axes: its
members are ordered by the named axes as a mixed-radix number (the first
named axis most significant), and the groups by the remaining coordinates,
row-major. A sub-axis `name:(pre_size)size` is the middle digit of its axis
seen as [pre_size, size, rest]. This is what StableHLO's compatibility
expander produces when it rewrites the attribute to a dense table.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Mesh:
    axes: tuple[tuple[str, int], ...]     # (name, size), major to minor
    device_ids: tuple[int, ...]           # the device at each position


@dataclass(frozen=True)
class AxisRef:
    """An axis, or the sub-axis `name:(pre_size)size` of it."""
    name: str
    pre_size: int = 1
    size: int | None = None               # None: the rest of the axis after pre_size

    def extent(self, axis_size: int) -> int:
        return self.size if self.size is not None else axis_size // self.pre_size

    def digit(self, value: int, axis_size: int) -> tuple[int, int]:
        """(this sub-axis's coordinate, its weight) within `value`, a
        coordinate of the whole axis."""
        weight = axis_size // (self.pre_size * self.extent(axis_size))
        return (value // weight) % self.extent(axis_size), weight


MESH_AXES_PREFIX = "#stablehlo.replica_group_mesh_axes"
_SDY_AXIS = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_STABLEHLO_AXIS = re.compile(r'name\s*=\s*"([^"]+)"\s*,\s*size\s*=\s*(\d+)')
_DEVICE_IDS = re.compile(r"device_ids\s*=\s*(?:dense<)?\[?([-\d,\s]*)\]?")
_AXIS_REFS = re.compile(r'axis_ref\s*<?\s*(?:name\s*=\s*)?"([^"]+)"'
                        r'(?:\s*(?:,\s*sub_axis_info\s*=\s*|:)\s*\((\d+)\)\s*(\d+))?')
_MESH_NAME = re.compile(r"mesh\s*=\s*@([\w.$-]+)")


def is_mesh_axes(value) -> bool:
    return isinstance(value, str) and value.startswith(MESH_AXES_PREFIX)


def parse_mesh(text: str) -> Mesh:
    """An sdy mesh `<["x"=2, "y"=2], device_ids=[...]>` or a StableHLO one
    (`#stablehlo.mesh<axes = [...]>`, `{axes = [{name = "x", size = 2}]}`)."""
    axes = _STABLEHLO_AXIS.findall(text) or _SDY_AXIS.findall(text)
    axes = tuple((name, int(size)) for name, size in axes)
    size = int(np.prod([s for _, s in axes], dtype=np.int64))
    ids = _DEVICE_IDS.search(text)
    listed = [int(i) for i in ids.group(1).split(",") if i.strip()] if ids else []
    if len(listed) == 1 and size > 1:     # a splat: dense<0>
        listed = listed * size
    device_ids = tuple(listed) if listed else tuple(range(size))
    if len(device_ids) != size:
        raise ValueError(f"mesh {text}: {len(device_ids)} device ids for {size} positions")
    return Mesh(axes, device_ids)


def module_meshes(module) -> dict[str, Mesh]:
    """Every `sdy.mesh` of the module, by symbol name."""
    meshes = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "sdy.mesh":
            attributes = op.attributes
            name = str(attributes["sym_name"]).strip('"')
            text = str(attributes["mesh"]) if "mesh" in attributes else ""
            if "stablehlo.mesh" in attributes:
                text = str(attributes["stablehlo.mesh"])
            meshes[name] = parse_mesh(text)
    return meshes


def replica_groups(text: str, meshes: dict[str, Mesh]) -> np.ndarray:
    """The dense [groups, members] id table a mesh-axes attribute stands for
    (module docstring)."""
    body = text[len(MESH_AXES_PREFIX):]
    split = body.rindex("axes = [")
    mesh_text, axes_text = body[:split], body[split:]
    named = _MESH_NAME.search(mesh_text)
    if named:
        if named.group(1) not in meshes:
            raise ValueError(f"replica groups refer to an unknown mesh @{named.group(1)}")
        mesh = meshes[named.group(1)]
    else:
        mesh = parse_mesh(mesh_text)
    refs = tuple(AxisRef(name, int(pre) if pre else 1, int(size) if size else None)
                 for name, pre, size in _AXIS_REFS.findall(axes_text))
    return groups_of(mesh, refs)


def groups_of(mesh: Mesh, refs: tuple[AxisRef, ...]) -> np.ndarray:
    sizes = dict(mesh.axes)
    for ref in refs:
        if ref.name not in sizes:
            raise ValueError(f"replica groups name the axis {ref.name!r}, not in the mesh")
    shape = [size for _, size in mesh.axes]
    groups: dict[tuple, list[tuple[int, int]]] = {}
    for position, device in enumerate(mesh.device_ids):
        coordinates = dict(zip(sizes, (int(c) for c in np.unravel_index(position, shape))))
        rest = dict(coordinates)
        member = 0
        for ref in refs:
            digit, weight = ref.digit(coordinates[ref.name], sizes[ref.name])
            rest[ref.name] -= digit * weight
            member = member * ref.extent(sizes[ref.name]) + digit
        groups.setdefault(tuple(rest.values()), []).append((member, device))
    table = [[device for _, device in sorted(members)] for _, members in sorted(groups.items())]
    return np.array(table, dtype=np.int64)
