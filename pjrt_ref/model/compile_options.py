"""The few CompileOptionsProto fields pjrt-ref reads, and DeviceAssignmentProto.

`PJRT_Client_Compile` receives `xla.CompileOptionsProto` bytes
(xla/pjrt/proto/compile_options.proto). pjrt-ref needs only the replica and
partition counts and the device assignment from its
`executable_build_options`, so it reads the protobuf wire format by hand
instead of depending on protobuf and XLA's generated classes:

    CompileOptionsProto          3: executable_build_options (message),
                                 7: env_option_overrides (map<string, OptionOverrideProto>)
    OptionOverrideProto          1: string, 2: bool, 3: int64, 4: double (one of them)
    ExecutableBuildOptionsProto  4: num_replicas, 5: num_partitions (int64),
                                 6: use_spmd_partitioning (bool),
                                 9: device_assignment (message)
    DeviceAssignmentProto        1: replica_count, 2: computation_count (int32),
                                 3: computation_devices (repeated message)
    ComputationDevice            1: replica_device_ids (repeated int64)

A device assignment maps a logical id (replica, partition) to a device id;
here it is a list of rows, `assignment[replica][partition]`. XLA calls a
partition a "computation": DeviceAssignmentProto stores one row per
computation (partition), each listing the devices of its replicas.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from pjrt_ref.errors import InvalidArgument

DeviceAssignment = list[list[int]]   # assignment[replica][partition] = device id

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


@dataclass(frozen=True)
class BuildOptions:
    """What pjrt-ref takes from ExecutableBuildOptionsProto (0 = not set)."""

    num_replicas: int = 0
    num_partitions: int = 0
    use_spmd_partitioning: bool = False
    device_assignment: DeviceAssignment | None = None
    # `jit(..., compiler_options={...})`: (name, str | bool | int | float) pairs.
    option_overrides: tuple = ()
    # allow_spmd_sharding_propagation_to_parameters: which parameters JAX leaves to the
    # compiler's sharding propagation (one value: all of them).
    parameters_left_to_propagation: tuple[bool, ...] = ()


def parse_compile_options(blob: bytes) -> BuildOptions:
    """The build options in serialized CompileOptionsProto `blob` (empty: defaults)."""
    build = b""
    overrides = []
    for field, _, value in wire_fields(blob, "CompileOptionsProto"):
        if field == 3:
            build = value
        elif field == 7:
            overrides.append(_option_override(value))
    options: dict = {"option_overrides": tuple(overrides)}
    for field, _, value in wire_fields(build, "ExecutableBuildOptionsProto"):
        if field == 4:
            options["num_replicas"] = _signed(value)
        elif field == 5:
            options["num_partitions"] = _signed(value)
        elif field == 6:
            options["use_spmd_partitioning"] = bool(value)
        elif field == 9:
            options["device_assignment"] = parse_device_assignment(value)
        elif field == 18:      # packed, or one field per value
            left = packed_varints(value, "allow_spmd_sharding_propagation_to_parameters") \
                if isinstance(value, bytes) else [value]
            options["parameters_left_to_propagation"] = (
                options.get("parameters_left_to_propagation", ()) + tuple(bool(v) for v in left))
    return BuildOptions(**options)


def _option_override(entry: bytes) -> tuple[str, object]:
    """One `env_option_overrides` map entry (1: key, 2: OptionOverrideProto) as (name, value)."""
    name, value = "", None
    for field, _, item in wire_fields(entry, "env_option_overrides entry"):
        if field == 1:
            name = item.decode(errors="replace")
        elif field == 2:
            value = _override_value(item)
    if value is None:
        raise InvalidArgument(f"compile option {name!r} has no value")
    return name, value


def _override_value(blob: bytes) -> object:
    value = None
    for field, _, item in wire_fields(blob, "OptionOverrideProto"):
        if field == 1:
            value = item.decode(errors="replace")
        elif field == 2:
            value = bool(item)
        elif field == 3:
            value = _signed(item)
        elif field == 4:
            value = struct.unpack("<d", item.to_bytes(8, "little"))[0]
    return value


def parse_device_assignment(blob: bytes) -> DeviceAssignment:
    """DeviceAssignmentProto bytes -> `assignment[replica][partition]`."""
    replica_count = computation_count = 0
    columns: list[list[int]] = []
    for field, wire, value in wire_fields(blob, "DeviceAssignmentProto"):
        if field == 1:
            replica_count = _signed(value)
        elif field == 2:
            computation_count = _signed(value)
        elif field == 3:
            columns.append(_repeated_ints(value))
    if replica_count <= 0 or computation_count <= 0 or len(columns) != computation_count \
            or any(len(column) != replica_count for column in columns):
        raise InvalidArgument(
            f"device assignment is not a {replica_count} replica(s) x {computation_count} "
            f"partition(s) grid: {columns}")
    return [[columns[p][r] for p in range(computation_count)] for r in range(replica_count)]


def encode_device_assignment(assignment: DeviceAssignment) -> bytes:
    """`assignment[replica][partition]` -> DeviceAssignmentProto bytes."""
    replicas, partitions = len(assignment), len(assignment[0])
    out = varint_field(1, replicas) + varint_field(2, partitions)
    for p in range(partitions):
        column = packed_field(1, [assignment[r][p] for r in range(replicas)])   # replica_device_ids
        out += bytes_field(3, column)
    return out


# ------------------------------------------------------------ wire format: writing
def varint_field(field: int, value: int) -> bytes:
    """One integer (or bool, or enum) field; negative numbers as int64 two's complement."""
    return _tag(field, _VARINT) + _varint(int(value))


