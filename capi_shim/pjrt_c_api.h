/* pjrt-ref's own declaration of the PJRT C API (ABI version 0.114).
 *
 * Written for pjrt-ref from the facts of OpenXLA's xla/pjrt/c/pjrt_c_api.h
 * (names, field order, field types, enum values) and checked field by field
 * against pypjrt's layout-checked description of the 0.114 ABI
 * (tests/capi/test_capi_abi.py compares every size and offset).
 *
 * This file is read twice:
 *   - by the C compiler, as the header of the generated shim;
 *   - by cffi's cdef parser, after build_shim.py strips the preprocessor
 *     lines. So: no macros, no function bodies, only plain declarations.
 *
 * Every entry point of the 0.114 table has its Args struct spelled out here
 * (build_shim.py would forward-declare, from the slot table in
 * entry_points.py, any Args struct left out, so that its slot could still
 * exist in PJRT_Api and answer UNIMPLEMENTED without reading its fields).
 *
 * Convention of the API: every Args struct begins with `struct_size` (the
 * caller's sizeof up to its last known field) and `extension_start`; a plugin
 * reads only the fields that fit in the caller's struct_size.
 */
#ifndef PJRT_REF_PJRT_C_API_H_
#define PJRT_REF_PJRT_C_API_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ extensions */

typedef enum {
  PJRT_Extension_Type_Gpu_Custom_Call = 0,
  PJRT_Extension_Type_Profiler = 1,
  PJRT_Extension_Type_Custom_Partitioner = 2,
  PJRT_Extension_Type_Stream = 3,
  PJRT_Extension_Type_Layouts = 4,
  PJRT_Extension_Type_FFI = 5,
  PJRT_Extension_Type_MemoryDescriptions = 6,
  PJRT_Extension_Type_Triton = 7,
  PJRT_Extension_Type_RawBuffer = 8,
  PJRT_Extension_Type_PhaseCompile = 9,
  PJRT_Extension_Type_Example = 10,
  PJRT_Extension_Type_Unknown = 11,
  PJRT_Extension_Type_CrossHostTransfers = 12,
  PJRT_Extension_Type_ExecutableMetadata = 13,
  PJRT_Extension_Type_Callback = 14,
  PJRT_Extension_Type_HostAllocator = 15,
  PJRT_Extension_Type_TpuTopology = 16,
  PJRT_Extension_Type_TpuExecutable = 17,
  PJRT_Extension_Type_Megascale = 18,
  PJRT_Extension_Type_Shardings = 19,
  PJRT_Extension_Type_AbiVersion = 20,
  PJRT_Extension_Type_Collectives = 21,
  PJRT_Extension_Type_MultiSlice = 22,
  PJRT_Extension_Type_HostMemoryAllocator = 23,
  PJRT_Extension_Type_XlaTransform = 24
} PJRT_Extension_Type;

/* Every extension struct starts with this; they form a singly linked list
 * hanging off PJRT_Api.extension_start (pjrt-ref offers the profiler
 * extension: capi_shim/pjrt_profiler_extension.h). */
typedef struct PJRT_Extension_Base {
  size_t struct_size;
  PJRT_Extension_Type type;
  struct PJRT_Extension_Base* next;
} PJRT_Extension_Base;

/* --------------------------------------------------------------- version */

typedef struct PJRT_Api_Version {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  int major_version;
  int minor_version;
} PJRT_Api_Version;

/* ------------------------------------------------------- opaque handles */
/* The plugin hands these out; callers never look inside. In pjrt-ref each
 * one is a small allocation owned by a Python object (pjrt_ref/model/handles.py). */

typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Client PJRT_Client;
typedef struct PJRT_Device PJRT_Device;
typedef struct PJRT_DeviceDescription PJRT_DeviceDescription;
typedef struct PJRT_Memory PJRT_Memory;
typedef struct PJRT_TopologyDescription PJRT_TopologyDescription;
typedef struct PJRT_Executable PJRT_Executable;
typedef struct PJRT_LoadedExecutable PJRT_LoadedExecutable;
typedef struct PJRT_Buffer PJRT_Buffer;
typedef struct PJRT_Event PJRT_Event;
typedef struct PJRT_ExecuteContext PJRT_ExecuteContext;
typedef struct PJRT_SerializedExecutable PJRT_SerializedExecutable;
typedef struct PJRT_SerializedTopology PJRT_SerializedTopology;
typedef struct PJRT_SerializedCompileOptions PJRT_SerializedCompileOptions;
typedef struct PJRT_AsyncHostToDeviceTransferManager PJRT_AsyncHostToDeviceTransferManager;
/* Handed out by PJRT_Client_CreateAliasBuffer, consumed by PJRT_Client_FulfillAliasBuffer. */
typedef struct PJRT_FulfillAliasBufferCallback PJRT_FulfillAliasBufferCallback;
/* Made by PJRT_Device_CreateAsyncTrackingEvent, freed by PJRT_AsyncTrackingEvent_Destroy. */
typedef struct PJRT_AsyncTrackingEvent PJRT_AsyncTrackingEvent;

/* ---------------------------------------------------------------- errors */

typedef enum {
  PJRT_Error_Code_OK = 0,
  PJRT_Error_Code_CANCELLED = 1,
  PJRT_Error_Code_UNKNOWN = 2,
  PJRT_Error_Code_INVALID_ARGUMENT = 3,
  PJRT_Error_Code_DEADLINE_EXCEEDED = 4,
  PJRT_Error_Code_NOT_FOUND = 5,
  PJRT_Error_Code_ALREADY_EXISTS = 6,
  PJRT_Error_Code_PERMISSION_DENIED = 7,
  PJRT_Error_Code_RESOURCE_EXHAUSTED = 8,
  PJRT_Error_Code_FAILED_PRECONDITION = 9,
  PJRT_Error_Code_ABORTED = 10,
  PJRT_Error_Code_OUT_OF_RANGE = 11,
  PJRT_Error_Code_UNIMPLEMENTED = 12,
  PJRT_Error_Code_INTERNAL = 13,
  PJRT_Error_Code_UNAVAILABLE = 14,
  PJRT_Error_Code_DATA_LOSS = 15,
  PJRT_Error_Code_UNAUTHENTICATED = 16
} PJRT_Error_Code;

typedef struct PJRT_Error_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Error* error;
} PJRT_Error_Destroy_Args;

