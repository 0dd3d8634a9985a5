"""`PJRT_Executable` and `PJRT_LoadedExecutable` around an interpreter Program.

Compilation parses and plans the StableHLO program once
(`pjrt_ref.interpreter.load`); execution calls the planned program on the
argument buffers' numpy arrays. The interpreter is imported lazily: it pulls
in jaxlib's MLIR bindings, which plugin registration must not pay for.
"""
from __future__ import annotations

import hashlib
import re
import os
import threading
import time

import numpy as np

from . import multi_device, serialization
from .buffer import Buffer
from .debug import live_profile
from .compile_options import encode_device_assignment, parse_compile_options, resolve_count
from .dtypes import BufferType, from_numpy
from .errors import Internal, InvalidArgument, Unimplemented

_DONOR_ATTRIBUTES = ("tf.aliasing_output", "jax.buffer_donor")
# PJRT_REF_PROFILE=FILE.json: compile and execute slices (pjrt_ref/debug/profile.py);
# the same go to jax.profiler.trace while `live_profile.ACTIVE` (pjrt_ref/debug/live_profile.py).
_PROFILING = bool(os.environ.get("PJRT_REF_PROFILE"))


def _profile_slice(name: str, category: str, start: float, args: dict) -> None:
    live_profile.record_and_profile(name, category, start, time.perf_counter(), args)


class Executable:
    """A compiled (planned) program; shared by its loaded executables."""

    def __init__(self, code: bytes, compile_options: bytes = b"") -> None:
        from .interpreter import load

        start = time.perf_counter()
        self.code = bytes(code)
        self.compile_options = bytes(compile_options)
        self.build_options = parse_compile_options(self.compile_options)
        _limit_blas_threads_before_the_loader_forks()
        self.program = load(self.code)
        self.name = _module_name(self.program.text)
        if _PROFILING or live_profile.ACTIVE:
            _profile_slice(f"compile {self.name}", "compile", start, {"program_bytes": len(self.code)})
        self.output_types = tuple(self.program.output_types)
        self.input_signature = _static_signature(self.program.input_types)
        self.uses_host_channel = _uses_host_channel(self.program)
        self.donor_indices = _donor_indices(self.program)
        self.fingerprint = hashlib.sha256(self.code + b"\0" + self.compile_options).hexdigest()

    def run(self, arrays: list[np.ndarray]) -> list:
        """The program's results on `arrays`.

        `Program.__call__` checks each argument against the signature, then
        runs the plan. When every array already has the dtype and shape of a
        fully static signature (compared with `input_signature`, made once at
        compile time), that check cannot fail and the plan runs directly.
        """
        signature = self.input_signature
        if signature is not None and [(a.dtype, a.shape) for a in arrays] == signature:
            return self.program.function.run(arrays)
        return self.program(*arrays)

    # -- queries ---------------------------------------------------------------
    @property
    def num_outputs(self) -> int:
        return len(self.output_types)

    @property
    def num_replicas(self) -> int:
        """From the compile options if they say, else the module's `mhlo.num_replicas`."""
        return resolve_count("replicas", self.build_options.num_replicas, self.program.num_replicas)

    @property
    def num_partitions(self) -> int:
        """From the compile options if they say, else the module's `mhlo.num_partitions`."""
        return resolve_count("partitions", self.build_options.num_partitions, self.program.num_partitions)

    def output_buffer_types(self) -> list[BufferType]:
        return [_buffer_type(t) for t in self.output_types]

    def output_dims(self) -> list[tuple[int, ...]]:
        return [tuple(-1 if d is None else int(d) for d in getattr(t, "shape", ())) for t in self.output_types]

    def input_bytes(self) -> int:
        return sum(_nbytes(t) for t in self.program.input_types)

    def output_bytes(self) -> int:
        return sum(_nbytes(t) for t in self.output_types)

    # -- serialization --------------------------------------------------------
    def serialize(self) -> bytes:
        """The PJRT_Executable_Serialize blob: see pjrt_ref/serialization.py for the format."""
        return serialization.encode(self.code, self.compile_options)

    @classmethod
    def deserialize(cls, blob: bytes, compile_options: bytes | None = None) -> "Executable":
        """Inverse of `serialize`: checks the frame and digest, then compiles the program.

        `compile_options` (PJRT_Executable_DeserializeAndLoad's override)
        replaces the stored options when given.
        """
        code, options = serialization.decode(blob)
        return cls(code, options if compile_options is None else compile_options)


