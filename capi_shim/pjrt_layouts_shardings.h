/* pjrt-ref's declaration of two PJRT extensions: Layouts (type 4) and
 * Shardings (type 19).
 *
 * Written for pjrt-ref from the facts of OpenXLA's
 * xla/pjrt/c/pjrt_c_api_layouts_extension.h and
 * xla/pjrt/c/pjrt_c_api_shardings_extension.h (names, field order, types;
 * PJRT C API 0.93 and later: the Layouts extension's seventh function,
 * GetParameterLayouts, came in 0.93).
 *
 * Why a host wants them (jaxlib's C API client, pjrt_c_api_client.cc): when
 * it wraps a compiled program it asks for the program's output layouts and
 * its parameter and output shardings. Without these extensions it answers
 * both from `GetHloModules`: it fetches PJRT_Executable_OptimizedProgram,
 * parses the MLIR, legalises it to MHLO and converts it to an HloModule,
 * once per question, on every compile (tens of milliseconds for a
 * 12-layer transformer). The answers are simple for pjrt-ref:
 *   - layouts: every array is dense, row-major (the descending layout,
 *     minor_to_major = rank-1 ... 0) unless the program or the caller asked
 *     for another dimension order (pjrt_ref/model/layouts.py);
 *   - shardings: what that HloModule said, from the same source
 *     (pjrt_ref/spmd/partitioner.py): the spmd output and parameter
 *     shardings of a partitioned program, none for any other.
 *
 * Layout handles are pjrt-ref's: the host passes them back to
 * MemoryLayout_Serialize and MemoryLayout_Destroy only.
 *
 * Read twice like pjrt_c_api.h: by the C compiler and, without preprocessor
 * lines, by cffi's cdef parser.
 */
#ifndef PJRT_REF_PJRT_LAYOUTS_SHARDINGS_H_
#define PJRT_REF_PJRT_LAYOUTS_SHARDINGS_H_

typedef struct PJRT_Layouts_MemoryLayout PJRT_Layouts_MemoryLayout;
typedef struct PJRT_Layouts_SerializedLayout PJRT_Layouts_SerializedLayout;

typedef struct PJRT_Layouts_MemoryLayout_Destroy_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Layouts_MemoryLayout* layout;
} PJRT_Layouts_MemoryLayout_Destroy_Args;

/* A serialized xla.LayoutProto; the bytes live until the host calls the deleter. */
typedef struct PJRT_Layouts_MemoryLayout_Serialize_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Layouts_MemoryLayout* layout;
  const char* serialized_bytes;                       /* out */
  size_t serialized_bytes_size;                       /* out */
  PJRT_Layouts_SerializedLayout* serialized_layout;   /* out */
  void (*serialized_layout_deleter)(PJRT_Layouts_SerializedLayout* s);  /* out */
} PJRT_Layouts_MemoryLayout_Serialize_Args;

/* The layout a new array of `type` and `dims` gets; the host destroys it. */
typedef struct PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Client* client;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Layouts_MemoryLayout* layout;   /* out */
} PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args;

/* A buffer's layout; the host destroys it. */
typedef struct PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Buffer* buffer;
  PJRT_Layouts_MemoryLayout* layout;   /* out */
} PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args;

typedef struct PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_TopologyDescription* topology_description;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  PJRT_Layouts_MemoryLayout* layout;   /* out */
} PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args;

/* One layout per output; the array and the layouts belong to the executable. */
typedef struct PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;                  /* out */
  PJRT_Layouts_MemoryLayout** layouts; /* out */
} PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args;

typedef struct PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_parameters;               /* out */
  PJRT_Layouts_MemoryLayout** layouts; /* out */
} PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args;

typedef struct PJRT_Layouts_Extension {
  PJRT_Extension_Base base;
  PJRT_Error* (*PJRT_Layouts_MemoryLayout_Destroy)(PJRT_Layouts_MemoryLayout_Destroy_Args* args);
  PJRT_Error* (*PJRT_Layouts_MemoryLayout_Serialize)(PJRT_Layouts_MemoryLayout_Serialize_Args* args);
  PJRT_Error* (*PJRT_Layouts_PJRT_Client_GetDefaultLayout)(
      PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args* args);
  PJRT_Error* (*PJRT_Layouts_PJRT_Buffer_MemoryLayout)(PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args* args);
  PJRT_Error* (*PJRT_Layouts_PJRT_Topology_GetDefaultLayout)(
      PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args* args);
  PJRT_Error* (*PJRT_Layouts_PJRT_Executable_GetOutputLayouts)(
      PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args* args);
  PJRT_Error* (*PJRT_Layouts_PJRT_Executable_GetParameterLayouts)(
      PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args* args);
} PJRT_Layouts_Extension;

/* Serialized xla.OpSharding protos, one per parameter (or output), owned by
 * the executable; both arrays NULL when the program has no spmd shardings
 * (the host then treats the shardings as unspecified). */
typedef struct PJRT_Shardings_PJRT_Executable_ParameterShardings_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_parameters;               /* out */
  const char* const* shardings;        /* out */
  const size_t* sharding_sizes;        /* out */
} PJRT_Shardings_PJRT_Executable_ParameterShardings_Args;

typedef struct PJRT_Shardings_PJRT_Executable_OutputShardings_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;                  /* out */
  const char* const* shardings;        /* out */
  const size_t* sharding_sizes;        /* out */
} PJRT_Shardings_PJRT_Executable_OutputShardings_Args;

typedef struct PJRT_Shardings_Extension {
  PJRT_Extension_Base base;
  PJRT_Error* (*PJRT_Shardings_PJRT_Executable_ParameterShardings)(
      PJRT_Shardings_PJRT_Executable_ParameterShardings_Args* args);
  PJRT_Error* (*PJRT_Shardings_PJRT_Executable_OutputShardings)(
      PJRT_Shardings_PJRT_Executable_OutputShardings_Args* args);
} PJRT_Shardings_Extension;

#endif  /* PJRT_REF_PJRT_LAYOUTS_SHARDINGS_H_ */
