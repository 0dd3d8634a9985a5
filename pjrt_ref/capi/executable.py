"""PJRT_Executable_*, PJRT_LoadedExecutable_* and PJRT_ExecuteContext_* entry points."""
from __future__ import annotations

import contextlib

from pjrt_ref.capi import handles
from pjrt_ref.interpreter.cost import cost_analysis, temp_bytes
from pjrt_ref.spmd import partitioner as spmd
from pjrt_ref.model.buffer import Buffer
from pjrt_ref.errors import InvalidArgument
from pjrt_ref.model.executable import Executable, LoadedExecutable
from pjrt_ref.capi import cdata, fast_paths
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args, hand_out_blob, owned, owned_array, owned_named_values, owned_text, require_array
from pjrt_ref.capi.event import new_event_handle
from pjrt_ref.capi.ffi_extension import ExecuteContext, attached_ffi_context
from pjrt_ref.capi.host_callbacks import attached_device_host_transfers, attached_host_transfers


def _executable(args: Args) -> Executable:
    return handles.get(args.executable, Executable, "PJRT_Executable")


def _loaded(args: Args, field: str = "executable") -> LoadedExecutable:
    return handles.get(getattr(args, field), LoadedExecutable, "PJRT_LoadedExecutable")


def _cost_analysis(exe: Executable) -> dict:
    """The per-op cost model's properties (interpreter/cost.py), computed once per executable."""
    return owned(exe, "cost_properties", lambda: cost_analysis(exe.program))


def _temp_bytes(exe: Executable) -> int:
    """Peak live intermediate bytes (interpreter/cost.py), computed once per executable."""
    return owned(exe, "temp_bytes", lambda: [temp_bytes(exe.program)])[0]


# ------------------------------------------------------------ executable
@entry_point("PJRT_Executable_Destroy")
def executable_destroy(args: Args) -> None:
    """PJRT_Executable_Destroy: frees this handle (the executable lives on while loaded)."""
    handles.remove(args.executable, Executable, "PJRT_Executable")


@entry_point("PJRT_Executable_Name")
def executable_name(args: Args) -> None:
    """PJRT_Executable_Name: the module's symbol name (JAX: "jit_<fn>")."""
    exe = _executable(args)
    args.executable_name, args.executable_name_size = owned_text(exe, "name", exe.name)


_COUNTS = {
    "PJRT_Executable_NumReplicas": ("num_replicas", "num_replicas"),
    "PJRT_Executable_NumPartitions": ("num_partitions", "num_partitions"),
    "PJRT_Executable_NumOutputs": ("num_outputs", "num_outputs"),
}


def _count_query(out_field: str, attribute: str):
    def query(args: Args) -> None:
        setattr(args, out_field, getattr(_executable(args), attribute))
    query.__doc__ = f"The executable's {attribute.replace('_', ' ')}."
    return query


for _name, (_field, _attribute) in _COUNTS.items():
    entry_point(_name)(_count_query(_field, _attribute))


@entry_point("PJRT_Executable_SizeOfGeneratedCodeInBytes")
def executable_size_of_generated_code(args: Args) -> None:
    """PJRT_Executable_SizeOfGeneratedCodeInBytes: the program's size (we generate no code)."""
    args.size_in_bytes = len(_executable(args).code)


@entry_point("PJRT_Executable_GetCostAnalysis")
def executable_get_cost_analysis(args: Args) -> None:
    """PJRT_Executable_GetCostAnalysis: XLA-style properties ("flops", "transcendentals",
    "bytes accessed", ...) from the per-op model in interpreter/cost.py, as kFloat values."""
    exe = _executable(args)
    args.properties, args.num_properties = owned_named_values(exe, "cost", _cost_analysis(exe))


def _memory_kinds(args: Args, kinds: tuple[str, ...], which: str, count_field: str) -> None:
    """Fill `memory_kinds`/`memory_kind_sizes` with `kinds` (texts owned by the executable)."""
    exe = _executable(args)
    texts = [owned_text(exe, ("memory_kind", kind), kind) for kind in kinds]
    setattr(args, count_field, len(kinds))
    args.memory_kinds = owned_array(exe, (which, "kinds"), "const char*", [text for text, _ in texts])
    args.memory_kind_sizes = owned_array(exe, (which, "kind_sizes"), "size_t", [size for _, size in texts])


@entry_point("PJRT_Executable_OutputMemoryKinds")
def executable_output_memory_kinds(args: Args) -> None:
    """PJRT_Executable_OutputMemoryKinds: each result's `mhlo.memory_kind`, "device" by default."""
    _memory_kinds(args, _executable(args).output_memory_kinds, "outputs", "num_outputs")


