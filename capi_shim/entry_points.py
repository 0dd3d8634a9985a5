"""The `PJRT_Api` function table, in slot order (PJRT C API 0.114).

`PJRT_Api` is `struct_size`, `extension_start`, `pjrt_api_version`, then one
function pointer per entry point, in exactly this order (the order of the
`_PJRT_API_STRUCT_FIELD` lines in pjrt_c_api.h). Slot order is ABI: a new
entry point is only ever appended, so a caller built against an older header
reads a prefix of this table.

build_shim.py generates from this one table: the `PJRT_Api` struct, one
`extern "Python"` callback per slot and the static table that
`GetPjrtApi()` returns. `pjrt_ref.capi` binds every slot to a Python function
(the unimplemented ones to a stub answering UNIMPLEMENTED by name).
"""
from __future__ import annotations

API_MAJOR = 0
API_MINOR = 114

# Entry points whose C return type is `void` rather than `PJRT_Error*`.
RETURNS_VOID = frozenset({"PJRT_Error_Destroy", "PJRT_Error_Message"})

# Entry points with a C fast path (capi_shim/fast_paths.c): the slot first
# tries `pjrt_ref_fast_<name>(args)`, which answers the easy valid case in C
# (the per-execution queries JAX makes), and otherwise calls Python as usual.
FAST_PATHS = frozenset({
    "PJRT_Executable_NumReplicas", "PJRT_Executable_NumPartitions", "PJRT_Executable_NumOutputs",
    "PJRT_Buffer_Device", "PJRT_Buffer_Memory", "PJRT_Buffer_IsDeleted", "PJRT_Buffer_ReadyEvent",
    "PJRT_Buffer_Destroy", "PJRT_Buffer_IsOnCpu",
    "PJRT_Memory_Kind",
    "PJRT_Event_Destroy", "PJRT_Event_IsReady", "PJRT_Event_Error", "PJRT_Event_Await", "PJRT_Event_OnReady",
    "PJRT_Error_Destroy",
})