typedef struct PJRT_Error_Message_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  const char* message;          /* out, owned by the error */
  size_t message_size;          /* out */
} PJRT_Error_Message_Args;

typedef struct PJRT_Error_GetCode_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  PJRT_Error_Code code;         /* out */
} PJRT_Error_GetCode_Args;

/* Calls `visitor` once per payload (key/value byte strings) of the error. */
typedef struct PJRT_Error_ForEachPayload_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Error* error;
  void* visitor;                /* PJRT_Error_PayloadVisitor; pjrt-ref errors carry no payloads */
  void* user_arg;
} PJRT_Error_ForEachPayload_Args;

/* ---------------------------------------------------------- named values */

typedef enum {
  PJRT_NamedValue_kString = 0,
  PJRT_NamedValue_kInt64 = 1,
  PJRT_NamedValue_kInt64List = 2,
  PJRT_NamedValue_kFloat = 3,
  PJRT_NamedValue_kBool = 4
} PJRT_NamedValue_Type;

typedef struct PJRT_NamedValue {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* name;
  size_t name_size;
  PJRT_NamedValue_Type type;
  union {
    const char* string_value;
    int64_t int64_value;
    const int64_t* int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size;            /* string length, list length, or 1 */
} PJRT_NamedValue;

/* ---------------------------------------------------------------- plugin */

typedef struct PJRT_Plugin_Initialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
} PJRT_Plugin_Initialize_Args;

typedef struct PJRT_Plugin_Attributes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_NamedValue* attributes;  /* out, owned by the plugin */
  size_t num_attributes;              /* out */
} PJRT_Plugin_Attributes_Args;

/* ---------------------------------------------------------------- events */

typedef struct PJRT_Event_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
} PJRT_Event_Destroy_Args;

typedef struct PJRT_Event_IsReady_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
  bool is_ready;                /* out */
} PJRT_Event_IsReady_Args;

typedef struct PJRT_Event_Error_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
} PJRT_Event_Error_Args;

typedef struct PJRT_Event_Await_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
} PJRT_Event_Await_Args;

/* The callback owns `error` (NULL on success) and must destroy it. */
typedef void (*PJRT_Event_OnReadyCallback)(PJRT_Error* error, void* user_arg);

typedef struct PJRT_Event_OnReady_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
  PJRT_Event_OnReadyCallback callback;
  void* user_arg;
} PJRT_Event_OnReady_Args;

typedef struct PJRT_Event_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;            /* out */
} PJRT_Event_Create_Args;

typedef struct PJRT_Event_Set_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Event* event;
  PJRT_Error_Code error_code;
  const char* error_message;
  size_t error_message_size;
} PJRT_Event_Set_Args;

/* ---------------------------------------------------------------- client */

typedef struct PJRT_Client_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_NamedValue* create_options;
  size_t num_options;
  void* kv_get_callback;        /* PJRT_KeyValueGetCallback ("multi-process", below) */
  void* kv_get_user_arg;
  void* kv_put_callback;        /* PJRT_KeyValuePutCallback */
  void* kv_put_user_arg;
  PJRT_Client* client;          /* out */
  void* kv_try_get_callback;    /* PJRT_KeyValueTryGetCallback */
  void* kv_try_get_user_arg;
} PJRT_Client_Create_Args;

typedef struct PJRT_Client_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
} PJRT_Client_Destroy_Args;

typedef struct PJRT_Client_PlatformName_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* platform_name;    /* out, owned by the client */
  size_t platform_name_size;
} PJRT_Client_PlatformName_Args;

typedef struct PJRT_Client_ProcessIndex_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  int process_index;            /* out */
} PJRT_Client_ProcessIndex_Args;

typedef struct PJRT_Client_PlatformVersion_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* platform_version; /* out, owned by the client */
  size_t platform_version_size;
} PJRT_Client_PlatformVersion_Args;

typedef struct PJRT_Client_TopologyDescription_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_TopologyDescription* topology;  /* out, owned by the client */
} PJRT_Client_TopologyDescription_Args;

typedef struct PJRT_Client_Devices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Device* const* devices;  /* out, owned by the client */
  size_t num_devices;
} PJRT_Client_Devices_Args;

typedef struct PJRT_Client_AddressableDevices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Device* const* addressable_devices;
  size_t num_addressable_devices;
} PJRT_Client_AddressableDevices_Args;

typedef struct PJRT_Client_LookupDevice_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  int id;
  PJRT_Device* device;          /* out */
} PJRT_Client_LookupDevice_Args;

typedef struct PJRT_Client_LookupAddressableDevice_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  int local_hardware_id;
  PJRT_Device* addressable_device;  /* out */
} PJRT_Client_LookupAddressableDevice_Args;

typedef struct PJRT_Client_AddressableMemories_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Memory* const* addressable_memories;
  size_t num_addressable_memories;
} PJRT_Client_AddressableMemories_Args;

typedef struct PJRT_Program {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  char* code;                   /* in for Compile; out for OptimizedProgram */
  size_t code_size;
  const char* format;           /* "mlir" or "hlo" */
  size_t format_size;
} PJRT_Program;

typedef struct PJRT_Client_Compile_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const PJRT_Program* program;
  const char* compile_options;  /* serialized xla.CompileOptionsProto */
  size_t compile_options_size;
  PJRT_LoadedExecutable* executable;  /* out */
} PJRT_Client_Compile_Args;

typedef struct PJRT_Client_DefaultDeviceAssignment_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  int num_replicas;
  int num_partitions;
  size_t default_assignment_size;   /* capacity of default_assignment */
  int* default_assignment;          /* caller-owned, row-major [replica][partition] */
} PJRT_Client_DefaultDeviceAssignment_Args;

/* ---------------------------------------------------------- buffer types */

