"""`PJRT_TopologyDescription`: the platform and the devices a client (or compile target) has.

How many virtual devices a client makes is decided here too (`device_count`),
so that a topology can be described without making a client."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from .. import settings
from .device import DeviceDescription
from ..errors import InvalidArgument

PLATFORM_NAME = "pjrt_ref"
# How many virtual devices a client has: the `num_devices` create option
# (PJRT_Client_Create's NamedValues), else PJRT_REF_NUM_DEVICES (default 1),
# both at most the setting's bound.
MAX_DEVICES = settings.declared("PJRT_REF_NUM_DEVICES").kind.maximum


def platform_version() -> str:
    from .. import __version__
    return f"pjrt-ref {__version__} (StableHLO interpreter on numpy)"


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
