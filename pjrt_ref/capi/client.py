"""PJRT_Client_* entry points (pjrt_c_api.h "Client"), except buffer transfers (buffer.py)."""
from __future__ import annotations

from pjrt_ref.capi import handles
from pjrt_ref.model.client import Client, make_client
from pjrt_ref.model.executable import Executable
from pjrt_ref.errors import InvalidArgument
from pjrt_ref.distributed.cluster import ProcessState
from pjrt_ref.interpreter import bytecode_guard
from pjrt_ref.capi import cdata
from pjrt_ref.capi.kv_store import CallbackKeyValueStore
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args, bytes_arg, owned_array, owned_text, read_named_values, require_array, text_arg


def client_of(args: Args, field: str = "client") -> Client:
    return handles.get(getattr(args, field), Client, "PJRT_Client")


def register_client(client: Client):
    """Give the client and everything it owns their C handles."""
    client.handle = handles.add(client)
    for device in client.devices:
        device.handle = handles.add(device)
        device.description.handle = handles.add(device.description)
    for memory in client.memories:
        memory.handle = handles.add(memory)
    client.topology.handle = handles.add(client.topology)
    return client.handle


def unregister_client(client: Client) -> None:
    for device in client.devices:
        handles.remove(device.handle, object)
        handles.remove(device.description.handle, object)
    for memory in client.memories:
        handles.remove(memory.handle, object)
    handles.remove(client.topology.handle, object)
    handles.remove(client.handle, Client)


def device_list(owner, key: str, devices: list):
    """A `PJRT_Device* const*` array owned by `owner`."""
    return owned_array(owner, key, "void*", [d.handle for d in devices])


@entry_point("PJRT_Client_Create")
def client_create(args: Args) -> None:
    """PJRT_Client_Create: `num_devices` (int64) sets the number of virtual devices
    (default: $PJRT_REF_NUM_DEVICES, else 1); other options are recorded.

    JAX passes these options from `xla_bridge.register_plugin(..., options=...)`.
    After `jax.distributed.initialize` it also passes `node_id` and
    `num_nodes` and its key-value store (the kv callbacks): with more than
    one node, the processes agree on the global topology through the store
    and connect over MPI (`client.make_client`, `pjrt_ref/distributed/`).
    """
    options = {}
    if args.get("num_options", 0):
        options = read_named_values(args.create_options, args.num_options)
    store = CallbackKeyValueStore(args) if CallbackKeyValueStore.given(args) else None
    args.client = register_client(make_client(options, store))
    bytecode_guard.start_checker()     # ready by the first compile (bytecode_guard.py)


@entry_point("PJRT_Client_Destroy")
def client_destroy(args: Args) -> None:
    """PJRT_Client_Destroy: drops the client's device/memory/topology handles too,
    and stops a multi-process client's transport."""
    client = client_of(args)
    unregister_client(client)
    client.close()


# PJRT_ProcessState values (pjrt_c_api.h), as names.
_PROCESS_STATES = {0: "unspecified", 1: "uninitialized", 2: "disconnected", 3: "connected",
                   4: "error"}


@entry_point("PJRT_Client_UpdateGlobalProcessInfo")
def client_update_global_process_info(args: Args) -> None:
    """PJRT_Client_UpdateGlobalProcessInfo: the framework's news about every process
    (JAX's coordination service: connected, disconnected, in error, restarted).

    jaxlib's C API client aborts the process if this call fails
    (`PjRtCApiClient::UpdateGlobalProcessInfo` LOG(FATAL)s), so it always
    succeeds: a single-process client has nothing to do; a multi-process one
    records the states (`Cluster.process_states`). A process that is gone
    shows up to its peers as a collective that times out.
    """
    client = client_of(args)
    count = args.num_process_infos
    infos = require_array(args.process_infos, count, "process_infos") if count else []
    if client.cluster is None:
        return
    states = {}
    for i in range(count):
        info = infos[i]
        message = (cdata.ffi.unpack(info.error_message, info.error_message_size).decode("utf-8", "replace")
                   if info.error_message != cdata.NULL else "")
        states[int(info.task_id)] = ProcessState(int(info.incarnation_id),
                                                 _PROCESS_STATES.get(int(info.state), str(int(info.state))),
                                                 message)
    client.cluster.update_process_states(states)


@entry_point("PJRT_Client_PlatformName")
def client_platform_name(args: Args) -> None:
    """PJRT_Client_PlatformName: "pjrt_ref" (JAX's platform name for our devices)."""
    client = client_of(args)
    args.platform_name, args.platform_name_size = owned_text(client, "platform_name", client.platform_name)


@entry_point("PJRT_Client_PlatformVersion")
def client_platform_version(args: Args) -> None:
    """PJRT_Client_PlatformVersion."""
    client = client_of(args)
    args.platform_version, args.platform_version_size = owned_text(
        client, "platform_version", client.platform_version)


@entry_point("PJRT_Client_ProcessIndex")
def client_process_index(args: Args) -> None:
    """PJRT_Client_ProcessIndex: always 0 (single process)."""
    args.process_index = client_of(args).process_index


@entry_point("PJRT_Client_Devices")
def client_devices(args: Args) -> None:
    """PJRT_Client_Devices: all devices, owned by the client."""
    client = client_of(args)
    args.devices = device_list(client, "devices", client.devices)
    args.num_devices = len(client.devices)