typedef enum {
  PJRT_Buffer_Type_INVALID = 0,
  PJRT_Buffer_Type_PRED = 1,
  PJRT_Buffer_Type_S8 = 2,
  PJRT_Buffer_Type_S16 = 3,
  PJRT_Buffer_Type_S32 = 4,
  PJRT_Buffer_Type_S64 = 5,
  PJRT_Buffer_Type_U8 = 6,
  PJRT_Buffer_Type_U16 = 7,
  PJRT_Buffer_Type_U32 = 8,
  PJRT_Buffer_Type_U64 = 9,
  PJRT_Buffer_Type_F16 = 10,
  PJRT_Buffer_Type_F32 = 11,
  PJRT_Buffer_Type_F64 = 12,
  PJRT_Buffer_Type_BF16 = 13,
  PJRT_Buffer_Type_C64 = 14,
  PJRT_Buffer_Type_C128 = 15,
  PJRT_Buffer_Type_F8E5M2 = 16,
  PJRT_Buffer_Type_F8E4M3FN = 17,
  PJRT_Buffer_Type_F8E4M3B11FNUZ = 18,
  PJRT_Buffer_Type_F8E5M2FNUZ = 19,
  PJRT_Buffer_Type_F8E4M3FNUZ = 20,
  PJRT_Buffer_Type_S4 = 21,
  PJRT_Buffer_Type_U4 = 22,
  PJRT_Buffer_Type_TOKEN = 23,
  PJRT_Buffer_Type_S2 = 24,
  PJRT_Buffer_Type_U2 = 25,
  PJRT_Buffer_Type_F8E4M3 = 26,
  PJRT_Buffer_Type_F8E3M4 = 27,
  PJRT_Buffer_Type_F8E8M0FNU = 28,
  PJRT_Buffer_Type_F4E2M1FN = 29,
  PJRT_Buffer_Type_S1 = 30,
  PJRT_Buffer_Type_U1 = 31,
  PJRT_Buffer_Type_F6E2M3FN = 32,
  PJRT_Buffer_Type_F6E3M2FN = 33
} PJRT_Buffer_Type;

typedef enum {
  PJRT_HostBufferSemantics_kImmutableOnlyDuringCall = 0,
  PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes = 1,
  PJRT_HostBufferSemantics_kImmutableZeroCopy = 2,
  PJRT_HostBufferSemantics_kMutableZeroCopy = 3
} PJRT_HostBufferSemantics;

typedef enum {
  PJRT_Buffer_MemoryLayout_Type_Tiled = 0,
  PJRT_Buffer_MemoryLayout_Type_Strides = 1
} PJRT_Buffer_MemoryLayout_Type;

typedef struct PJRT_Buffer_MemoryLayout_Tiled {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const int64_t* minor_to_major;
  size_t minor_to_major_size;
  const int64_t* tile_dims;     /* all tiles' dims, concatenated */
  const size_t* tile_dim_sizes; /* rank of each tile */
  size_t num_tiles;
} PJRT_Buffer_MemoryLayout_Tiled;

typedef struct PJRT_Buffer_MemoryLayout_Strides {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const int64_t* byte_strides;
  size_t num_byte_strides;
} PJRT_Buffer_MemoryLayout_Strides;

typedef struct PJRT_Buffer_MemoryLayout {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  union {
    PJRT_Buffer_MemoryLayout_Tiled tiled;
    PJRT_Buffer_MemoryLayout_Strides strides;
  };
  PJRT_Buffer_MemoryLayout_Type type;
} PJRT_Buffer_MemoryLayout;

typedef struct PJRT_Client_BufferFromHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const void* data;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  const int64_t* byte_strides;  /* NULL: dense row-major */
  size_t num_byte_strides;
  PJRT_HostBufferSemantics host_buffer_semantics;
  PJRT_Device* device;          /* exactly one of device/memory */
  PJRT_Memory* memory;
  PJRT_Buffer_MemoryLayout* device_layout;  /* NULL: default layout */
  PJRT_Event* done_with_host_buffer;        /* out */
  PJRT_Buffer* buffer;                      /* out */
} PJRT_Client_BufferFromHostBuffer_Args;

typedef struct PJRT_Client_CreateUninitializedBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const int64_t* shape_dims;
  size_t shape_num_dims;
  PJRT_Buffer_Type shape_element_type;
  PJRT_Buffer_MemoryLayout* shape_layout;
  PJRT_Device* device;
  PJRT_Memory* memory;
  PJRT_Buffer* buffer;          /* out */
} PJRT_Client_CreateUninitializedBuffer_Args;

/* A buffer whose ready event (and every read) fails with the given error. */
typedef struct PJRT_Client_CreateErrorBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Error_Code error_code;
  const char* error_message;
  size_t error_message_size;
  const int64_t* shape_dims;
  size_t shape_num_dims;
  PJRT_Buffer_Type shape_element_type;
  PJRT_Buffer_MemoryLayout* shape_layout;
  PJRT_Memory* memory;
  PJRT_Buffer* buffer;                /* out */
  const PJRT_NamedValue* payload;     /* string payloads of the error (since 0.103) */
  size_t num_payload;
} PJRT_Client_CreateErrorBuffer_Args;

/* A buffer over memory the caller owns; on_delete_callback(ptr, arg) when done with it. */
typedef struct PJRT_Client_CreateViewOfDeviceBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  void* device_buffer_ptr;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Buffer_Type element_type;
  PJRT_Buffer_MemoryLayout* layout;   /* NULL: default layout */
  PJRT_Device* device;                /* used only when `memory` is NULL or absent */
  void (*on_delete_callback)(void* device_buffer_ptr, void* user_arg);  /* optional */
  void* on_delete_callback_arg;
  intptr_t stream;                    /* a platform stream handle, 0 for none */
  PJRT_Buffer* buffer;                /* out */
  PJRT_Memory* memory;
} PJRT_Client_CreateViewOfDeviceBuffer_Args;

/* An alias buffer: its contents arrive later, through PJRT_Client_FulfillAliasBuffer. */
typedef struct PJRT_Client_CreateAliasBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Memory* memory;
  const int64_t* shape_dims;
  size_t shape_num_dims;
  PJRT_Buffer_Type shape_element_type;
  PJRT_Buffer_MemoryLayout* shape_layout;
  PJRT_Buffer* alias_buffer;                                 /* out */
  PJRT_FulfillAliasBufferCallback* fulfill_alias_buffer_cb;  /* out */
} PJRT_Client_CreateAliasBuffer_Args;

/* status_code OK: `buffer` gives the alias its contents; else the alias fails. */
typedef struct PJRT_Client_FulfillAliasBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Buffer* buffer;
  PJRT_Error_Code status_code;
  const char* error_message;
  size_t error_message_size;
  PJRT_FulfillAliasBufferCallback* fulfill_alias_buffer_cb;  /* consumed */
} PJRT_Client_FulfillAliasBuffer_Args;

/* Host memory registered for fast transfers, and released. */
typedef struct PJRT_Client_DmaMap_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  void* data;
  size_t size;
} PJRT_Client_DmaMap_Args;

