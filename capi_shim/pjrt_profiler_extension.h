/* pjrt-ref's declaration of the PJRT profiler extension.
 *
 * Written for pjrt-ref from the facts of OpenXLA's
 * xla/pjrt/c/pjrt_c_api_profiler_extension.h and
 * xla/backends/profiler/plugin/profiler_c_api.h (names, field order, types),
 * checked against pypjrt's layout-checked 0.114 description
 * (tests/capi/test_profiler_extension.py) and against what jaxlib 0.10.2 does.
 *
 * How a host uses it (xla/backends/profiler/plugin/plugin_tracer.cc; jaxlib
 * calls `register_plugin_profiler` on every plugin it loads by path):
 *   - it walks PJRT_Api.extension_start for type PJRT_Extension_Type_Profiler
 *     and keeps `profiler_api`;
 *   - each profiling session (jax.profiler.trace) then calls
 *     create -> start -> stop -> collect_data -> destroy;
 *   - collect_data is called with buffer == NULL; the plugin answers with a
 *     serialized tensorflow.profiler.XSpace it owns (buffer, size), which the
 *     host parses before destroy. A host may instead allocate `size` bytes
 *     and call again with its own buffer (the header's documented protocol);
 *   - errors are PLUGIN_Profiler_Error, not PJRT_Error: the host reads them
 *     with the api's own error_* functions; codes are absl::StatusCode.
 *
 * Two facts a plugin author must know (checked on jaxlib 0.10.2):
 *   - the host requires PLUGIN_Profiler_Api.struct_size to be EXACTLY the
 *     size up to `collect_data` (80 bytes); 0.114's header appends three
 *     more functions (consume, consume_result_destroy, serialize: 104
 *     bytes), which jaxlib 0.10.2 rejects ("Unexpected PLUGIN_Profiler_Api
 *     size"). We declare and announce the 80-byte prefix.
 *   - the host does not set `struct_size` in the lifecycle Args structs
 *     (it declares them on the stack and fills only the fields it uses),
 *     so the plugin must not read it.
 *
 * Read twice like pjrt_c_api.h: by the C compiler and, without preprocessor
 * lines, by cffi's cdef parser.
 */
#ifndef PJRT_REF_PJRT_PROFILER_EXTENSION_H_
#define PJRT_REF_PJRT_PROFILER_EXTENSION_H_

typedef struct PLUGIN_Profiler PLUGIN_Profiler;
typedef struct PLUGIN_Profiler_Error PLUGIN_Profiler_Error;

/* --------------------------------------------------------------- errors */

typedef struct PLUGIN_Profiler_Error_Destroy_Args {
  size_t struct_size;
  void* priv;
  PLUGIN_Profiler_Error* error;
} PLUGIN_Profiler_Error_Destroy_Args;

typedef struct PLUGIN_Profiler_Error_Message_Args {
  size_t struct_size;
  void* priv;
  const PLUGIN_Profiler_Error* error;
  const char* message;  /* out, lives as long as `error` */
  size_t message_size;  /* out */
} PLUGIN_Profiler_Error_Message_Args;

typedef struct PLUGIN_Profiler_Error_GetCode_Args {
  size_t struct_size;
  void* priv;
  const PLUGIN_Profiler_Error* error;
  int code;             /* out: an absl::StatusCode (= PJRT_Error_Code) */
} PLUGIN_Profiler_Error_GetCode_Args;

/* ------------------------------------------------------------ lifecycle */

typedef struct PLUGIN_Profiler_Create_Args {
  size_t struct_size;
  const char* options;  /* serialized tensorflow.ProfileOptions */
  size_t options_size;
  PLUGIN_Profiler* profiler;  /* out */
} PLUGIN_Profiler_Create_Args;

typedef struct PLUGIN_Profiler_Destroy_Args {
  size_t struct_size;
  PLUGIN_Profiler* profiler;
} PLUGIN_Profiler_Destroy_Args;

typedef struct PLUGIN_Profiler_Start_Args {
  size_t struct_size;
  PLUGIN_Profiler* profiler;
} PLUGIN_Profiler_Start_Args;

typedef struct PLUGIN_Profiler_Stop_Args {
  size_t struct_size;
  PLUGIN_Profiler* profiler;
} PLUGIN_Profiler_Stop_Args;

typedef struct PLUGIN_Profiler_CollectData_Args {
  size_t struct_size;
  PLUGIN_Profiler* profiler;
  uint8_t* buffer;              /* in/out: NULL -> set to the plugin's bytes */
  size_t buffer_size_in_bytes;  /* out */
} PLUGIN_Profiler_CollectData_Args;

/* ------------------------------------------------------------ the tables */

typedef struct PLUGIN_Profiler_Api {
  size_t struct_size;   /* 80: see the note at the top */
  void* priv;
  void (*error_destroy)(PLUGIN_Profiler_Error_Destroy_Args* args);
  void (*error_message)(PLUGIN_Profiler_Error_Message_Args* args);
  PLUGIN_Profiler_Error* (*error_get_code)(PLUGIN_Profiler_Error_GetCode_Args* args);
  PLUGIN_Profiler_Error* (*create)(PLUGIN_Profiler_Create_Args* args);
  PLUGIN_Profiler_Error* (*destroy)(PLUGIN_Profiler_Destroy_Args* args);
  PLUGIN_Profiler_Error* (*start)(PLUGIN_Profiler_Start_Args* args);
  PLUGIN_Profiler_Error* (*stop)(PLUGIN_Profiler_Stop_Args* args);
  PLUGIN_Profiler_Error* (*collect_data)(PLUGIN_Profiler_CollectData_Args* args);
} PLUGIN_Profiler_Api;

/* Hangs off PJRT_Api.extension_start (base.type = PJRT_Extension_Type_Profiler).
 * A host may also chain one onto an Args struct to pass `traceme_context_id`;
 * pjrt-ref ignores Args extensions. */
typedef struct PJRT_Profiler_Extension {
  PJRT_Extension_Base base;
  PLUGIN_Profiler_Api* profiler_api;
  int64_t traceme_context_id;
} PJRT_Profiler_Extension;

#endif  /* PJRT_REF_PJRT_PROFILER_EXTENSION_H_ */
