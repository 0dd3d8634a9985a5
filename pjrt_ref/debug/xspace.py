"""Serialize pjrt-ref's profile slices as a `tensorflow.profiler.XSpace`.

The PJRT profiler extension hands its data to the host as a serialized
XSpace protobuf (xla/tsl/profiler/protobuf/xplane.proto). protobuf is not a
dependency of pjrt-ref, and the subset we write is small, so it is encoded
here by hand in the protobuf wire format (varints and length-delimited
fields; https://protobuf.dev/programming-guides/encoding/).

What we write, and why it shows up in the usual tools:

- one XPlane named `/device:CUSTOM:0`. The trace viewer conversion
  (xla/tsl/profiler/convert/xplane_to_trace_events.cc) shows the host plane
  `/host:CPU` plus the device planes whose name starts with `/device:GPU:`,
  else `/device:TPU:`, else `/device:CUSTOM:` (the prefix for devices that
  are neither). So pjrt-ref's slices get their own "device" row group in
  Perfetto and TensorBoard, next to JAX's host threads; on a machine that
  also profiles a GPU or TPU, the trace viewer shows only those planes,
  although the XSpace (`*.xplane.pb`) still holds ours;
- one XLine per Python thread that ran programs (line id = native thread
  id), so nested slices (execute > op > a while body's ops) stack;
- one XEventMetadata per distinct slice name (`stablehlo.tanh`,
  `execute jit_f`...), one XStatMetadata per argument name (`location`,
  `operands`, `results`...); each XEvent carries its arguments as XStats;
- times: XLine.timestamp_ns is nanoseconds since the Unix epoch (the clock
  of the profiler's host tracer, which the session later shifts to its own
  start) and XEvent.offset_ps is picoseconds after its line's timestamp.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

PLANE_NAME = "/device:CUSTOM:0"


@dataclass
class Slice:
    """One recorded span: `start_ns`/`end_ns` are Unix-epoch nanoseconds."""

    name: str
    category: str
    start_ns: int
    end_ns: int
    thread: int
    args: dict


# ------------------------------------------------------------ wire format
def varint(value: int) -> bytes:
    """Base-128 varint; negative int64 values take their 64-bit two's complement."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def int_field(number: int, value: int) -> bytes:
    """A varint field (wire type 0); proto3 leaves zero out."""
    return varint(number << 3) + varint(value) if value else b""


def bytes_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings, bytes, messages."""
    return varint((number << 3) | 2) + varint(len(payload)) + payload


def text_field(number: int, text: str) -> bytes:
    return bytes_field(number, text.encode("utf-8")) if text else b""


def double_field(number: int, value: float) -> bytes:
    """A 64-bit field (wire type 1), little-endian IEEE double."""
    return varint((number << 3) | 1) + struct.pack("<d", value)


def map_entry(number: int, key: int, message: bytes) -> bytes:
    """One entry of a `map<int64, Message>` field: a message {1: key, 2: value}."""
    return bytes_field(number, varint(1 << 3) + varint(key) + bytes_field(2, message))


# ------------------------------------------------------------ the messages
def stat_value(metadata_id: int, value) -> bytes:
    """XStat {metadata_id = 1; oneof value {double 2, int64 4, str 5}}."""
    if isinstance(value, bool) or isinstance(value, int):
        payload = varint(4 << 3) + varint(int(value))
    elif isinstance(value, float):
        payload = double_field(2, value)
    else:
        text = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        payload = bytes_field(5, text.encode("utf-8"))
    return int_field(1, metadata_id) + payload


class _Names:
    """Interns names to the ids of a plane's metadata maps (ids start at 1)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id(self, name: str) -> int:
        return self.ids.setdefault(name, len(self.ids) + 1)


def event(slice_: Slice, line_start_ns: int, events: _Names, stats: _Names) -> bytes:
    """XEvent {metadata_id 1, offset_ps 2, duration_ps 3, stats 4}."""
    out = int_field(1, events.id(slice_.name))
    out += int_field(2, (slice_.start_ns - line_start_ns) * 1000)
    out += int_field(3, max(0, slice_.end_ns - slice_.start_ns) * 1000)
    for key, value in slice_.args.items():
        out += bytes_field(4, stat_value(stats.id(key), value))
    category = stats.id("category")
    return out + bytes_field(4, stat_value(category, slice_.category))


def line(thread: int, slices: list[Slice], events: _Names, stats: _Names) -> bytes:
    """XLine {id 1, name 2, timestamp_ns 3, events 4, duration_ps 9, display_id 10}."""
    slices = sorted(slices, key=lambda s: (s.start_ns, -s.end_ns))
    start = slices[0].start_ns
    end = max(s.end_ns for s in slices)
    out = int_field(1, thread) + text_field(2, f"pjrt_ref thread {thread}") + int_field(3, start)
    for slice_ in slices:
        out += bytes_field(4, event(slice_, start, events, stats))
    return out + int_field(9, (end - start) * 1000) + int_field(10, thread)


def plane(slices: list[Slice], name: str = PLANE_NAME, plane_id: int = 0) -> bytes:
    """XPlane {id 1, name 2, lines 3, event_metadata 4, stat_metadata 5}."""
    events, stats = _Names(), _Names()
    by_thread: dict[int, list[Slice]] = {}
    for slice_ in slices:
        by_thread.setdefault(slice_.thread, []).append(slice_)
    out = int_field(1, plane_id) + text_field(2, name)
    for thread in sorted(by_thread):
        out += bytes_field(3, line(thread, by_thread[thread], events, stats))
    for text, metadata_id in events.ids.items():     # XEventMetadata {id 1, name 2}
        out += map_entry(4, metadata_id, int_field(1, metadata_id) + text_field(2, text))
    for text, metadata_id in stats.ids.items():      # XStatMetadata {id 1, name 2}
        out += map_entry(5, metadata_id, int_field(1, metadata_id) + text_field(2, text))
    return out


def xspace(slices: list[Slice]) -> bytes:
    """XSpace {planes 1}: one pjrt-ref plane, or nothing when no slice was recorded."""
    return bytes_field(1, plane(slices)) if slices else b""