typedef struct PJRT_Client_DmaUnmap_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  void* data;
} PJRT_Client_DmaUnmap_Args;

/* ------------------------------------------- async host-to-device transfers */

typedef struct PJRT_ShapeSpec {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Buffer_Type element_type;
} PJRT_ShapeSpec;

typedef struct PJRT_Client_CreateBuffersForAsyncHostToDevice_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_ShapeSpec* shape_specs;
  size_t num_shape_specs;
  PJRT_Buffer_MemoryLayout** device_layouts;  /* optional, one per spec */
  size_t num_device_layouts;
  PJRT_Memory* memory;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;  /* out */
} PJRT_Client_CreateBuffersForAsyncHostToDevice_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
} PJRT_AsyncHostToDeviceTransferManager_Destroy_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_TransferData_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  int buffer_index;
  const void* data;
  int64_t offset;
  int64_t transfer_size;
  bool is_last_transfer;
  PJRT_Event* done_with_h2d_transfer;   /* out */
} PJRT_AsyncHostToDeviceTransferManager_TransferData_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  int buffer_index;
  PJRT_Buffer* buffer_out;              /* out */
} PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_Device_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  PJRT_Device* device_out;              /* out */
} PJRT_AsyncHostToDeviceTransferManager_Device_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  size_t buffer_count;                  /* out */
} PJRT_AsyncHostToDeviceTransferManager_BufferCount_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  int buffer_index;
  size_t buffer_size;                   /* out */
} PJRT_AsyncHostToDeviceTransferManager_BufferSize_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  int buffer_index;
  PJRT_Error_Code error_code;
  const char* error_message;
  size_t error_message_size;
} PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args;

typedef struct PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  const PJRT_NamedValue* transfer_metadata;
  size_t num_metadata;
} PJRT_AsyncHostToDeviceTransferManager_AddMetadata_Args;

/* One whole host literal (dense, or in `shape_layout`) for buffer `buffer_index`. */
typedef struct PJRT_AsyncHostToDeviceTransferManager_TransferLiteral_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncHostToDeviceTransferManager* transfer_manager;
  int buffer_index;
  const void* data;
  const int64_t* shape_dims;
  size_t shape_num_dims;
  PJRT_Buffer_Type shape_element_type;
  PJRT_Buffer_MemoryLayout* shape_layout;
  PJRT_Event* done_with_h2d_transfer;   /* out */
} PJRT_AsyncHostToDeviceTransferManager_TransferLiteral_Args;

/* ---------------------------------------------------- device description */

typedef struct PJRT_DeviceDescription_Id_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  int id;                       /* out */
} PJRT_DeviceDescription_Id_Args;

typedef struct PJRT_DeviceDescription_ProcessIndex_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  int process_index;            /* out */
} PJRT_DeviceDescription_ProcessIndex_Args;

typedef struct PJRT_DeviceDescription_Attributes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  size_t num_attributes;              /* out */
  const PJRT_NamedValue* attributes;  /* out */
} PJRT_DeviceDescription_Attributes_Args;

typedef struct PJRT_DeviceDescription_Kind_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* device_kind;      /* out */
  size_t device_kind_size;
} PJRT_DeviceDescription_Kind_Args;

typedef struct PJRT_DeviceDescription_DebugString_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* debug_string;     /* out */
  size_t debug_string_size;
} PJRT_DeviceDescription_DebugString_Args;

typedef struct PJRT_DeviceDescription_ToString_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_DeviceDescription* device_description;
  const char* to_string;        /* out */
  size_t to_string_size;
} PJRT_DeviceDescription_ToString_Args;

/* ---------------------------------------------------------------- device */

typedef struct PJRT_Device_GetDescription_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  PJRT_DeviceDescription* device_description;  /* out */
} PJRT_Device_GetDescription_Args;

typedef struct PJRT_Device_IsAddressable_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  bool is_addressable;          /* out */
} PJRT_Device_IsAddressable_Args;

typedef struct PJRT_Device_LocalHardwareId_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  int local_hardware_id;        /* out */
} PJRT_Device_LocalHardwareId_Args;

typedef struct PJRT_Device_AddressableMemories_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  PJRT_Memory* const* memories; /* out */
  size_t num_memories;
} PJRT_Device_AddressableMemories_Args;

typedef struct PJRT_Device_DefaultMemory_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  PJRT_Memory* memory;          /* out */
} PJRT_Device_DefaultMemory_Args;

/* Each optional statistic has an `_is_set` flag. */
typedef struct PJRT_Device_MemoryStats_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  int64_t bytes_in_use;
  int64_t peak_bytes_in_use;
  bool peak_bytes_in_use_is_set;
  int64_t num_allocs;
  bool num_allocs_is_set;
  int64_t largest_alloc_size;
  bool largest_alloc_size_is_set;
  int64_t bytes_limit;
  bool bytes_limit_is_set;
  int64_t bytes_reserved;
  bool bytes_reserved_is_set;
  int64_t peak_bytes_reserved;
  bool peak_bytes_reserved_is_set;
  int64_t bytes_reservable_limit;
  bool bytes_reservable_limit_is_set;
  int64_t largest_free_block_bytes;
  bool largest_free_block_bytes_is_set;
  int64_t pool_bytes;
  bool pool_bytes_is_set;
  int64_t peak_pool_bytes;
  bool peak_pool_bytes_is_set;
  int64_t peak_allocated_bytes;
  bool peak_allocated_bytes_is_set;
} PJRT_Device_MemoryStats_Args;

typedef struct PJRT_Device_ClearMemoryStats_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
} PJRT_Device_ClearMemoryStats_Args;

typedef struct PJRT_DeviceAttributes PJRT_DeviceAttributes;

/* The attributes live until the caller calls attributes_deleter(device_attributes). */
typedef struct PJRT_Device_GetAttributes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  const PJRT_NamedValue* attributes;        /* out */
  size_t num_attributes;                    /* out */
  PJRT_DeviceAttributes* device_attributes; /* out: backs the attributes */
  void (*attributes_deleter)(PJRT_DeviceAttributes* attributes);
} PJRT_Device_GetAttributes_Args;

