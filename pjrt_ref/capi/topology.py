"""PJRT_TopologyDescription_* entry points and PJRT_Compile (pjrt_c_api.h "Topology")."""
from __future__ import annotations

from ..model import handles
from ..model.executable import Executable
from ..model.topology import Topology, local_topology
from ._boundary import entry_point
from .cdata import (Args, bytes_arg, hand_out_blob, owned_array, owned_named_values, owned_text,
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


@entry_point("PJRT_Compile")
def compile_for_topology(args: Args) -> None:
    """PJRT_Compile: ahead-of-time compile; load it with PJRT_Client_Load."""
    from .client import read_program
    _topology(args)
    code, fmt = read_program(args.program)
    options = bytes_arg(args.compile_options, args.compile_options_size)
    args.executable = handles.add(Executable.compile(code, fmt, options))
