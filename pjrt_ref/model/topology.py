"""`PJRT_TopologyDescription`: the platform and the devices a client (or compile target) has.

How many virtual devices a client makes is decided here too (`device_count`),
so that a topology can be described without making a client."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from pjrt_ref import __version__, settings
from pjrt_ref.model.compile_options import bytes_field, packed_field, varint_field
from pjrt_ref.model.device import DeviceDescription
from pjrt_ref.model.dtypes import XLA_PRIMITIVE_TYPES, BufferType
from pjrt_ref.model.memory import KIND_IDS
from pjrt_ref.errors import InvalidArgument

PLATFORM_NAME = "pjrt_ref"
# How many virtual devices a client has: the `num_devices` create option
# (PJRT_Client_Create's NamedValues), else PJRT_REF_NUM_DEVICES (default 1),
# both at most the setting's bound.
MAX_DEVICES = settings.declared("PJRT_REF_NUM_DEVICES").kind.maximum


def platform_version() -> str:
    """pjrt-ref's version and the fingerprint of its settings at client
    creation: JAX's persistent compilation cache keys on this text, so an
    entry written by another version or under other `PJRT_REF_*` settings
    of the compile key (`settings.fingerprint`) is never loaded."""
    return (f"pjrt-ref {__version__} (StableHLO interpreter on numpy; "
            f"settings {settings.fingerprint()})")


def device_count(options: dict | None = None) -> int:
    """The number of virtual devices asked for: option `num_devices`, else
    PJRT_REF_NUM_DEVICES (read at each client creation; default 1)."""
    options = options or {}
    if "num_devices" not in options:
        return settings.get("PJRT_REF_NUM_DEVICES")
    value = options["num_devices"]
    try:
        count = int(value)
        if isinstance(value, (bool, float)) or str(count) != str(value).strip():
            raise ValueError
    except (TypeError, ValueError):
        raise InvalidArgument(f"create option num_devices={value!r} is not an integer") from None
    if not 1 <= count <= MAX_DEVICES:
        raise InvalidArgument(f"create option num_devices={count}: pjrt_ref has between 1 and "
                              f"{MAX_DEVICES} devices")
    return count


@dataclass(eq=False)
class Topology:
    platform_name: str
    platform_version: str
    descriptions: list[DeviceDescription]
    attributes: dict[str, Any] = field(default_factory=dict)
    handle: object = None          # our PJRT_TopologyDescription*
    owned_by_client: bool = False  # a client's topology is freed with the client

    @property
    def fingerprint(self) -> int:
        text = f"{self.platform_name}|{self.platform_version}|" + ",".join(
            f"{d.id}:{d.kind}" for d in self.descriptions)
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")

    @property
    def memory_space_kind_ids(self) -> tuple[int, ...]:
        """The kind ids of the memories its devices have, the default first (memory.KIND_IDS)."""
        return KIND_IDS

    def canonical_shape(self, kind_id: int, buffer_type: BufferType, dims: list[int]) -> bytes:
        """The xla.ShapeProto a `buffer_type[dims]` buffer has in memories of kind `kind_id`
        (PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace): the dense row-major layout
        every pjrt-ref buffer has. A kind id none of its memories has is INVALID_ARGUMENT."""
        if kind_id not in self.memory_space_kind_ids:
            raise InvalidArgument(f"memory space kind id {kind_id}: pjrt_ref's memories have kind ids "
                                  f"{list(self.memory_space_kind_ids)}")
        return shape_proto(buffer_type, dims)

    def serialize(self) -> bytes:
        return json.dumps({
            "format": "pjrt-ref topology v1",
            "platform_name": self.platform_name,
            "platform_version": self.platform_version,
            "devices": [{"id": d.id, "process_index": d.process_index, "kind": d.kind,
                         "attributes": d.attributes} for d in self.descriptions],
        }).encode()

    @classmethod
    def deserialize(cls, blob: bytes) -> "Topology":
        try:
            data = json.loads(blob)
            assert data["format"] == "pjrt-ref topology v1"
            devices = [DeviceDescription(id=d["id"], process_index=d["process_index"], kind=d["kind"],
                                         attributes=dict(d.get("attributes", {})))
                       for d in data["devices"]]
            return cls(data["platform_name"], data["platform_version"], devices)
        except Exception:
            raise InvalidArgument("not a serialized pjrt-ref topology") from None


def local_topology(options: dict | None = None) -> Topology:
    """The topology of a fresh client made with `options` (device count: see device_count)."""
    return Topology(PLATFORM_NAME, platform_version(),
                    [DeviceDescription.virtual(i) for i in range(device_count(options))])


def shape_proto(buffer_type: BufferType, dims: list[int]) -> bytes:
    """xla.ShapeProto bytes of a dense row-major `buffer_type[dims]` array, field for field
    what XLA's Shape::ToProto writes for that shape with its default layout:
    element_type (2), dimensions (3), layout (5: minor_to_major 1, and
    tail_padding_alignment_in_elements 16, which XLA always writes, = 1),
    is_dynamic_dimension (6). A token is its element type alone. Sub-byte types
    keep one byte per element here, so the layout sets no element_size_in_bits.
    """
    element_type = varint_field(2, XLA_PRIMITIVE_TYPES[buffer_type])
    if buffer_type == BufferType.TOKEN:
        if dims:
            raise InvalidArgument(f"a token has no dimensions, got {dims}")
        return element_type
    rank = len(dims)
    minor_to_major = packed_field(1, list(range(rank - 1, -1, -1))) if rank else b""
    layout = bytes_field(5, minor_to_major + varint_field(16, 1))
    if not rank:
        return element_type + layout
    return element_type + packed_field(3, dims) + layout + packed_field(6, [0] * rank)