class LoadedExecutable:
    """An executable bound to a client's devices, ready to run."""

    def __init__(self, executable: Executable, client) -> None:
        self.executable = executable
        self.client = client
        # assignment[replica][partition] = device id; devices in logical_ids order.
        self.assignment = multi_device.device_assignment(executable, client)
        self.devices = multi_device.assigned_devices(self.assignment, client)
        self.deleted = False
        self.handle = None            # our PJRT_LoadedExecutable*
        self._lock = threading.Lock()

    def logical_ids(self) -> list[tuple[int, int]]:
        """(replica, partition) of each addressable device, in `devices` order."""
        return multi_device.logical_ids(self.assignment)

    def device_assignment_proto(self) -> bytes:
        """xla.DeviceAssignmentProto of `assignment` (see compile_options.py)."""
        return encode_device_assignment(self.assignment)

    def execute_on_devices(self, argument_lists: list[list[Buffer]],
                           non_donatable: set[int]) -> list[list[Buffer]]:
        """Run once across all devices (`multi_device.execute`): an output list per device."""
        return multi_device.execute(self, argument_lists, non_donatable)

    def execute(self, arguments: list[Buffer], device, non_donatable: set[int]) -> list[Buffer]:
        """Run once on `device`; donated arguments are deleted; returns outputs."""
        if self.deleted:
            raise InvalidArgument("executable has been deleted")
        exe = self.executable
        arrays = [buffer.array for buffer in arguments]
        start = time.perf_counter()
        # Under jax.profiler.trace: the plan with every op instrumented (debug/live_profile.py).
        outputs = live_profile.run(exe.program, arrays) if live_profile.ACTIVE else exe.run(arrays)
        if _PROFILING or live_profile.ACTIVE:
            _profile_slice(f"execute {exe.name}", "execute", start,
                           {"arguments": [f"{a.dtype}{list(a.shape)}" for a in arrays]})
        if len(outputs) != exe.num_outputs:
            raise Internal(f"program returned {len(outputs)} results, signature says {exe.num_outputs}")
        for index in exe.donor_indices:
            if index < len(arguments) and index not in non_donatable:
                arguments[index].delete()
        return [Buffer(_output_array(i, out, t), device) for i, (out, t) in enumerate(zip(outputs, exe.output_types))]


def _limit_blas_threads_before_the_loader_forks() -> None:
    """Apply the interpreter's OpenBLAS thread setting before `load` forks
    (interpreter/jit/blas.py says why: set after a fork, it restarts an
    OpenBLAS worker that busy-waits a core for ~0.1 s). Once per process,
    whether or not the optimiser is on (the setting decides a product's bits)."""
    from .interpreter.jit import blas

    blas.limit_blas_threads()


# Ops that talk to the host channel (interpreter/ops/side_effects.py `host_channel`).
_HOST_CHANNEL_OPS = ("stablehlo.send", "stablehlo.recv", "stablehlo.infeed", "stablehlo.outfeed")


def _uses_host_channel(program) -> bool:
    """Whether the module has an op that needs the host channel (a conservative text search)."""
    return any(op in program.text for op in _HOST_CHANNEL_OPS)


def _static_signature(input_types) -> list[tuple[np.dtype, tuple[int, ...]]] | None:
    """[(dtype, shape)] of the entry function's parameters, or None unless all are static tensors."""
    from .interpreter.types import TensorType
    signature = []
    for ttype in input_types:
        if type(ttype) is not TensorType or any(d is None for d in ttype.shape):
            return None
        signature.append((np.dtype(ttype.dtype), tuple(int(d) for d in ttype.shape)))
    return signature


def _output_array(index: int, value, ttype) -> np.ndarray:
    array = np.asarray(value)
    expected = getattr(ttype, "dtype", None)
    if expected is None:             # a token: a zero-size placeholder
        return np.zeros((0,), np.bool_)
    if array.dtype != expected:
        raise Internal(f"result {index}: interpreter produced {array.dtype}, signature says {expected}")
    return array


def _buffer_type(ttype) -> BufferType:
    dtype = getattr(ttype, "dtype", None)
    return BufferType.TOKEN if dtype is None else from_numpy(dtype)


def _nbytes(ttype) -> int:
    dtype = getattr(ttype, "dtype", None)
    if dtype is None:
        return 0
    size = np.dtype(dtype).itemsize
    for d in ttype.shape:
        size *= 0 if d is None else int(d)
    return size


def _module_name(text: str) -> str:
    match = re.search(r"module\s+@\"?([\w.$-]+)", text)
    return match.group(1) if match else "main"


def _donor_indices(program) -> frozenset[int]:
    """Entry-function parameters marked donatable (`tf.aliasing_output`, `jax.buffer_donor`).

    Read from the parsed module once, at compile time.
    """
    module = getattr(program, "_module", None)
    if module is None:
        return frozenset()
    try:
        for op in module.body.operations:
            if op.operation.name != "func.func":
                continue
            from .interpreter.attributes import string_value

            if string_value(op.attributes["sym_name"]) != program.entry:
                continue
            if "arg_attrs" not in op.attributes:
                return frozenset()
            arg_attrs = op.attributes["arg_attrs"]
            return frozenset(i for i in range(len(arg_attrs))
                             if any(name in arg_attrs[i] for name in _DONOR_ATTRIBUTES))
    except Exception:  # pragma: no cover - donation is an optimisation; never fail compile on it
        return frozenset()
    return frozenset()


def check_program_format(fmt: str) -> None:
    if fmt == "hlo":
        raise Unimplemented("PJRT_Program format 'hlo' (HloModuleProto) is not supported; send StableHLO ('mlir')")
    if fmt != "mlir":
        raise InvalidArgument(f"unknown PJRT_Program format {fmt!r} (expected 'mlir')")