@entry_point("PJRT_Client_AddressableDevices")
def client_addressable_devices(args: Args) -> None:
    """PJRT_Client_AddressableDevices."""
    client = client_of(args)
    args.addressable_devices = device_list(client, "addressable_devices", client.addressable_devices)
    args.num_addressable_devices = len(client.addressable_devices)


@entry_point("PJRT_Client_LookupDevice")
def client_lookup_device(args: Args) -> None:
    """PJRT_Client_LookupDevice: by global device id."""
    args.device = client_of(args).lookup_device(args.id).handle


@entry_point("PJRT_Client_LookupAddressableDevice")
def client_lookup_addressable_device(args: Args) -> None:
    """PJRT_Client_LookupAddressableDevice: by local hardware id."""
    args.addressable_device = client_of(args).lookup_addressable_device(args.local_hardware_id).handle


@entry_point("PJRT_Client_AddressableMemories")
def client_addressable_memories(args: Args) -> None:
    """PJRT_Client_AddressableMemories."""
    client = client_of(args)
    args.addressable_memories = owned_array(client, "memories", "void*", [m.handle for m in client.memories])
    args.num_addressable_memories = len(client.memories)


@entry_point("PJRT_Client_TopologyDescription")
def client_topology_description(args: Args) -> None:
    """PJRT_Client_TopologyDescription: owned by the client (callers do not destroy it)."""
    args.topology = client_of(args).topology.handle


@entry_point("PJRT_Client_DefaultDeviceAssignment")
def client_default_device_assignment(args: Args) -> None:
    """PJRT_Client_DefaultDeviceAssignment: fills the caller's int array with device ids,
    replica-major: `default_assignment[replica * num_partitions + partition]`
    (the order PjRtCApiClient reads it back in)."""
    client = client_of(args)
    assignment = client.default_device_assignment(args.num_replicas, args.num_partitions)
    flat = [device_id for row in assignment for device_id in row]
    if args.default_assignment_size < len(flat):
        raise InvalidArgument(
            f"default_assignment_size {args.default_assignment_size} < {len(flat)} needed")
    target = require_array(args.default_assignment, len(flat), "default_assignment")
    for i, device_id in enumerate(flat):
        target[i] = device_id


@entry_point("PJRT_Client_DmaMap")
def client_dma_map(args: Args) -> None:
    """PJRT_Client_DmaMap: accepted and recorded (pjrt_ref/model/client.py `dma_map`).

    Mapping registers host memory with a device for fast transfers. pjrt-ref's
    device memory is host memory, so there is nothing to register. XLA's CPU
    client answers UNIMPLEMENTED ("DmaMap not supported on platform cpu");
    pjrt-ref accepts, as XLA's GPU client does, so a caller that maps its
    staging memory before transferring works unchanged, and it records the
    mapping so that DmaUnmap can check it undoes one. NULL data, size 0 or a
    range overlapping a mapping are errors.
    """
    client_of(args).dma_map(handles.address(args.data), int(args.size))


@entry_point("PJRT_Client_DmaUnmap")
def client_dma_unmap(args: Args) -> None:
    """PJRT_Client_DmaUnmap: forgets a DmaMap mapping, by its start address; an address
    DmaMap did not map (or that was unmapped already) is INVALID_ARGUMENT."""
    client_of(args).dma_unmap(handles.address(args.data))


def read_program(program) -> tuple[bytes, str]:
    """(code, format) of a caller's `PJRT_Program`."""
    if program == cdata.NULL:
        raise InvalidArgument("PJRT_Program is NULL")
    fmt = text_arg(program.format, program.format_size)
    return bytes_arg(program.code, program.code_size), fmt


def register_loaded(loaded):
    loaded.handle = handles.add(loaded)
    return loaded.handle


@entry_point("PJRT_Client_Compile")
def client_compile(args: Args) -> None:
    """PJRT_Client_Compile: StableHLO ("mlir": text, bytecode or portable artifact) or an
    HloModuleProto ("hlo", what PyTorch/XLA sends; pjrt_ref/model/program_formats.py) -> executable.

    From the CompileOptionsProto bytes pjrt-ref reads the replica and
    partition counts and the device assignment (pjrt_ref/model/compile_options.py),
    which choose the executable's devices; the bytes are kept for
    PJRT_Executable_GetCompileOptions.
    """
    client = client_of(args)
    code, fmt = read_program(args.program)
    options = bytes_arg(args.compile_options, args.compile_options_size)
    args.executable = register_loaded(client.compile(code, fmt, options))


@entry_point("PJRT_Client_Load")
def client_load(args: Args) -> None:
    """PJRT_Client_Load: load an (AOT-compiled) executable onto this client."""
    client = client_of(args)
    executable = handles.get(args.executable, Executable, "PJRT_Executable")
    args.loaded_executable = register_loaded(client.load(executable))


@entry_point("PJRT_Executable_DeserializeAndLoad")
def executable_deserialize_and_load(args: Args) -> None:
    """PJRT_Executable_DeserializeAndLoad: the inverse of PJRT_Executable_Serialize."""
    client = client_of(args)
    blob = bytes_arg(args.serialized_executable, args.serialized_executable_size)
    options = None
    if args.get("overridden_serialized_compile_options_size", 0):
        options = bytes_arg(args.overridden_serialized_compile_options,
                            args.overridden_serialized_compile_options_size)
    args.loaded_executable = register_loaded(client.load(Executable.deserialize(blob, options)))