/* Make the earliest unfinished execution with `launch_id` on the device fail. */
typedef struct PJRT_Device_PoisonExecution_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  int32_t launch_id;
  PJRT_Error_Code error_code;
  const char* error_message;
  size_t error_message_size;
  bool poisoned;                      /* out */
  const PJRT_NamedValue* payload;     /* string payloads of the error (since 0.100) */
  size_t num_payload;
} PJRT_Device_PoisonExecution_Args;

/* A caller's note that asynchronous work depends on the device (it destroys the event). */
typedef struct PJRT_Device_CreateAsyncTrackingEvent_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Device* device;
  const char* description;
  size_t description_size;
  PJRT_AsyncTrackingEvent* event;     /* out; NULL is allowed (nothing tracked) */
} PJRT_Device_CreateAsyncTrackingEvent_Args;

typedef struct PJRT_AsyncTrackingEvent_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_AsyncTrackingEvent* event;
} PJRT_AsyncTrackingEvent_Destroy_Args;

/* ---------------------------------------------------------------- memory */

typedef struct PJRT_Memory_Id_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  int id;                       /* out */
} PJRT_Memory_Id_Args;

typedef struct PJRT_Memory_Kind_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  const char* kind;             /* out */
  size_t kind_size;
} PJRT_Memory_Kind_Args;

typedef struct PJRT_Memory_Kind_Id_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  int kind_id;                  /* out */
} PJRT_Memory_Kind_Id_Args;

typedef struct PJRT_Memory_DebugString_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  const char* debug_string;     /* out */
  size_t debug_string_size;
} PJRT_Memory_DebugString_Args;

typedef struct PJRT_Memory_ToString_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  const char* to_string;        /* out */
  size_t to_string_size;
} PJRT_Memory_ToString_Args;

typedef struct PJRT_Memory_AddressableByDevices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Memory* memory;
  PJRT_Device* const* devices;  /* out */
  size_t num_devices;
} PJRT_Memory_AddressableByDevices_Args;

/* ------------------------------------------------------------ topology */

typedef struct PJRT_TopologyDescription_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_TopologyDescription* topology;
} PJRT_TopologyDescription_Destroy_Args;

typedef struct PJRT_TopologyDescription_PlatformName_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  const char* platform_name;    /* out */
  size_t platform_name_size;
} PJRT_TopologyDescription_PlatformName_Args;

typedef struct PJRT_TopologyDescription_PlatformVersion_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_TopologyDescription* topology;
  const char* platform_version; /* out */
  size_t platform_version_size;
} PJRT_TopologyDescription_PlatformVersion_Args;

typedef struct PJRT_TopologyDescription_GetDeviceDescriptions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  PJRT_DeviceDescription* const* descriptions;  /* out */
  size_t num_descriptions;
} PJRT_TopologyDescription_GetDeviceDescriptions_Args;

typedef struct PJRT_TopologyDescription_Attributes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_TopologyDescription* topology;
  const PJRT_NamedValue* attributes;  /* out */
  size_t num_attributes;
} PJRT_TopologyDescription_Attributes_Args;

typedef struct PJRT_TopologyDescription_Fingerprint_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  uint64_t fingerprint;         /* out */
} PJRT_TopologyDescription_Fingerprint_Args;

/* A serialized xla.ShapeProto: the shape and layout a buffer of this shape
 * gets in memories of kind `memory_space_kind_id`; freed by the deleter. */
typedef struct PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  int memory_space_kind_id;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Buffer_Type element_type;
  const PJRT_Buffer_MemoryLayout* layout;       /* optional */
  const char* serialized_shape;                 /* out */
  size_t serialized_shape_size;                 /* out */
  void (*serialized_shape_deleter)(const char* serialized_shape);  /* out */
} PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace_Args;

/* The kind ids of the topology's memories, the default one first (owned by the topology). */
typedef struct PJRT_TopologyDescription_GetMemorySpaceKindIds_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  const int* memory_space_kind_ids;   /* out */
  size_t num_memory_space_kind_ids;   /* out */
} PJRT_TopologyDescription_GetMemorySpaceKindIds_Args;

typedef struct PJRT_TopologyDescription_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* topology_name;
  size_t topology_name_size;
  const PJRT_NamedValue* create_options;
  size_t num_options;
  PJRT_TopologyDescription* topology;  /* out, the caller destroys it */
} PJRT_TopologyDescription_Create_Args;

typedef struct PJRT_TopologyDescription_Serialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_TopologyDescription* topology;
  const char* serialized_bytes;                   /* out */
  size_t serialized_bytes_size;                   /* out */
  PJRT_SerializedTopology* serialized_topology;   /* out: backs the bytes */
  void (*serialized_topology_deleter)(PJRT_SerializedTopology* topology);
} PJRT_TopologyDescription_Serialize_Args;

typedef struct PJRT_TopologyDescription_Deserialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* serialized_topology;
  size_t serialized_topology_size;
  PJRT_TopologyDescription* topology;  /* out, the caller destroys it */
} PJRT_TopologyDescription_Deserialize_Args;

typedef struct PJRT_Compile_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_TopologyDescription* topology;
  const PJRT_Program* program;
  const char* compile_options;
  size_t compile_options_size;
  PJRT_Client* client;          /* optional */
  PJRT_Executable* executable;  /* out */
} PJRT_Compile_Args;

/* ------------------------------------------------------------ executable */

typedef struct PJRT_Executable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
} PJRT_Executable_Destroy_Args;

typedef struct PJRT_Executable_Name_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  const char* executable_name;  /* out */
  size_t executable_name_size;
} PJRT_Executable_Name_Args;

typedef struct PJRT_Executable_NumReplicas_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_replicas;          /* out */
} PJRT_Executable_NumReplicas_Args;

typedef struct PJRT_Executable_NumPartitions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_partitions;        /* out */
} PJRT_Executable_NumPartitions_Args;

typedef struct PJRT_Executable_NumOutputs_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;           /* out */
} PJRT_Executable_NumOutputs_Args;

typedef struct PJRT_Executable_SizeOfGeneratedCodeInBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  int64_t size_in_bytes;        /* out */
} PJRT_Executable_SizeOfGeneratedCodeInBytes_Args;

typedef struct PJRT_Executable_GetCostAnalysis_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_properties;              /* out */
  const PJRT_NamedValue* properties;  /* out */
} PJRT_Executable_GetCostAnalysis_Args;

typedef struct PJRT_Executable_OutputMemoryKinds_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;                 /* out */
  const char* const* memory_kinds;    /* out */
  const size_t* memory_kind_sizes;    /* out */
} PJRT_Executable_OutputMemoryKinds_Args;

