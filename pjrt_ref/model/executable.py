"""`PJRT_Executable` and `PJRT_LoadedExecutable` around an interpreter Program.

Compilation parses and plans the StableHLO program once
(`pjrt_ref.interpreter.load`); execution calls the planned program on the
argument buffers' numpy arrays. The interpreter is imported lazily: it pulls
in jaxlib's MLIR bindings, which plugin registration must not pay for.
"""
from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import re
import threading
import time

import numpy as np

from pjrt_ref.interpreter.native import openblas_threads
from pjrt_ref.interpreter.types import TensorType
from pjrt_ref.model import layouts, memory, multi_device, program_cache, program_formats
from pjrt_ref.services import dumps, serialization
from pjrt_ref.interpreter import observer
from pjrt_ref.model.buffer import Buffer
from pjrt_ref.model.compile_options import encode_device_assignment, parse_compile_options, resolve_count
from pjrt_ref.model.dtypes import BufferType
from pjrt_ref.errors import InvalidArgument
from pjrt_ref.model.execution_io import buffer_type_of, delete_donated, donated_indices, output_buffers
from pjrt_ref.model.xla_options import check_option_overrides



_PAUSE_LOCK = threading.Lock()
_PAUSES = 0
_COLLECTOR_WAS_ENABLED = False


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector paused while a program is built.

    Planning allocates almost nothing but the plan, which lives as long as the
    executable, and a first compile imports the interpreter: in a JAX process
    (about 10^5 live objects) that crossed the threshold of a full
    collection, 50 to 60 ms in the middle of the first compile, scanning
    objects none of which were garbage (benchmarks/README.md, W0). Objects
    are still freed by reference counting meanwhile; the collector resumes
    when the last compile in flight ends, unless the host had turned it off."""
    global _PAUSES, _COLLECTOR_WAS_ENABLED
    with _PAUSE_LOCK:
        if _PAUSES == 0:
            _COLLECTOR_WAS_ENABLED = gc.isenabled()
            gc.disable()
        _PAUSES += 1
    try:
        yield
    finally:
        with _PAUSE_LOCK:
            _PAUSES -= 1
            if _PAUSES == 0 and _COLLECTOR_WAS_ENABLED:
                gc.enable()


class Executable:
    """A compiled (planned) program; shared by its loaded executables."""

    def __init__(self, code: bytes, compile_options: bytes = b"") -> None:
        from pjrt_ref.interpreter.program import load

        self.code = bytes(code)
        self.compile_options = bytes(compile_options)
        self.build_options = parse_compile_options(self.compile_options)
        if self.build_options.option_overrides:
            check_option_overrides(self.build_options.option_overrides)
        _limit_blas_threads()
        self.program = load(self.code)
        self.name = _module_name(self.program.text)
        self.output_types = tuple(self.program.output_types)
        self.input_signature = _static_signature(self.program.input_types)
        self.uses_host_channel = _uses_host_channel(self.program)
        self.donor_indices = _donor_indices(self.program)
        self.parameter_memory_kinds, self.output_memory_kinds = (
            tuple(_known_kind(kind) for kind in kinds) for kinds in self.program.entry_memory_kinds)
        self.parameter_layouts, self.output_layouts = _entry_layouts(self.program)
        # What each execution passes its output buffers: None for row-major (decided once, here).
        self.stored_output_layouts = tuple(None if order == layouts.row_major(len(order)) else order
                                           for order in self.output_layouts)
        self.fingerprint = _fingerprint(self.code, self.compile_options)
        self.result_specs: dict = {}    # device -> its results' execution_io.ResultSpec, made on first use

    @classmethod
    def compile(cls, code: bytes, fmt: str, compile_options: bytes = b"") -> "Executable":
        """`code` (a PJRT_Program in `fmt`) compiled with `compile_options`;
        the same Executable again for the same program, options and
        settings while program_cache.py keeps it."""
        start = time.perf_counter()
        built = []

        def build() -> Executable:
            with collector_paused():
                built.append(cls(program_formats.to_stablehlo(code, fmt), compile_options))
            return built[0]
        executable = program_cache.compiled(fmt, code, compile_options, build)
        if executable.compile_options != bytes(compile_options):
            executable = executable.with_compile_options(compile_options)
        dumps.dump_if_asked(executable.name, executable.program.text, executable.build_options.option_overrides)
        watch = observer.current     # PJRT_REF_PROFILE, jax.profiler.trace (interpreter/observer.py)
        if watch.recording:
            watch.slice(f"compile {executable.name}", "compile", start, time.perf_counter(),
                        {"program_bytes": len(executable.code), "kept_plan": not built})
        return executable

    def with_compile_options(self, compile_options: bytes) -> "Executable":
        """This plan under other option bytes that pjrt-ref reads the same
        (program_cache.py): what Serialize, GetCompileOptions and the
        fingerprint give back are the caller's bytes."""
        twin = copy.copy(self)
        twin.compile_options = bytes(compile_options)
        twin.fingerprint = _fingerprint(self.code, twin.compile_options)
        return twin

    def run(self, arrays: list[np.ndarray], watch: observer.Observer = observer.NOBODY) -> list:
        """The program's results on `arrays`, by the plan `watch` picks (the
        instrumented one under jax.profiler.trace; see interpreter/observer.py).

        `Program.__call__` checks each argument against the signature, then
        runs the plan. When every array already has the dtype and shape of a
        fully static signature (compared with `input_signature`, made once at
        compile time), that check cannot fail and the plan runs directly.
        """
        function = watch.function(self.program) if watch.picks_plans else self.program.function
        signature = self.input_signature
        if signature is not None and [(a.dtype, a.shape) for a in arrays] == signature:
            return function.run(arrays)
        return function.run(self.program.check_arguments(arrays))

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
        return [buffer_type_of(t) for t in self.output_types]

    def output_dims(self) -> list[tuple[int, ...]]:
        return [tuple(-1 if d is None else int(d) for d in getattr(t, "shape", ())) for t in self.output_types]

    def input_bytes(self) -> int:
        return sum(_nbytes(t) for t in self.program.input_types)

    def output_bytes(self) -> int:
        return sum(_nbytes(t) for t in self.output_types)

    # -- serialization --------------------------------------------------------
    def serialize(self) -> bytes:
        """The PJRT_Executable_Serialize blob: see pjrt_ref/services/serialization.py for the format."""
        return serialization.encode(self.code, self.compile_options)

    @classmethod
    def deserialize(cls, blob: bytes, compile_options: bytes | None = None) -> "Executable":
        """Inverse of `serialize`: checks the frame and digest, then compiles
        the program (`compile`: a kept Executable when there is one).

        `compile_options` (PJRT_Executable_DeserializeAndLoad's override)
        replaces the stored options when given.
        """
        code, options = serialization.decode(blob)
        return cls.compile(code, program_formats.MLIR, options if compile_options is None else compile_options)


