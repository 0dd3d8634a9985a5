"""The PJRT Layouts extension (capi_shim/pjrt_layouts_shardings.h): the memory
layout of buffers, of new arrays and of a program's parameters and outputs.

Every pjrt-ref array is dense: row-major (XLA's descending layout,
`minor_to_major = [rank-1, ..., 0]`) unless a caller asked for another
dimension order (pjrt_ref/model/layouts.py), never tiled. pjrt-ref has one
immutable `MemoryLayout` per dimension order, made on first use and kept
for the process: the handles the host gets
from Client_GetDefaultLayout or Buffer_MemoryLayout are those shared ones
(MemoryLayout_Destroy has nothing to free), and Serialize hands out the
layout's own bytes with a deleter that keeps them.

A host that finds this extension asks an executable for its output and
parameter layouts here instead of converting the program to an HloModule
to read them (see the header), which is where the extension pays.
"""
from __future__ import annotations

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.model import layouts
from pjrt_ref.capi import handles
from pjrt_ref.model.dtypes import to_numpy
from pjrt_ref.model.topology import Topology
from pjrt_ref.capi import cdata
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.buffer import _buffer
from pjrt_ref.capi.cdata import Args, owned_array
from pjrt_ref.capi.client import client_of
from pjrt_ref.capi.executable import _executable


class MemoryLayout:
    """A dense layout, serialized as XLA writes a layout (`Layout::ToString`,
    `{2,1,0}`), which is what jaxlib's `PjRtLayout::Deserialize` parses: it
    aborts the process on anything else."""

    def __init__(self, minor_to_major: tuple[int, ...]) -> None:
        self.minor_to_major = minor_to_major
        data = layouts.text(minor_to_major).encode()
        self.size = len(data)
        self.data = cdata.ffi.new("char[]", data)


_LAYOUTS: dict[tuple[int, ...], MemoryLayout] = {}   # minor_to_major -> layout
_HANDLES: dict[int, MemoryLayout] = {}               # handle address -> layout


def layout_handle(minor_to_major: tuple[int, ...]):
    """The (shared, never freed) `PJRT_Layouts_MemoryLayout*` of this layout."""
    layout = _LAYOUTS.get(minor_to_major)
    if layout is None:
        layout = _LAYOUTS.setdefault(minor_to_major, MemoryLayout(minor_to_major))
        _HANDLES[_address(layout)] = layout
    return cdata.ffi.cast("PJRT_Layouts_MemoryLayout*", layout.data)


def _address(layout: MemoryLayout) -> int:
    return int(cdata.ffi.cast("uintptr_t", layout.data))


def _layout(args: Args) -> MemoryLayout:
    layout = _HANDLES.get(int(cdata.ffi.cast("uintptr_t", args.layout)))
    if layout is None:
        raise InvalidArgument("not a PJRT_Layouts_MemoryLayout of this plugin")
    return layout


@entry_point("PJRT_Layouts_MemoryLayout_Destroy")
def memory_layout_destroy(args: Args) -> None:
    """Layouts are shared per rank and live as long as the process: nothing to free."""
    _layout(args)


@entry_point("PJRT_Layouts_MemoryLayout_Serialize")
def memory_layout_serialize(args: Args) -> None:
    """The layout in XLA's text form (`MemoryLayout`)."""
    layout = _layout(args)
    args.serialized_bytes = layout.data
    args.serialized_bytes_size = layout.size
    args.serialized_layout = cdata.ffi.cast("PJRT_Layouts_SerializedLayout*", layout.data)
    args.serialized_layout_deleter = cdata.lib.pjrt_ref_keep_serialized_layout


@entry_point("PJRT_Layouts_PJRT_Client_GetDefaultLayout")
def client_get_default_layout(args: Args) -> None:
    """A new array of any element type and `num_dims` dims is row-major."""
    client_of(args)
    _default_layout(args)


@entry_point("PJRT_Layouts_PJRT_Topology_GetDefaultLayout")
def topology_get_default_layout(args: Args) -> None:
    """The same as the client's: the topology's devices are pjrt-ref's."""
    handles.get(args.topology_description, Topology, "PJRT_TopologyDescription")
    _default_layout(args)


def _default_layout(args: Args) -> None:
    to_numpy(args.type)   # an unknown type is the caller's error
    if args.num_dims and args.dims == cdata.NULL:
        raise InvalidArgument(f"dims is NULL with num_dims = {args.num_dims}")
    args.layout = layout_handle(layouts.row_major(int(args.num_dims)))


@entry_point("PJRT_Layouts_PJRT_Buffer_MemoryLayout")
def buffer_memory_layout(args: Args) -> None:
    """The buffer's layout (PJRT_Buffer_GetMemoryLayout says the same)."""
    args.layout = layout_handle(_buffer(args).layout)


@entry_point("PJRT_Layouts_PJRT_Executable_GetOutputLayouts")
def executable_get_output_layouts(args: Args) -> None:
    """Each output's layout: the `mhlo.layout_mode` the program gives it,
    else row-major (one device's shard for a partitioned program: the same rank)."""
    exe = _executable(args)
    args.num_outputs = len(exe.output_layouts)
    args.layouts = owned_array(exe, "output_layouts", "PJRT_Layouts_MemoryLayout*",
                               [layout_handle(order) for order in exe.output_layouts])


@entry_point("PJRT_Layouts_PJRT_Executable_GetParameterLayouts")
def executable_get_parameter_layouts(args: Args) -> None:
    """Each parameter's layout, as for outputs."""
    exe = _executable(args)
    args.num_parameters = len(exe.parameter_layouts)
    args.layouts = owned_array(exe, "parameter_layouts", "PJRT_Layouts_MemoryLayout*",
                               [layout_handle(order) for order in exe.parameter_layouts])