typedef struct PJRT_Executable_ParameterMemoryKinds_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_parameters;              /* out */
  const char* const* memory_kinds;    /* out */
  const size_t* memory_kind_sizes;    /* out */
} PJRT_Executable_ParameterMemoryKinds_Args;

/* Two-call protocol: with program->code == NULL the plugin reports
 * code_size; the caller allocates and calls again. */
typedef struct PJRT_Executable_OptimizedProgram_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  PJRT_Program* program;        /* in/out */
} PJRT_Executable_OptimizedProgram_Args;

typedef struct PJRT_Executable_Serialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const PJRT_Executable* executable;
  const char* serialized_bytes;                 /* out */
  size_t serialized_bytes_size;                 /* out */
  PJRT_SerializedExecutable* serialized_executable;  /* out: backs the bytes */
  void (*serialized_executable_deleter)(PJRT_SerializedExecutable* exec);
} PJRT_Executable_Serialize_Args;

typedef struct PJRT_Executable_OutputElementTypes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  PJRT_Buffer_Type* output_types;   /* out */
  size_t num_output_types;          /* out */
} PJRT_Executable_OutputElementTypes_Args;

typedef struct PJRT_Executable_OutputDimensions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;           /* out */
  const int64_t* dims;          /* out: all outputs' dims, concatenated */
  const size_t* dim_sizes;      /* out: rank of each output */
} PJRT_Executable_OutputDimensions_Args;

typedef struct PJRT_Executable_Fingerprint_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  const char* executable_fingerprint;  /* out */
  size_t executable_fingerprint_size;
} PJRT_Executable_Fingerprint_Args;

typedef struct PJRT_Executable_GetCompiledMemoryStats_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  int64_t generated_code_size_in_bytes;  /* all out */
  int64_t argument_size_in_bytes;
  int64_t output_size_in_bytes;
  int64_t alias_size_in_bytes;
  int64_t temp_size_in_bytes;
  int64_t host_generated_code_size_in_bytes;
  int64_t host_argument_size_in_bytes;
  int64_t host_output_size_in_bytes;
  int64_t host_alias_size_in_bytes;
  int64_t host_temp_size_in_bytes;
  int64_t peak_memory_in_bytes;
  int64_t total_size_in_bytes;
  int64_t total_allocation_bytes;
  int64_t indefinite_allocations;
  int64_t peak_unpadded_heap_bytes;
} PJRT_Executable_GetCompiledMemoryStats_Args;

typedef struct PJRT_Executable_GetCompileOptions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  const char* serialized_bytes;                     /* out */
  size_t serialized_bytes_size;                     /* out */
  PJRT_SerializedCompileOptions* serialized_compile_options;  /* out */
  void (*serialized_compile_options_deleter)(
      PJRT_SerializedCompileOptions* options);
} PJRT_Executable_GetCompileOptions_Args;

typedef struct PJRT_LoadOptions PJRT_LoadOptions;

typedef struct PJRT_Executable_DeserializeAndLoad_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  const char* serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable* loaded_executable;         /* out */
  const char* overridden_serialized_compile_options;
  size_t overridden_serialized_compile_options_size;
  const PJRT_LoadOptions* load_options;
} PJRT_Executable_DeserializeAndLoad_Args;

typedef struct PJRT_Client_Load_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Executable* executable;
  const char* compile_options;
  size_t compile_options_size;
  PJRT_LoadedExecutable* loaded_executable;  /* out */
} PJRT_Client_Load_Args;

/* ----------------------------------------------------- loaded executable */

typedef struct PJRT_LoadedExecutable_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
} PJRT_LoadedExecutable_Destroy_Args;

typedef struct PJRT_LoadedExecutable_GetExecutable_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* loaded_executable;
  PJRT_Executable* executable;  /* out: a new handle the caller destroys */
} PJRT_LoadedExecutable_GetExecutable_Args;

typedef struct PJRT_LoadedExecutable_AddressableDevices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  PJRT_Device* const* addressable_devices;  /* out */
  size_t num_addressable_devices;
} PJRT_LoadedExecutable_AddressableDevices_Args;

typedef struct PJRT_LoadedExecutable_Delete_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
} PJRT_LoadedExecutable_Delete_Args;

typedef struct PJRT_LoadedExecutable_IsDeleted_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  bool is_deleted;              /* out */
} PJRT_LoadedExecutable_IsDeleted_Args;

typedef struct PJRT_LoadedExecutable_Fingerprint_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  const char* executable_fingerprint;  /* out */
  size_t executable_fingerprint_size;
} PJRT_LoadedExecutable_Fingerprint_Args;

typedef struct PJRT_LogicalDeviceIds {
  int replica;
  int partition;
} PJRT_LogicalDeviceIds;

typedef struct PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  PJRT_LogicalDeviceIds* addressable_device_logical_ids;  /* out, owned by the executable */
  size_t num_addressable_device_logical_ids;
} PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args;

typedef struct PJRT_DeviceAssignmentSerialized PJRT_DeviceAssignmentSerialized;

/* A serialized xla.DeviceAssignmentProto, freed by the deleter. */
typedef struct PJRT_LoadedExecutable_GetDeviceAssignment_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  const char* serialized_bytes;                               /* out */
  size_t serialized_bytes_size;                               /* out */
  PJRT_DeviceAssignmentSerialized* serialized_device_assignment;  /* out */
  void (*serialized_device_assignment_deleter)(
      PJRT_DeviceAssignmentSerialized* device_assignment);
} PJRT_LoadedExecutable_GetDeviceAssignment_Args;

/* Host callbacks (pjrt_c_api.h "PJRT_Chunk", "PJRT_SendCallbackInfo",
 * "PJRT_RecvCallbackInfo"): how a framework serves `stablehlo.send` and
 * `stablehlo.recv` with `is_host_transfer = true` (JAX's host callbacks on a
 * PJRT C-API plugin). "Send" is device -> host: the plugin hands a chunk to
 * the framework's send callback. "Recv" is host -> device: the plugin hands
 * a PJRT_CopyToDeviceStream to the recv callback, which fills it with
 * PJRT_CopyToDeviceStream_AddChunk. See pjrt_ref/services/host_callbacks.py. */
typedef struct PJRT_CopyToDeviceStream PJRT_CopyToDeviceStream;

