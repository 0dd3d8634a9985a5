"""PJRT_TopologyDescription_* entry points and PJRT_Compile (pjrt_c_api.h "Topology")."""
from __future__ import annotations

from pjrt_ref.capi.client import read_program
from pjrt_ref.errors import InvalidArgument, Unimplemented
from pjrt_ref.capi import handles
from pjrt_ref.model.dtypes import BufferType, buffer_type
from pjrt_ref.model.executable import Executable
from pjrt_ref.model.topology import Topology, local_topology
from pjrt_ref.capi import cdata
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.buffer import int_list
from pjrt_ref.capi.cdata import (Args, bytes_arg, hand_out_blob, hand_out_bytes, owned_array, owned_named_values, owned_text,
                                 read_named_values)


def _topology(args: Args) -> Topology:
    return handles.get(args.topology, Topology, "PJRT_TopologyDescription")


def register_topology(topology: Topology):
    for description in topology.descriptions:
        description.handle = handles.add(description)
    topology.handle = handles.add(topology)
    return topology.handle


@entry_point("PJRT_TopologyDescription_Create")
def topology_create(args: Args) -> None:
    """PJRT_TopologyDescription_Create: the name is ignored; the options are a client's
    (`num_devices`, default $PJRT_REF_NUM_DEVICES or 1)."""
    options = {}
    if args.get("num_options", 0):
        options = read_named_values(args.create_options, args.num_options)
    args.topology = register_topology(local_topology(options))


@entry_point("PJRT_TopologyDescription_Destroy")
def topology_destroy(args: Args) -> None:
    """PJRT_TopologyDescription_Destroy: a client's own topology is freed with the client."""
    topology = _topology(args)
    if topology.owned_by_client:
        return
    handles.remove(args.topology, Topology)
    for description in topology.descriptions:
        handles.remove(description.handle, object)


@entry_point("PJRT_TopologyDescription_Serialize")
def topology_serialize(args: Args) -> None:
    """PJRT_TopologyDescription_Serialize: JSON; freed by the deleter."""
    hand_out_blob(args, "serialized_bytes", "serialized_topology", "serialized_topology_deleter",
                  _topology(args).serialize())


@entry_point("PJRT_TopologyDescription_Deserialize")
def topology_deserialize(args: Args) -> None:
    """PJRT_TopologyDescription_Deserialize: the inverse of Serialize."""
    blob = bytes_arg(args.serialized_topology, args.serialized_topology_size)
    args.topology = register_topology(Topology.deserialize(blob))


@entry_point("PJRT_TopologyDescription_PlatformName")
def topology_platform_name(args: Args) -> None:
    """PJRT_TopologyDescription_PlatformName."""
    topology = _topology(args)
    args.platform_name, args.platform_name_size = owned_text(topology, "name", topology.platform_name)


@entry_point("PJRT_TopologyDescription_PlatformVersion")
def topology_platform_version(args: Args) -> None:
    """PJRT_TopologyDescription_PlatformVersion."""
    topology = _topology(args)
    args.platform_version, args.platform_version_size = owned_text(
        topology, "version", topology.platform_version)


@entry_point("PJRT_TopologyDescription_GetDeviceDescriptions")
def topology_get_device_descriptions(args: Args) -> None:
    """PJRT_TopologyDescription_GetDeviceDescriptions: owned by the topology."""
    topology = _topology(args)
    args.descriptions = owned_array(topology, "descriptions", "void*",
                                    [d.handle for d in topology.descriptions])
    args.num_descriptions = len(topology.descriptions)


@entry_point("PJRT_TopologyDescription_Attributes")
def topology_attributes(args: Args) -> None:
    """PJRT_TopologyDescription_Attributes: none."""
    topology = _topology(args)
    args.attributes, args.num_attributes = owned_named_values(topology, "attributes", topology.attributes)


@entry_point("PJRT_TopologyDescription_Fingerprint")
def topology_fingerprint(args: Args) -> None:
    """PJRT_TopologyDescription_Fingerprint: stable hash of platform and devices."""
    args.fingerprint = _topology(args).fingerprint


@entry_point("PJRT_TopologyDescription_GetMemorySpaceKindIds")
def topology_get_memory_space_kind_ids(args: Args) -> None:
    """PJRT_TopologyDescription_GetMemorySpaceKindIds: [0], the kind id of "device",
    pjrt-ref's one memory kind (PJRT_Memory_Kind_Id); owned by the topology."""
    topology = _topology(args)
    ids = list(topology.memory_space_kind_ids)
    args.memory_space_kind_ids = owned_array(topology, "memory_space_kind_ids", "int", ids)
    args.num_memory_space_kind_ids = len(ids)


@entry_point("PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace")
def topology_make_canonical_shape_for_memory_space(args: Args) -> None:
    """PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace: the serialized xla.ShapeProto
    a buffer of this shape has in memories of kind `memory_space_kind_id`: the shape with
    the dense row-major layout every pjrt-ref buffer has, written as XLA writes it
    (pjrt_ref/model/topology.py `shape_proto`); freed by the caller's deleter call.

    A given layout must be that one: a tiled layout with another order, or with
    tiles, is UNIMPLEMENTED (XLA's CPU client: "only support default layout");
    byte strides are INVALID_ARGUMENT (XLA converts only tiled layouts). A kind id
    none of pjrt-ref's memories has is INVALID_ARGUMENT (XLA's CPU client ignores
    the kind id; a shape for a memory that cannot exist describes no buffer).
    """
    topology = _topology(args)
    element_type = buffer_type(args.element_type)
    if element_type == BufferType.INVALID:
        raise InvalidArgument("element_type is PJRT_Buffer_Type_INVALID")
    dims = int_list(args.dims, args.num_dims, "dims")
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"negative dimension in {dims}")
    _check_row_major(args.layout, len(dims))
    proto = topology.canonical_shape(int(args.memory_space_kind_id), element_type, dims)
    hand_out_bytes(args, "serialized_shape", "serialized_shape_deleter", proto)


def _check_row_major(layout, rank: int) -> None:
    """An optional tiled layout must be the descending order with no tiles."""
    if layout == cdata.NULL:
        return
    if layout.type != cdata.lib.PJRT_Buffer_MemoryLayout_Type_Tiled:
        raise InvalidArgument("only a tiled layout (a minor-to-major order) describes a shape's layout")
    tiled = layout.tiled
    order = int_list(tiled.minor_to_major, tiled.minor_to_major_size, "minor_to_major")
    if sorted(order) != list(range(rank)):
        raise InvalidArgument(f"minor_to_major {order} is not a permutation of rank {rank}")
    if order != list(range(rank - 1, -1, -1)) or tiled.num_tiles:
        raise Unimplemented(f"pjrt-ref buffers are dense row-major: layout {{{','.join(map(str, order))}}}"
                            f"{' with tiles' if tiled.num_tiles else ''} is not theirs")


@entry_point("PJRT_Compile")
def compile_for_topology(args: Args) -> None:
    """PJRT_Compile: ahead-of-time compile; load it with PJRT_Client_Load."""
    _topology(args)
    code, fmt = read_program(args.program)
    options = bytes_arg(args.compile_options, args.compile_options_size)
    args.executable = handles.add(Executable.compile(code, fmt, options))