@entry_point("PJRT_Executable_ParameterMemoryKinds")
def executable_parameter_memory_kinds(args: Args) -> None:
    """PJRT_Executable_ParameterMemoryKinds: each parameter's `mhlo.memory_kind`, "device" by default."""
    _memory_kinds(args, _executable(args).parameter_memory_kinds, "parameters", "num_parameters")


@entry_point("PJRT_Executable_OutputElementTypes")
def executable_output_element_types(args: Args) -> None:
    """PJRT_Executable_OutputElementTypes."""
    exe = _executable(args)
    types = [int(t) for t in exe.output_buffer_types()]
    args.output_types = owned_array(exe, "output_types", "PJRT_Buffer_Type", types)
    args.num_output_types = len(types)


@entry_point("PJRT_Executable_OutputDimensions")
def executable_output_dimensions(args: Args) -> None:
    """PJRT_Executable_OutputDimensions: all dims concatenated, plus each output's rank.

    For a partitioned program these are one device's shard shapes (pjrt_ref/spmd/partitioner.py).
    """
    exe = _executable(args)
    partitioned = spmd.runner_for_executable(exe)
    dims = partitioned.output_shard_shapes(0) if partitioned else exe.output_dims()
    args.num_outputs = len(dims)
    args.dims = owned_array(exe, "output_dims", "int64_t", [d for shape in dims for d in shape])
    args.dim_sizes = owned_array(exe, "output_ranks", "size_t", [len(shape) for shape in dims])


@entry_point("PJRT_Executable_OptimizedProgram")
def executable_optimized_program(args: Args) -> None:
    """PJRT_Executable_OptimizedProgram: the parsed StableHLO text ("mlir").

    Two calls: with `program->code == NULL` report `code_size`; then copy.
    A program over several partitions also carries its parameter and output
    shardings, which the C API client reads from here (pjrt_ref/spmd/partitioner.py).
    """
    exe = _executable(args)
    program = args.program
    if program == cdata.NULL:
        raise InvalidArgument("PJRT_Executable_OptimizedProgram: program is NULL")
    text = spmd.optimized_program_text(exe).encode()
    fmt, fmt_size = owned_text(exe, "format", "mlir")
    program.format, program.format_size = fmt, fmt_size
    if program.code == cdata.NULL:
        program.code_size = len(text)
        return
    if program.code_size < len(text):
        raise InvalidArgument(f"program code buffer has {program.code_size} bytes, {len(text)} needed")
    cdata.ffi.memmove(program.code, text, len(text))
    program.code_size = len(text)


@entry_point("PJRT_Executable_Serialize")
def executable_serialize(args: Args) -> None:
    """PJRT_Executable_Serialize: our format (see Executable.serialize); freed by the deleter."""
    hand_out_blob(args, "serialized_bytes", "serialized_executable", "serialized_executable_deleter",
                  _executable(args).serialize())


@entry_point("PJRT_Executable_GetCompileOptions")
def executable_get_compile_options(args: Args) -> None:
    """PJRT_Executable_GetCompileOptions: the CompileOptionsProto bytes we were given."""
    hand_out_blob(args, "serialized_bytes", "serialized_compile_options",
                  "serialized_compile_options_deleter", _executable(args).compile_options)


def _fingerprint(owner, exe: Executable):
    return owned_text(owner, "fingerprint", exe.fingerprint)


@entry_point("PJRT_Executable_Fingerprint")
def executable_fingerprint(args: Args) -> None:
    """PJRT_Executable_Fingerprint: sha256 of program and compile options."""
    exe = _executable(args)
    args.executable_fingerprint, args.executable_fingerprint_size = _fingerprint(exe, exe)


@entry_point("PJRT_Executable_GetCompiledMemoryStats")
def executable_get_compiled_memory_stats(args: Args) -> None:
    """PJRT_Executable_GetCompiledMemoryStats: argument and output sizes; temp = peak bytes of
    live intermediates of the unfused entry function (interpreter/cost.py temp_bytes)."""
    exe = _executable(args)
    for field in ("generated_code_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
                  "host_generated_code_size_in_bytes", "host_argument_size_in_bytes",
                  "host_output_size_in_bytes", "host_alias_size_in_bytes", "host_temp_size_in_bytes",
                  "total_allocation_bytes", "indefinite_allocations", "peak_unpadded_heap_bytes"):
        setattr(args, field, 0)
    args.temp_size_in_bytes = _temp_bytes(exe)
    args.argument_size_in_bytes = exe.input_bytes()
    args.output_size_in_bytes = exe.output_bytes()
    args.peak_memory_in_bytes = exe.input_bytes() + exe.output_bytes() + _temp_bytes(exe)
    args.total_size_in_bytes = exe.input_bytes() + exe.output_bytes() + _temp_bytes(exe)


# ----------------------------------------------------- loaded executable
@entry_point("PJRT_LoadedExecutable_Destroy")
def loaded_executable_destroy(args: Args) -> None:
    """PJRT_LoadedExecutable_Destroy."""
    handles.remove(args.executable, LoadedExecutable, "PJRT_LoadedExecutable")