typedef struct PJRT_Chunk {
  void* data;
  size_t size;
  void (*deleter)(void* data, void* deleter_arg);  /* whoever receives the chunk calls it */
  void* deleter_arg;
} PJRT_Chunk;

/* Made by the plugin, called by a callback to build the PJRT_Error it returns. */
typedef PJRT_Error* (*PJRT_CallbackError)(PJRT_Error_Code code, const char* message,
                                          size_t message_size);

typedef PJRT_Error* (*PJRT_SendCallback)(PJRT_Chunk* chunk, PJRT_CallbackError* callback_error,
                                         size_t total_size_in_bytes, bool done, void* user_arg);
typedef void (*PJRT_RecvCallback)(PJRT_CopyToDeviceStream* stream, void* user_arg);

typedef struct PJRT_SendCallbackInfo {
  int64_t channel_id;
  void* user_arg;
  PJRT_SendCallback send_callback;
} PJRT_SendCallbackInfo;

typedef struct PJRT_RecvCallbackInfo {
  int64_t channel_id;
  void* user_arg;
  PJRT_RecvCallback recv_callback;
} PJRT_RecvCallbackInfo;

typedef struct PJRT_CopyToDeviceStream_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_CopyToDeviceStream* stream;
} PJRT_CopyToDeviceStream_Destroy_Args;

typedef struct PJRT_CopyToDeviceStream_AddChunk_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_CopyToDeviceStream* stream;
  PJRT_Chunk* chunk;                 /* the plugin takes ownership (calls chunk->deleter) */
  PJRT_Event* transfer_complete;     /* out */
} PJRT_CopyToDeviceStream_AddChunk_Args;

typedef struct PJRT_CopyToDeviceStream_TotalBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_CopyToDeviceStream* stream;
  int64_t total_bytes;               /* out */
} PJRT_CopyToDeviceStream_TotalBytes_Args;

typedef struct PJRT_CopyToDeviceStream_GranuleSize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_CopyToDeviceStream* stream;
  int64_t granule_size_in_bytes;     /* out */
} PJRT_CopyToDeviceStream_GranuleSize_Args;

typedef struct PJRT_CopyToDeviceStream_CurrentBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_CopyToDeviceStream* stream;
  int64_t current_bytes;             /* out */
} PJRT_CopyToDeviceStream_CurrentBytes_Args;

typedef struct PJRT_ExecuteOptions {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_SendCallbackInfo** send_callbacks;   /* [num_devices][num_send_ops] */
  PJRT_RecvCallbackInfo** recv_callbacks;   /* [num_devices][num_recv_ops] */
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t* non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  PJRT_ExecuteContext* context;
  const char* call_location;
  size_t num_tasks;
  int* task_ids;
  int64_t* incarnation_ids;
  const void* multi_slice_config;
  bool use_major_to_minor_data_layout_for_callbacks;
  void* hlo_output_callbacks;
  size_t num_hlo_output_callbacks;
} PJRT_ExecuteOptions;

typedef struct PJRT_LoadedExecutable_Execute_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_LoadedExecutable* executable;
  PJRT_ExecuteOptions* options;
  PJRT_Buffer* const* const* argument_lists;  /* [num_devices][num_args] */
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer** const* output_lists;          /* [num_devices][num_outputs], caller-allocated */
  PJRT_Event** device_complete_events;        /* [num_devices] or NULL */
  PJRT_Device* execute_device;                /* NULL: the executable's devices */
} PJRT_LoadedExecutable_Execute_Args;

/* ---------------------------------------------------------------- buffer */

typedef struct PJRT_Buffer_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
} PJRT_Buffer_Destroy_Args;

typedef struct PJRT_Buffer_ElementType_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Buffer_Type type;        /* out */
} PJRT_Buffer_ElementType_Args;

typedef struct PJRT_Buffer_Dimensions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  const int64_t* dims;          /* out, owned by the buffer */
  size_t num_dims;
} PJRT_Buffer_Dimensions_Args;

typedef struct PJRT_Buffer_UnpaddedDimensions_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  const int64_t* unpadded_dims; /* out */
  size_t num_dims;
} PJRT_Buffer_UnpaddedDimensions_Args;

typedef struct PJRT_Buffer_DynamicDimensionIndices_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  const size_t* dynamic_dim_indices;  /* out */
  size_t num_dynamic_dims;
} PJRT_Buffer_DynamicDimensionIndices_Args;

typedef struct PJRT_Buffer_GetMemoryLayout_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Buffer_MemoryLayout layout;  /* out; arrays owned by the buffer */
} PJRT_Buffer_GetMemoryLayout_Args;

typedef struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  size_t on_device_size_in_bytes;  /* out */
} PJRT_Buffer_OnDeviceSizeInBytes_Args;

typedef struct PJRT_Buffer_Device_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Device* device;          /* out */
} PJRT_Buffer_Device_Args;

typedef struct PJRT_Buffer_Memory_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Memory* memory;          /* out */
} PJRT_Buffer_Memory_Args;

typedef struct PJRT_Buffer_Delete_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
} PJRT_Buffer_Delete_Args;

typedef struct PJRT_Buffer_IsDeleted_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  bool is_deleted;              /* out */
} PJRT_Buffer_IsDeleted_Args;

typedef struct PJRT_Buffer_CopyToDevice_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Device* dst_device;
  PJRT_Buffer* dst_buffer;      /* out */
} PJRT_Buffer_CopyToDevice_Args;

typedef struct PJRT_Buffer_CopyToMemory_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Memory* dst_memory;
  PJRT_Buffer* dst_buffer;      /* out */
} PJRT_Buffer_CopyToMemory_Args;

/* Two-call protocol: dst == NULL asks for dst_size. */
typedef struct PJRT_Buffer_ToHostBuffer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* src;
  PJRT_Buffer_MemoryLayout* host_layout;  /* NULL: dense row-major */
  void* dst;
  size_t dst_size;
  PJRT_Event* event;            /* out */
} PJRT_Buffer_ToHostBuffer_Args;

typedef struct PJRT_Buffer_CopyRawToHost_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  void* dst;
  int64_t offset;
  int64_t transfer_size;
  PJRT_Event* event;            /* out */
} PJRT_Buffer_CopyRawToHost_Args;

/* What the caller passes, once, to the future_ready_callback CopyRawToHostFuture
 * handed out: the destination (error_code OK) or why there is none. */
