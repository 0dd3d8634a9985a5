/* pjrt-ref's declaration of the PJRT Custom Partitioner extension (type 2).
 *
 * Written for pjrt-ref from the facts of OpenXLA's
 * xla/pjrt/c/pjrt_c_api_custom_partitioner_extension.h (names, field order,
 * types; extension version 1), with the `base` member PJRT C API 0.114 gives
 * it (tests/capi/test_capi_abi.py checks the layout against pypjrt's).
 *
 * Why a host wants it: `jax.experimental.custom_partitioning` lowers a
 * function to `stablehlo.custom_call @CustomSPMDPartitioning` whose
 * backend_config names Python callbacks. jaxlib hands those callbacks to
 * every plugin that announces this extension (`register_custom_partitioner`,
 * through `jax._src.xla_bridge.register_plugin_callbacks`), as C function
 * pointers that take serialized shapes (xla.ShapeProto) and shardings
 * (xla.OpSharding) and return the per-device module (MLIR) and the
 * shardings it wants (pjrt_ref/spmd/custom_partitioning.py).
 *
 * Read twice like pjrt_c_api.h: by the C compiler and, without preprocessor
 * lines, by cffi's cdef parser.
 */
#ifndef PJRT_REF_PJRT_CUSTOM_PARTITIONER_H_
#define PJRT_REF_PJRT_CUSTOM_PARTITIONER_H_

typedef struct JAX_CustomCallPartitioner_string {
  const char* data;
  size_t size;
} JAX_CustomCallPartitioner_string;

typedef struct JAX_CustomCallPartitioner_aval {
  JAX_CustomCallPartitioner_string shape;      /* a serialized xla.ShapeProto */
  bool has_sharding;
  JAX_CustomCallPartitioner_string sharding;   /* a serialized xla.OpSharding */
} JAX_CustomCallPartitioner_aval;

/* Arguments belong to the caller; results to the callee until the caller
 * calls cleanup_fn(data). */
typedef struct JAX_CustomCallPartitioner_version_and_error {
  int64_t api_version;
  void* data;                                   /* out */
  void (*cleanup_fn)(void* data);               /* out */
  bool has_error;                               /* out */
  PJRT_Error_Code code;                         /* out */
  JAX_CustomCallPartitioner_string error_msg;   /* out */
} JAX_CustomCallPartitioner_version_and_error;

typedef struct JAX_CustomCallPartitioner_Partition_Args {
  JAX_CustomCallPartitioner_version_and_error header;
  size_t num_args;
  JAX_CustomCallPartitioner_aval* op_args;
  JAX_CustomCallPartitioner_aval op_result;
  JAX_CustomCallPartitioner_string backend_config;
  JAX_CustomCallPartitioner_string mlir_module;         /* out: the per-device module */
  JAX_CustomCallPartitioner_string* args_sharding;      /* out: num_args OpShardings */
  JAX_CustomCallPartitioner_string result_sharding;     /* out */
} JAX_CustomCallPartitioner_Partition_Args;

typedef struct JAX_CustomCallPartitioner_InferShardingFromOperands_Args {
  JAX_CustomCallPartitioner_version_and_error header;
  size_t num_args;
  JAX_CustomCallPartitioner_aval* op_args;
  JAX_CustomCallPartitioner_string result_shape;
  JAX_CustomCallPartitioner_string backend_config;
  bool has_result_sharding;                             /* out */
  JAX_CustomCallPartitioner_string result_sharding;     /* out */
} JAX_CustomCallPartitioner_InferShardingFromOperands_Args;

typedef struct JAX_CustomCallPartitioner_PropagateUserSharding_Args {
  JAX_CustomCallPartitioner_version_and_error header;
  JAX_CustomCallPartitioner_string backend_config;
  JAX_CustomCallPartitioner_string result_shape;
  JAX_CustomCallPartitioner_string result_sharding;     /* in and out */
} JAX_CustomCallPartitioner_PropagateUserSharding_Args;

typedef struct JAX_CustomCallPartitioner_Callbacks JAX_CustomCallPartitioner_Callbacks;
struct JAX_CustomCallPartitioner_Callbacks {
  int64_t version;
  void* private_data;
  void (*dtor)(JAX_CustomCallPartitioner_Callbacks* data);
  void (*partition)(JAX_CustomCallPartitioner_Callbacks* data,
                    JAX_CustomCallPartitioner_Partition_Args* args);
  void (*infer_sharding)(JAX_CustomCallPartitioner_Callbacks* data,
                         JAX_CustomCallPartitioner_InferShardingFromOperands_Args* args);
  void (*propagate_user_sharding)(JAX_CustomCallPartitioner_Callbacks* data,
                                  JAX_CustomCallPartitioner_PropagateUserSharding_Args* args);
  bool can_side_effecting_have_replicated_sharding;
};

typedef struct PJRT_Register_Custom_Partitioner_Args {
  size_t struct_size;
  const char* name;           /* for the call only */
  size_t name_size;
  JAX_CustomCallPartitioner_Callbacks* callbacks;
} PJRT_Register_Custom_Partitioner_Args;

typedef struct PJRT_Register_Batch_Partitionable_Args {
  size_t struct_size;
  const char* name;
  size_t name_size;
} PJRT_Register_Batch_Partitionable_Args;

typedef struct PJRT_Custom_Partitioner_Extension {
  PJRT_Extension_Base base;
  PJRT_Error* (*register_custom_partitioner)(PJRT_Register_Custom_Partitioner_Args* args);
  PJRT_Error* (*register_batch_partitionable)(PJRT_Register_Batch_Partitionable_Args* args);
} PJRT_Custom_Partitioner_Extension;

#endif  /* PJRT_REF_PJRT_CUSTOM_PARTITIONER_H_ */