@entry_point("PJRT_LoadedExecutable_GetExecutable")
def loaded_executable_get_executable(args: Args) -> None:
    """PJRT_LoadedExecutable_GetExecutable: a new PJRT_Executable handle the caller destroys."""
    args.executable = handles.add(_loaded(args, "loaded_executable").executable)


@entry_point("PJRT_LoadedExecutable_AddressableDevices")
def loaded_executable_addressable_devices(args: Args) -> None:
    """PJRT_LoadedExecutable_AddressableDevices."""
    loaded = _loaded(args)
    args.addressable_devices = owned_array(loaded, "devices", "void*", [d.handle for d in loaded.devices])
    args.num_addressable_devices = len(loaded.devices)


@entry_point("PJRT_LoadedExecutable_Delete")
def loaded_executable_delete(args: Args) -> None:
    """PJRT_LoadedExecutable_Delete: later executions fail; the handle stays valid."""
    _loaded(args).deleted = True


@entry_point("PJRT_LoadedExecutable_IsDeleted")
def loaded_executable_is_deleted(args: Args) -> None:
    """PJRT_LoadedExecutable_IsDeleted."""
    args.is_deleted = _loaded(args).deleted


@entry_point("PJRT_LoadedExecutable_Fingerprint")
def loaded_executable_fingerprint(args: Args) -> None:
    """PJRT_LoadedExecutable_Fingerprint (deprecated in favour of the Executable one)."""
    loaded = _loaded(args)
    args.executable_fingerprint, args.executable_fingerprint_size = _fingerprint(loaded, loaded.executable)


@entry_point("PJRT_LoadedExecutable_AddressableDeviceLogicalIds")
def loaded_executable_addressable_device_logical_ids(args: Args) -> None:
    """PJRT_LoadedExecutable_AddressableDeviceLogicalIds: (replica, partition) per device."""
    loaded = _loaded(args)
    ids = loaded.logical_ids()
    array = owned(loaded, "logical_ids", lambda: cdata.ffi.new("PJRT_LogicalDeviceIds[]", ids))
    args.addressable_device_logical_ids = array
    args.num_addressable_device_logical_ids = len(ids)


@entry_point("PJRT_LoadedExecutable_GetDeviceAssignment")
def loaded_executable_get_device_assignment(args: Args) -> None:
    """PJRT_LoadedExecutable_GetDeviceAssignment: a serialized DeviceAssignmentProto."""
    hand_out_blob(args, "serialized_bytes", "serialized_device_assignment",
                  "serialized_device_assignment_deleter", _loaded(args).device_assignment_proto())


def _non_donatable(options) -> set[int]:
    if options == cdata.NULL:
        return set()
    opts = Args(options, "PJRT_ExecuteOptions")
    count = opts.get("num_non_donatable_input_indices", 0)
    if not count:
        return set()
    indices = require_array(opts.non_donatable_input_indices, count, "non_donatable_input_indices")
    return {int(indices[i]) for i in range(count)}


@entry_point("PJRT_LoadedExecutable_Execute")
def loaded_executable_execute(args: Args) -> None:
    """PJRT_LoadedExecutable_Execute: run synchronously on the executable's device(s).

    Arguments come as `argument_lists[device][arg]`; outputs go to the
    caller's `output_lists[device][output]`. Parameters the program marks
    donatable (and the caller does not list in `non_donatable_input_indices`)
    are deleted. Completion events, if asked for, are born ready.
    """
    if fast_paths.enabled and _execute_plain(args):
        return
    loaded = _loaded(args)
    num_devices = args.num_devices
    execute_device = args.get("execute_device", cdata.NULL)
    if execute_device != cdata.NULL:
        device = _chosen_device(loaded, execute_device, num_devices)
    elif num_devices != len(loaded.devices):
        raise InvalidArgument(f"executable runs on {len(loaded.devices)} device(s), got {num_devices} argument lists")
    else:
        device = loaded.devices[0]
    # Which inputs the caller keeps matters only to a program that donates some.
    non_donatable = _non_donatable(args.options) if loaded.executable.donor_indices else set()
    if num_devices > 1 or loaded.spans_processes:   # a multi-process program may have one device here
        return _execute_on_devices(args, loaded, non_donatable)
    _execute_on_one_device(args, loaded, device, non_donatable)


