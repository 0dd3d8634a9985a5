/* pjrt-ref's side of the XLA FFI: the types and functions its C bridge
 * (xla_ffi_api.c) adds to XLA's own header, jaxlib's
 * `xla/ffi/api/c_api.h` (jax.ffi.include_dir()), which it is compiled
 * against and which declares everything a handler sees.
 *
 * Read twice: by the C compiler (after c_api.h) and, without preprocessor
 * lines, by cffi's cdef parser (bridge.py), so Python can fill a call frame
 * and an execution context.
 */
#ifndef PJRT_REF_XLA_FFI_H_
#define PJRT_REF_XLA_FFI_H_

/* The per-call-site state a handler keeps with XLA_FFI_State_Set/Get. It
 * lives as long as the planned op (Python frees it with
 * pjrt_ref_ffi_state_destroy, which calls the deleter registered for its
 * type with XLA_FFI_Type_Register). */
typedef struct pjrt_ref_ffi_state {
  int64_t type_id;
  void* state;
} pjrt_ref_ffi_state;

/* One PJRT_FFI_UserData (PJRT FFI extension, user_data_add): what
 * XLA_FFI_ExecutionContext_Get hands a handler for `type_id`. */
typedef struct pjrt_ref_ffi_user_data {
  int64_t type_id;
  void* data;
} pjrt_ref_ffi_user_data;

/* XLA_FFI_ExecutionContext is opaque to handlers; this is what pjrt-ref puts
 * behind it for one call. */
struct XLA_FFI_ExecutionContext {
  int32_t device_ordinal;
  int64_t run_id;
  int64_t num_user_data;
  pjrt_ref_ffi_user_data* user_data;
  pjrt_ref_ffi_state* state;
};

/* The XLA_FFI_Api table handlers get in their call frame. */
const XLA_FFI_Api* pjrt_ref_ffi_api(void);

/* Calls `handler` with `frame` and, if it returned a future (an async
 * handler), waits for it. NULL on success; otherwise an error the caller
 * reads with pjrt_ref_ffi_error_code/_message and frees with
 * pjrt_ref_ffi_error_destroy. */
XLA_FFI_Error* pjrt_ref_ffi_call(XLA_FFI_Handler* handler, XLA_FFI_CallFrame* frame);

/* Asks `handler` for its XLA_FFI_Metadata (api version, traits): a call
 * frame carrying the metadata extension, as XLA does at registration. */
XLA_FFI_Error* pjrt_ref_ffi_metadata(XLA_FFI_Handler* handler, XLA_FFI_Metadata* metadata);

/* Legacy custom calls (api_version 0 registrations; custom_call api_version
 * 1, 2 or 3), XLA CPU's signatures. `status_message` receives the failure a
 * status-returning call reported (NULL if none); free it with
 * pjrt_ref_ffi_free. */
void pjrt_ref_legacy_call(void* fn, int api_version, void* out, const void** in,
                          const char* opaque, size_t opaque_len, char** status_message);

int pjrt_ref_ffi_error_code(XLA_FFI_Error* error);
const char* pjrt_ref_ffi_error_message(XLA_FFI_Error* error);
void pjrt_ref_ffi_error_destroy(XLA_FFI_Error* error);
XLA_FFI_Error* pjrt_ref_ffi_type_register(const char* name, size_t name_size, int64_t* type_id,
                                          void (*deleter)(void* object));
void pjrt_ref_ffi_state_destroy(pjrt_ref_ffi_state* state);
int pjrt_ref_ffi_is_code_address(void* address);
void pjrt_ref_ffi_free(void* data);

#endif  /* PJRT_REF_XLA_FFI_H_ */