def packed_field(field: int, values: list[int]) -> bytes:
    """A packed repeated integer field (proto3's encoding of `repeated int64`/`bool`)."""
    return bytes_field(field, b"".join(_varint(int(v)) for v in values))


def bytes_field(field: int, payload: bytes) -> bytes:
    """A length-delimited field: a nested message, a string or bytes."""
    return _tag(field, _LEN) + _varint(len(payload)) + payload


# ------------------------------------------------------------ wire format: reading
def wire_fields(data: bytes, what: str):
    """(field number, wire type, value) of each field; LEN values are bytes."""
    position = 0
    while position < len(data):
        key, position = _read_varint(data, position, what)
        field, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, position = _read_varint(data, position, what)
        elif wire == _LEN:
            size, position = _read_varint(data, position, what)
            value, position = data[position:position + size], position + size
            if position > len(data):
                raise InvalidArgument(f"{what}: field {field} runs past the end")
        elif wire in (_I64, _I32):
            size = 8 if wire == _I64 else 4
            value, position = int.from_bytes(data[position:position + size], "little"), position + size
        else:
            raise InvalidArgument(f"{what}: field {field} has unknown wire type {wire}")
        yield field, wire, value


def _read_varint(data: bytes, position: int, what: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise InvalidArgument(f"{what}: truncated or overlong varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def _repeated_ints(column: bytes) -> list[int]:
    """ComputationDevice.replica_device_ids, packed or one field per id."""
    ids: list[int] = []
    for field, wire, value in wire_fields(column, "ComputationDevice"):
        if field != 1:
            continue
        if wire == _LEN:
            ids.extend(_signed(item) for item in packed_varints(value, "replica_device_ids"))
        else:
            ids.append(_signed(value))
    return ids


def packed_varints(data: bytes, what: str) -> list[int]:
    """The values of a packed repeated integer field (one LEN field of varints)."""
    values, position = [], 0
    while position < len(data):
        value, position = _read_varint(data, position, what)
        values.append(value)
    return values


def _signed(value: int) -> int:
    """A varint read as int64 (negative numbers are 10-byte two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def resolve_count(what: str, from_options: int, from_module: int) -> int:
    """A replica or partition count: the compile options' if set (> 0), else the module's.

    A module that asks for more than one (`mhlo.num_replicas`/`num_partitions`)
    must agree with options that set the count.
    """
    from_module = int(from_module or 1)
    if from_options <= 0:
        return from_module
    if from_module != 1 and from_module != from_options:
        raise InvalidArgument(f"the compile options ask for {from_options} {what}, "
                              f"the program's module for {from_module}")
    return int(from_options)
