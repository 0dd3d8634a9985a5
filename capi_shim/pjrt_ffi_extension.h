/* pjrt-ref's declaration of the PJRT FFI extension (type 5,
 * PJRT_Extension_Type_FFI), version 2.
 *
 * Written for pjrt-ref from the facts of OpenXLA's
 * xla/pjrt/c/pjrt_c_api_ffi_extension.h (names, field order, types).
 *
 * Why a host wants it: it is how a framework hands a plugin the FFI handlers
 * registered for the plugin's platform. jaxlib does it for XLA's GPU plugins
 * (`xla_client.register_custom_call_handler` -> register_handler), and
 * pjrt-ref's JAX hook does the same for "pjrt_ref"
 * (pjrt_ref/frameworks/jax/ffi.py). The functions land in
 * pjrt_ref/capi/ffi_extension.py; the handlers run through
 * interpreter/ffi.
 *
 * Read twice like pjrt_c_api.h: by the C compiler and, without preprocessor
 * lines, by cffi's cdef parser.
 */
#ifndef PJRT_REF_PJRT_FFI_EXTENSION_H_
#define PJRT_REF_PJRT_FFI_EXTENSION_H_

/* How to handle objects of a user type (state a handler keeps, user data). */
typedef struct PJRT_FFI_Type_Info {
  void (*deleter)(void* object);
  void* serialize;     /* unused by pjrt-ref */
  void* deserialize;   /* unused by pjrt-ref */
} PJRT_FFI_Type_Info;

/* Registers a type name; type_id 0 asks for one, another value must match. */
typedef struct PJRT_FFI_Type_Register_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* type_name;
  size_t type_name_size;
  int64_t type_id;                       /* in-out */
  const PJRT_FFI_Type_Info* type_info;   /* optional */
} PJRT_FFI_Type_Register_Args;

/* User data for the handlers of one execution (XLA_FFI_ExecutionContext_Get). */
typedef struct PJRT_FFI_UserData {
  int64_t type_id;
  void* data;
} PJRT_FFI_UserData;

typedef struct PJRT_FFI_UserData_Add_Args {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_ExecuteContext* context;
  PJRT_FFI_UserData user_data;
} PJRT_FFI_UserData_Add_Args;

typedef enum {
  PJRT_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE = 1
} PJRT_FFI_Handler_TraitsBits;

/* Registers a typed XLA FFI handler (an XLA_FFI_Handler*, the execute stage)
 * for a platform. This struct has no extension_start. */
typedef struct PJRT_FFI_Register_Handler_Args {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;
  const char* platform_name;
  size_t platform_name_size;
  PJRT_FFI_Handler_TraitsBits traits;
} PJRT_FFI_Register_Handler_Args;

typedef struct PJRT_FFI_Extension {
  PJRT_Extension_Base base;
  PJRT_Error* (*type_register)(PJRT_FFI_Type_Register_Args* args);
  PJRT_Error* (*user_data_add)(PJRT_FFI_UserData_Add_Args* args);
  PJRT_Error* (*register_handler)(PJRT_FFI_Register_Handler_Args* args);
} PJRT_FFI_Extension;

#endif  /* PJRT_REF_PJRT_FFI_EXTENSION_H_ */
