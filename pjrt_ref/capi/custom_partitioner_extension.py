"""The PJRT Custom Partitioner extension (capi_shim/pjrt_custom_partitioner.h).

jaxlib registers, for every plugin that announces this extension, the
callbacks behind `jax.experimental.custom_partitioning`
(`register_custom_partitioner`, name "CustomSPMDPartitioning"). They arrive
as C function pointers; `CApiPartitioner` calls them with serialized
shapes and shardings and reads their answers, and the reference partitioner
uses it through the plain-Python face it registers under the name
(pjrt_ref/spmd/custom_partitioning.py: what the answers mean and how the
program runs them).

The callbacks are jaxlib's C++, which takes the GIL and calls JAX's Python;
cffi lets go of the GIL around each call, so calling them from Python (the
partitioner, at compile time) is safe.
"""
from __future__ import annotations

from pjrt_ref.errors import ErrorCode, InvalidArgument, PjrtRefError
from pjrt_ref.spmd import custom_partitioning
from pjrt_ref.capi import cdata
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args


@entry_point("PJRT_Register_Custom_Partitioner")
def register_custom_partitioner(args: Args) -> None:
    """Keep `callbacks` under `name` (a later registration of the name replaces it)."""
    args.require("callbacks")
    name = cdata.text_arg(args.name, args.name_size, "name")
    if args.callbacks == cdata.NULL:
        raise InvalidArgument(f"custom partitioner {name!r}: callbacks is NULL")
    custom_partitioning.register(name, CApiPartitioner(name, args.callbacks))


@entry_point("PJRT_Register_Batch_Partitionable")
def register_batch_partitionable(args: Args) -> None:
    """Note that custom call `name` may be split along its batch dimension.
    The reference runs every custom call on global values, so a split changes
    nothing it computes; the name is kept for what asks (`batch_partitionable`)."""
    custom_partitioning.mark_batch_partitionable(cdata.text_arg(args.name, args.name_size, "name"))


class CApiPartitioner:
    """One registered set of callbacks, called with bytes and answering bytes."""

    def __init__(self, name: str, callbacks) -> None:
        self.name = name
        self._callbacks = callbacks     # jaxlib's, alive until it calls dtor (never: kept for the process)

    def partition(self, operands: list[tuple[bytes, bytes | None]], result: tuple[bytes, bytes | None],
                  backend_config: bytes) -> tuple[bytes, list[bytes], bytes]:
        """(per-device MLIR module, the operand shardings it needs, the result's
        sharding), all serialized, for an op whose operands and result have
        these (ShapeProto, OpSharding or None) pairs."""
        ffi = cdata.ffi
        args = ffi.new("JAX_CustomCallPartitioner_Partition_Args*")
        keep = [args]
        args.num_args = len(operands)
        args.op_args = _avals(operands, keep)
        _fill_aval(args.op_result, *result, keep)
        _fill_string(args.backend_config, backend_config, keep)
        self._callbacks.partition(self._callbacks, args)
        with _results_of(args.header, self.name, "partition"):
            return (_read(args.mlir_module), [_read(args.args_sharding[i]) for i in range(len(operands))],
                    _read(args.result_sharding))

    def infer_sharding(self, operands: list[tuple[bytes, bytes | None]], result_shape: bytes,
                       backend_config: bytes) -> bytes | None:
        """The result's sharding (a serialized OpSharding) given the operands', or None."""
        ffi = cdata.ffi
        args = ffi.new("JAX_CustomCallPartitioner_InferShardingFromOperands_Args*")
        keep = [args]
        args.num_args = len(operands)
        args.op_args = _avals(operands, keep)
        _fill_string(args.result_shape, result_shape, keep)
        _fill_string(args.backend_config, backend_config, keep)
        self._callbacks.infer_sharding(self._callbacks, args)
        with _results_of(args.header, self.name, "infer_sharding"):
            return _read(args.result_sharding) if args.has_result_sharding else None


def _avals(operands: list[tuple[bytes, bytes | None]], keep: list):
    """A C array of one aval per (shape, sharding) pair, kept alive by `keep`."""
    avals = cdata.ffi.new("JAX_CustomCallPartitioner_aval[]", max(len(operands), 1))
    keep.append(avals)
    for aval, (shape, sharding) in zip(avals, operands):
        _fill_aval(aval, shape, sharding, keep)
    return avals


def _fill_string(field, data: bytes, keep: list) -> None:
    buffer = cdata.ffi.new("char[]", data or b"\0")
    keep.append(buffer)
    field.data, field.size = buffer, len(data)


def _fill_aval(aval, shape: bytes, sharding: bytes | None, keep: list) -> None:
    _fill_string(aval.shape, shape, keep)
    aval.has_sharding = sharding is not None
    if sharding is not None:
        _fill_string(aval.sharding, sharding, keep)


def _read(string) -> bytes:
    return bytes(cdata.ffi.buffer(string.data, string.size)) if string.size else b""


class _results_of:
    """Read a callback's answers, then let it free them (`cleanup_fn`); its
    error, if it reports one, becomes a PjrtRefError with its code."""

    def __init__(self, header, name: str, callback: str) -> None:
        self.header, self.where = header, f"custom partitioner {name!r} ({callback})"

    def __enter__(self) -> None:
        header = self.header
        if header.has_error:
            message = _read(header.error_msg).decode(errors="replace")
            self._cleanup()
            error = PjrtRefError(f"{self.where}: {message}")
            error.code = _error_code(header.code)
            raise error

    def __exit__(self, *exc) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        header = self.header
        if header.cleanup_fn != cdata.NULL:
            header.cleanup_fn(header.data)
            header.cleanup_fn = cdata.NULL


def _error_code(code: int) -> ErrorCode:
    try:
        return ErrorCode(int(code))
    except ValueError:
        return ErrorCode.INTERNAL
