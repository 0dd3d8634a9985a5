"""`PJRT_TopologyDescription`: the devices a client (or compile target) has."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from .device import DeviceDescription


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
        from .errors import InvalidArgument
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
    """The topology of a fresh client made with `options` (device count: see client.device_count)."""
    from .client import PLATFORM_NAME, device_count, platform_version
    return Topology(PLATFORM_NAME, platform_version(),
                    [DeviceDescription.virtual(i) for i in range(device_count(options))])