typedef struct PJRT_Buffer_CopyRawToHostFuture_Callback_Args {
  size_t struct_size;
  void* callback_data;          /* as the plugin handed it out */
  PJRT_Error_Code error_code;
  const char* error_message;    /* read only if error_code is not OK */
  size_t error_message_size;
  void* dst;                    /* read only if error_code is OK */
} PJRT_Buffer_CopyRawToHostFuture_Callback_Args;

/* CopyRawToHost whose destination comes later, through the callback. */
typedef struct PJRT_Buffer_CopyRawToHostFuture_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  int64_t offset;
  int64_t transfer_size;
  PJRT_Event* event;            /* out: completes once the bytes are written */
  void* callback_data;          /* out */
  void (*future_ready_callback)(PJRT_Buffer_CopyRawToHostFuture_Callback_Args* args);  /* out */
} PJRT_Buffer_CopyRawToHostFuture_Args;

/* The same bytes as another element type and dims (the input is donated). */
typedef struct PJRT_Buffer_Bitcast_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Buffer_Type element_type;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Buffer_MemoryLayout* device_layout;  /* NULL: the default layout */
  PJRT_Buffer* out_buffer;                  /* out */
} PJRT_Buffer_Bitcast_Args;

/* What the caller passes, once, to the dependency_ready_callback. */
typedef struct PJRT_Buffer_DonateWithControlDependency_Callback_Args {
  size_t struct_size;
  void* callback_data;
  PJRT_Error_Code error_code;   /* OK: the dependency is ready */
  const char* error_message;
  size_t error_message_size;
} PJRT_Buffer_DonateWithControlDependency_Callback_Args;

/* Donate `buffer` to out_buffer, which is ready once the dependency is too. */
typedef struct PJRT_Buffer_DonateWithControlDependency_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  void* callback_data;          /* out */
  void (*dependency_ready_callback)(PJRT_Buffer_DonateWithControlDependency_Callback_Args* args);  /* out */
  PJRT_Buffer* out_buffer;      /* out */
} PJRT_Buffer_DonateWithControlDependency_Args;

typedef struct PJRT_Buffer_IsOnCpu_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  bool is_on_cpu;               /* out */
} PJRT_Buffer_IsOnCpu_Args;

typedef struct PJRT_Buffer_ReadyEvent_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Event* event;            /* out: a new event the caller destroys */
} PJRT_Buffer_ReadyEvent_Args;

typedef struct PJRT_Buffer_UnsafePointer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  uintptr_t buffer_pointer;     /* out */
} PJRT_Buffer_UnsafePointer_Args;

typedef struct PJRT_Buffer_IncreaseExternalReferenceCount_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
} PJRT_Buffer_IncreaseExternalReferenceCount_Args;

typedef struct PJRT_Buffer_DecreaseExternalReferenceCount_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
} PJRT_Buffer_DecreaseExternalReferenceCount_Args;

typedef struct PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  void* device_memory_ptr;      /* out */
} PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args;

/* ------------------------------------------------------ execute context */

typedef struct PJRT_ExecuteContext_Create_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_ExecuteContext* context; /* out */
} PJRT_ExecuteContext_Create_Args;

typedef struct PJRT_ExecuteContext_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_ExecuteContext* context;
} PJRT_ExecuteContext_Destroy_Args;

/* ------------------------------------------------------- multi-process
 * A framework running one process per host (JAX's multi-controller mode)
 * hands PJRT_Client_Create a key-value store shared by all processes, as
 * three callbacks (the Create Args keep them as void*; these are their
 * types), and later tells the client how its peers are doing through
 * PJRT_Client_UpdateGlobalProcessInfo. pjrt-ref exchanges its topology and
 * its MPI rendezvous through the store (pjrt_ref/distributed/). */

/* Frees the value a get callback returned; the plugin copies it first. */
typedef void (*PJRT_KeyValueGetCallback_ValueDeleter)(char* value);

typedef struct PJRT_KeyValueGetCallback_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* key;
  size_t key_size;
  int timeout_in_ms;
  PJRT_CallbackError* callback_error;
  void* user_arg;
  char* value;                  /* out */
  size_t value_size;            /* out */
  PJRT_KeyValueGetCallback_ValueDeleter value_deleter_callback;  /* out */
} PJRT_KeyValueGetCallback_Args;

/* Blocks until `key` exists or the timeout passes (then an error). */
typedef PJRT_Error* (*PJRT_KeyValueGetCallback)(PJRT_KeyValueGetCallback_Args* args);

typedef struct PJRT_KeyValueTryGetCallback_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* key;
  size_t key_size;
  PJRT_CallbackError* callback_error;
  void* user_arg;
  char* value;                  /* out */
  size_t value_size;            /* out */
  PJRT_KeyValueGetCallback_ValueDeleter value_deleter_callback;  /* out */
} PJRT_KeyValueTryGetCallback_Args;

/* Returns at once: NOT_FOUND if `key` is not there yet. */
typedef PJRT_Error* (*PJRT_KeyValueTryGetCallback)(PJRT_KeyValueTryGetCallback_Args* args);

typedef struct PJRT_KeyValuePutCallback_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* key;
  size_t key_size;
  const char* value;            /* only alive during the call */
  size_t value_size;
  PJRT_CallbackError* callback_error;
  void* user_arg;
} PJRT_KeyValuePutCallback_Args;

typedef PJRT_Error* (*PJRT_KeyValuePutCallback)(PJRT_KeyValuePutCallback_Args* args);

typedef enum {
  PJRT_ProcessState_kUnspecified = 0,
  PJRT_ProcessState_kUninitialized = 1,
  PJRT_ProcessState_kDisconnected = 2,
  PJRT_ProcessState_kConnected = 3,
  PJRT_ProcessState_kError = 4,
} PJRT_ProcessState;

typedef struct PJRT_ProcessInfo {
  size_t struct_size;
  int task_id;                  /* the process index */
  uint64_t incarnation_id;      /* changes when the process restarts */
  PJRT_ProcessState state;
  int error_code;
  const char* error_message;
  size_t error_message_size;
} PJRT_ProcessInfo;

typedef struct PJRT_Client_UpdateGlobalProcessInfo_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_ProcessInfo* process_infos;
  size_t num_process_infos;
} PJRT_Client_UpdateGlobalProcessInfo_Args;

#endif  /* PJRT_REF_PJRT_C_API_H_ */