def _execute_plain(args: Args) -> bool:
    """Execute's plain case, most jitted calls: one device, nothing to donate,
    to attach or to choose. Its Args are read in C (`fast_paths.read_plain_execute`);
    False, having done nothing, if the call is not plain: the general path runs."""
    call = fast_paths.read_plain_execute(args.raw)
    if call is None:
        return False
    loaded = handles.get_address(call.executable, LoadedExecutable, "PJRT_LoadedExecutable")
    if not loaded.is_plain:
        return False
    arguments = [handles.get_address(key, Buffer, "PJRT_Buffer") for key in fast_paths.argument_keys(call)]
    _hand_out(loaded.execute(arguments, loaded.devices[0], set()), call.outputs)
    if call.complete_events != cdata.NULL:
        call.complete_events[0] = new_event_handle()
    return True


def _chosen_device(loaded: LoadedExecutable, execute_device, num_devices: int):
    """The device Execute's `execute_device` names: with it, one argument list runs on that
    device alone (XLA's ExecuteSharded, which PyTorch/XLA uses for every unsharded
    computation, although it compiles them for all devices as replicas). A one-device
    executable runs on any device (ExecutePortable); a multi-device one on one of its own."""
    device = handles.get(execute_device, type(loaded.devices[0]), "PJRT_Device")
    if num_devices != 1:
        raise InvalidArgument(f"with execute_device set, num_devices must be 1, got {num_devices}")
    if len(loaded.devices) > 1 and device not in loaded.devices:
        raise InvalidArgument(f"execute_device (id {device.id}) is not one of the executable's devices "
                              f"(ids {[d.id for d in loaded.devices]})")
    return device


def _execute_on_one_device(args: Args, loaded: LoadedExecutable, device, non_donatable: set[int]) -> None:
    """Execute's single-device case: `argument_lists[0]` in, `output_lists[0]` and one event out.

    This is the path of every jitted call on one device, so it does only what
    the call needs: the caller's send/recv callbacks are attached only for a
    program with host-channel ops (`Executable.uses_host_channel`); no other
    program can reach them.
    """
    num_args = args.num_args
    row = require_array(require_array(args.argument_lists, 1, "argument_lists")[0], num_args, "argument_lists[0]")
    out_row = require_array(require_array(args.output_lists, 1, "output_lists")[0],
                            loaded.executable.num_outputs, "output_lists[0]")
    arguments = [handles.get(row[i], Buffer, "PJRT_Buffer") for i in range(num_args)]
    ffi_context = attached_ffi_context(args.options)   # user data for FFI handlers, if any
    if ffi_context is None and not loaded.executable.uses_host_channel:
        outputs = loaded.execute(arguments, device, non_donatable)     # most executions: nothing to attach
    else:
        with ffi_context or contextlib.nullcontext(), attached_host_transfers(args.options, 0):
            outputs = loaded.execute(arguments, device, non_donatable)
    _hand_out(outputs, out_row)
    _hand_out_events(args, 1)


def _execute_on_devices(args: Args, loaded: LoadedExecutable, non_donatable: set[int]) -> None:
    """Execute's multi-device case: all argument lists at once (pjrt_ref/model/multi_device.py),
    the devices running concurrently; one output list and one event per device."""
    num_devices, num_args = args.num_devices, args.num_args
    argument_lists = require_array(args.argument_lists, num_devices, "argument_lists")
    output_lists = require_array(args.output_lists, num_devices, "output_lists")
    out_rows = [require_array(output_lists[d], loaded.executable.num_outputs, f"output_lists[{d}]")
                for d in range(num_devices)]
    rows = []
    for d in range(num_devices):
        row = require_array(argument_lists[d], num_args, f"argument_lists[{d}]")
        rows.append([handles.get(row[i], Buffer, "PJRT_Buffer") for i in range(num_args)])
    with attached_device_host_transfers(args.options, loaded.logical_ids()):   # each device's own callbacks
        results = loaded.execute_on_devices(rows, non_donatable)
    for out_row, outputs in zip(out_rows, results):
        _hand_out(outputs, out_row)
    _hand_out_events(args, num_devices)


def _hand_out(outputs: list[Buffer], out_row) -> None:
    """Give each output buffer a handle and write it into the caller's output list."""
    for j, buffer in enumerate(outputs):
        buffer.handle = handles.add(buffer)
        out_row[j] = buffer.handle


def _hand_out_events(args: Args, num_devices: int) -> None:
    """One completion event per device, if the caller asked for them (execution is already done)."""
    events = args.get("device_complete_events", cdata.NULL)
    if events != cdata.NULL:
        for d in range(num_devices):
            events[d] = new_event_handle()


# ------------------------------------------------------- execute context
@entry_point("PJRT_ExecuteContext_Create")
def execute_context_create(args: Args) -> None:
    """PJRT_ExecuteContext_Create."""
    args.context = handles.add(ExecuteContext())


@entry_point("PJRT_ExecuteContext_Destroy")
def execute_context_destroy(args: Args) -> None:
    """PJRT_ExecuteContext_Destroy."""
    handles.remove(args.context, ExecuteContext, "PJRT_ExecuteContext").destroy()