SLOTS: tuple[str, ...] = (
    # errors, plugin, events
    "PJRT_Error_Destroy", "PJRT_Error_Message", "PJRT_Error_GetCode",
    "PJRT_Plugin_Initialize", "PJRT_Plugin_Attributes",
    "PJRT_Event_Destroy", "PJRT_Event_IsReady", "PJRT_Event_Error",
    "PJRT_Event_Await", "PJRT_Event_OnReady",
    # client
    "PJRT_Client_Create", "PJRT_Client_Destroy", "PJRT_Client_PlatformName",
    "PJRT_Client_ProcessIndex", "PJRT_Client_PlatformVersion",
    "PJRT_Client_Devices", "PJRT_Client_AddressableDevices",
    "PJRT_Client_LookupDevice", "PJRT_Client_LookupAddressableDevice",
    "PJRT_Client_AddressableMemories", "PJRT_Client_Compile",
    "PJRT_Client_DefaultDeviceAssignment", "PJRT_Client_BufferFromHostBuffer",
    # device description, device
    "PJRT_DeviceDescription_Id", "PJRT_DeviceDescription_ProcessIndex",
    "PJRT_DeviceDescription_Attributes", "PJRT_DeviceDescription_Kind",
    "PJRT_DeviceDescription_DebugString", "PJRT_DeviceDescription_ToString",
    "PJRT_Device_GetDescription", "PJRT_Device_IsAddressable",
    "PJRT_Device_LocalHardwareId", "PJRT_Device_AddressableMemories",
    "PJRT_Device_DefaultMemory", "PJRT_Device_MemoryStats",
    # memory
    "PJRT_Memory_Id", "PJRT_Memory_Kind", "PJRT_Memory_DebugString",
    "PJRT_Memory_ToString", "PJRT_Memory_AddressableByDevices",
    # executable
    "PJRT_Executable_Destroy", "PJRT_Executable_Name",
    "PJRT_Executable_NumReplicas", "PJRT_Executable_NumPartitions",
    "PJRT_Executable_NumOutputs", "PJRT_Executable_SizeOfGeneratedCodeInBytes",
    "PJRT_Executable_GetCostAnalysis", "PJRT_Executable_OutputMemoryKinds",
    "PJRT_Executable_OptimizedProgram", "PJRT_Executable_Serialize",
    # loaded executable
    "PJRT_LoadedExecutable_Destroy", "PJRT_LoadedExecutable_GetExecutable",
    "PJRT_LoadedExecutable_AddressableDevices", "PJRT_LoadedExecutable_Delete",
    "PJRT_LoadedExecutable_IsDeleted", "PJRT_LoadedExecutable_Execute",
    "PJRT_Executable_DeserializeAndLoad", "PJRT_LoadedExecutable_Fingerprint",
    # buffer
    "PJRT_Buffer_Destroy", "PJRT_Buffer_ElementType", "PJRT_Buffer_Dimensions",
    "PJRT_Buffer_UnpaddedDimensions", "PJRT_Buffer_DynamicDimensionIndices",
    "PJRT_Buffer_GetMemoryLayout", "PJRT_Buffer_OnDeviceSizeInBytes",
    "PJRT_Buffer_Device", "PJRT_Buffer_Memory", "PJRT_Buffer_Delete",
    "PJRT_Buffer_IsDeleted", "PJRT_Buffer_CopyToDevice",
    "PJRT_Buffer_ToHostBuffer", "PJRT_Buffer_IsOnCpu", "PJRT_Buffer_ReadyEvent",
    "PJRT_Buffer_UnsafePointer", "PJRT_Buffer_IncreaseExternalReferenceCount",
    "PJRT_Buffer_DecreaseExternalReferenceCount",
    "PJRT_Buffer_OpaqueDeviceMemoryDataPointer",
    # copy-to-device streams
    "PJRT_CopyToDeviceStream_Destroy", "PJRT_CopyToDeviceStream_AddChunk",
    "PJRT_CopyToDeviceStream_TotalBytes", "PJRT_CopyToDeviceStream_GranuleSize",
    "PJRT_CopyToDeviceStream_CurrentBytes",
    # topology, AOT compile
    "PJRT_TopologyDescription_Create", "PJRT_TopologyDescription_Destroy",
    "PJRT_TopologyDescription_PlatformName",
    "PJRT_TopologyDescription_PlatformVersion",
    "PJRT_TopologyDescription_GetDeviceDescriptions",
    "PJRT_TopologyDescription_Serialize", "PJRT_TopologyDescription_Attributes",
    "PJRT_Compile",
    # later additions, appended in the order they were introduced
    "PJRT_Executable_OutputElementTypes", "PJRT_Executable_OutputDimensions",
    "PJRT_Buffer_CopyToMemory", "PJRT_Client_CreateViewOfDeviceBuffer",
    "PJRT_Executable_Fingerprint", "PJRT_Client_TopologyDescription",
    "PJRT_Executable_GetCompiledMemoryStats", "PJRT_Memory_Kind_Id",
    "PJRT_ExecuteContext_Create", "PJRT_ExecuteContext_Destroy",
    "PJRT_Buffer_CopyRawToHost",
    "PJRT_AsyncHostToDeviceTransferManager_Destroy",
    "PJRT_AsyncHostToDeviceTransferManager_TransferData",
    "PJRT_Client_CreateBuffersForAsyncHostToDevice",
    "PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer",
    "PJRT_AsyncHostToDeviceTransferManager_Device",
    "PJRT_AsyncHostToDeviceTransferManager_BufferCount",
    "PJRT_AsyncHostToDeviceTransferManager_BufferSize",
    "PJRT_AsyncHostToDeviceTransferManager_SetBufferError",
    "PJRT_AsyncHostToDeviceTransferManager_AddMetadata",
    "PJRT_Client_DmaMap", "PJRT_Client_DmaUnmap",
    "PJRT_Client_CreateUninitializedBuffer",
    "PJRT_Client_UpdateGlobalProcessInfo",
    "PJRT_TopologyDescription_Deserialize",
    "PJRT_Client_CreateAliasBuffer", "PJRT_Client_FulfillAliasBuffer",
    "PJRT_LoadedExecutable_GetDeviceAssignment",
    "PJRT_Client_CreateErrorBuffer",
    "PJRT_AsyncHostToDeviceTransferManager_TransferLiteral",
    "PJRT_Buffer_CopyRawToHostFuture",
    "PJRT_Device_PoisonExecution", "PJRT_Device_CreateAsyncTrackingEvent",
    "PJRT_AsyncTrackingEvent_Destroy", "PJRT_Executable_GetCompileOptions",
    "PJRT_Buffer_DonateWithControlDependency",
    "PJRT_Event_Create", "PJRT_Event_Set", "PJRT_Device_GetAttributes",
    "PJRT_Client_Load", "PJRT_LoadedExecutable_AddressableDeviceLogicalIds",
    "PJRT_Buffer_Bitcast", "PJRT_Error_ForEachPayload",
    "PJRT_TopologyDescription_Fingerprint",
    "PJRT_Executable_ParameterMemoryKinds", "PJRT_Device_ClearMemoryStats",
    "PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace",
    "PJRT_TopologyDescription_GetMemorySpaceKindIds",
)