def _known_kind(kind: str | None) -> str:
    """A parameter's or result's memory kind as the program names it
    (`mhlo.memory_kind`), "device" where it names none; a kind pjrt-ref
    has no memory of fails the compile."""
    if kind is None:
        return memory.DEVICE_KIND
    memory.kind_id(kind)
    return kind


def _entry_layouts(program) -> tuple[tuple, tuple]:
    """(parameter layouts, result layouts) as the entry function's `mhlo.layout_mode`s
    ask (model/layouts.py). A result whose layout is ours to choose ("auto")
    and that is a parameter seen through transposes gets the layout that
    makes them free, as XLA's layout assignment does: its array is then a
    view of the parameter's, stored as it is."""
    parameter_modes, result_modes = program.entry_layout_modes
    parameters = tuple(layouts.from_layout_mode(mode, _rank(t))
                       for mode, t in zip(parameter_modes, program.input_types))
    results = []
    for mode, ttype, source in zip(result_modes, program.output_types, program.entry_result_transposes):
        if mode == "auto" and source is not None:
            index, permutation = source
            results.append(layouts.transposed(parameters[index], permutation))
        else:
            results.append(layouts.from_layout_mode(mode, _rank(ttype)))
    return parameters, tuple(results)


def _rank(ttype) -> int:
    return len(getattr(ttype, "shape", ()))


def _fingerprint(code: bytes, compile_options: bytes) -> str:
    """PJRT_Executable_Fingerprint: the program and the options it was compiled with."""
    return hashlib.sha256(code + b"\0" + compile_options).hexdigest()