# Entry points outside the table: the functions of the extensions
# (capi_shim/extensions.py puts them on the `extension_start` chain), in each
# extension struct's field order.
LAYOUTS_FUNCTIONS: tuple[str, ...] = (
    "PJRT_Layouts_MemoryLayout_Destroy",
    "PJRT_Layouts_MemoryLayout_Serialize",
    "PJRT_Layouts_PJRT_Client_GetDefaultLayout",
    "PJRT_Layouts_PJRT_Buffer_MemoryLayout",
    "PJRT_Layouts_PJRT_Topology_GetDefaultLayout",
    "PJRT_Layouts_PJRT_Executable_GetOutputLayouts",
    "PJRT_Layouts_PJRT_Executable_GetParameterLayouts",
)
SHARDINGS_FUNCTIONS: tuple[str, ...] = (
    "PJRT_Shardings_PJRT_Executable_ParameterShardings",
    "PJRT_Shardings_PJRT_Executable_OutputShardings",
)
# The Custom Partitioner extension's.
CUSTOM_PARTITIONER_FUNCTIONS: tuple[str, ...] = (
    "PJRT_Register_Custom_Partitioner",
    "PJRT_Register_Batch_Partitionable",
)
# The PJRT FFI extension's.
FFI_FUNCTIONS: tuple[str, ...] = (
    "PJRT_FFI_Type_Register",
    "PJRT_FFI_UserData_Add",
    "PJRT_FFI_Register_Handler",
)
# The MemoryDescriptions extension's.
MEMORY_DESCRIPTIONS_FUNCTIONS: tuple[str, ...] = (
    "PJRT_DeviceDescription_MemoryDescriptions",
    "PJRT_MemoryDescription_Kind",
)
EXTENSION_FUNCTIONS = (LAYOUTS_FUNCTIONS + SHARDINGS_FUNCTIONS + CUSTOM_PARTITIONER_FUNCTIONS
                       + FFI_FUNCTIONS + MEMORY_DESCRIPTIONS_FUNCTIONS)


def args_type(entry_point: str) -> str:
    """The Args struct an entry point takes: `PJRT_X` -> `PJRT_X_Args`."""
    return entry_point + "_Args"


def callback_name(entry_point: str) -> str:
    """Name of the cffi `extern "Python"` function behind a slot."""
    return "pjrt_ref_cb_" + entry_point[len("PJRT_"):]