class LoadedExecutable:
    """An executable bound to a client's devices, ready to run."""

    def __init__(self, executable: Executable, client) -> None:
        self.executable = executable
        self.client = client
        # assignment[replica][partition] = device id; `devices`: the addressable ones,
        # in logical_ids order (in a multi-process job the others run elsewhere).
        self.assignment = multi_device.device_assignment(executable, client)
        placed = multi_device.assigned_devices(self.assignment, client)
        every_id = multi_device.logical_ids(self.assignment)
        self.devices = [d for d in placed if d.is_addressable]
        self._logical_ids = [i for i, d in zip(every_id, placed) if d.is_addressable]
        # (replica, partition) -> the process that runs it; "spans processes" when several do.
        self.hosts = {i: d.description.process_index for i, d in zip(every_id, placed)}
        self.spans_processes = len(set(self.hosts.values())) > 1
        # One device of this process, nothing donated, no host channel: the common
        # jitted call, which the C API layer runs by its plain path.
        self.is_plain = (len(self.devices) == 1 and not self.spans_processes
                         and not executable.donor_indices and not executable.uses_host_channel)
        self.deleted = False
        self.handle = None            # our PJRT_LoadedExecutable*
        self._lock = threading.Lock()

    def logical_ids(self) -> list[tuple[int, int]]:
        """(replica, partition) of each addressable device, in `devices` order."""
        return list(self._logical_ids)

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
        donated = donated_indices(exe, arguments, non_donatable) if exe.donor_indices else ()
        arrays = [buffer.array for buffer in arguments]
        watch = observer.current       # PJRT_REF_PROFILE, jax.profiler.trace (interpreter/observer.py)
        if watch.recording:
            start = time.perf_counter()
            outputs = exe.run(arrays, watch)
            watch.slice(f"execute {exe.name}", "execute", start, time.perf_counter(),
                        {"arguments": [f"{a.dtype}{list(a.shape)}" for a in arrays]})
        else:
            outputs = exe.run(arrays, watch)
        buffers = output_buffers(exe, outputs, device, arrays)
        if donated:
            delete_donated(arguments, donated)
        return buffers


def _limit_blas_threads() -> None:
    """Apply the interpreter's OpenBLAS thread setting before the first
    program is loaded. Once per process, whether or not the optimiser is on
    (the setting decides a product's bits)."""
    openblas_threads.PROCESS.limit()


# Ops that talk to the host channel (interpreter/ops/side_effects.py `host_channel`).
_HOST_CHANNEL_OPS = ("stablehlo.send", "stablehlo.recv", "stablehlo.infeed", "stablehlo.outfeed")


def _uses_host_channel(program) -> bool:
    """Whether the module has an op that needs the host channel (a conservative text search)."""
    return any(op in program.text for op in _HOST_CHANNEL_OPS)


def _static_signature(input_types) -> list[tuple[np.dtype, tuple[int, ...]]] | None:
    """[(dtype, shape)] of the entry function's parameters, or None unless all are static tensors."""
    signature = []
    for ttype in input_types:
        if type(ttype) is not TensorType or any(d is None for d in ttype.shape):
            return None
        signature.append((np.dtype(ttype.dtype), tuple(int(d) for d in ttype.shape)))
    return signature


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
    """Entry-function parameters the program gives up: each `tf.aliasing_output`
    (an alias the program names), and each `jax.buffer_donor` for which an
    output of the same size in bytes is left to reuse its buffer (XLA's alias
    pass pairs donors with outputs by buffer size, so `x.reshape(...)` reuses
    `x`). XLA gives a buffer donor up only when that pass finds such an
    output; otherwise the argument stays live (JAX warns "Some donated
    buffers were not usable")."""
    attributes = program.entry_argument_attributes
    aliased = [i for i, names in enumerate(attributes) if "tf.aliasing_output" in names]
    donors = [i for i, names in enumerate(attributes)
              if "jax.buffer_donor" in names and i not in aliased]
    free = [size for size in map(_buffer_size, program.output_types) if size is not None]
    usable = []
    for index in aliased + donors:
        size = _buffer_size(program.input_types[index])
        if size is not None and size in free:
            free.remove(size)
            usable.append(index)
    return frozenset(aliased + [i for i in usable if i in donors])


def _buffer_size(ttype) -> int | None:
    """The size in bytes of a static tensor type's buffer; None for others (a
    token, a dynamic shape: nothing to pair)."""
    shape = getattr(ttype, "shape", None)
    if shape is None or any(d is None for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(ttype.dtype).itemsize
