/* pjrt-ref's implementation of the XLA FFI C API: the `XLA_FFI_Api` table a
 * handler receives in its call frame, and the calls into handlers.
 *
 * Compiled against jaxlib's own `xla/ffi/api/c_api.h` (jax.ffi.include_dir())
 * by bridge.py, so every struct and enum is the header's. Each function of the
 * table does what XLA's CPU runtime does where that means something on a host
 * (errors, types, user data, state, memory, the thread pool, futures, run id,
 * device ordinal) and answers UNIMPLEMENTED, naming itself, where it does not
 * (a device stream; registering a handler from inside a handler). No slot is
 * NULL.
 *
 * Everything here runs without the GIL: cffi releases it around
 * pjrt_ref_ffi_call, so a handler (and the futures it completes from its own
 * threads) never waits for Python.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xla/ffi/api/c_api.h"
#include "pjrt_ref_xla_ffi.h"

/* ------------------------------------------------------------ errors */

/* XLA_FFI_Error is opaque: a code and a message we own. */
struct XLA_FFI_Error {
  XLA_FFI_Error_Code code;
  char* message;
};

static XLA_FFI_Error* new_error(XLA_FFI_Error_Code code, const char* message) {
  XLA_FFI_Error* error = malloc(sizeof(XLA_FFI_Error));
  if (error == NULL) return NULL;   /* out of memory: reads as success, nothing better to do */
  error->code = code;
  error->message = strdup(message != NULL ? message : "");
  return error;
}

static XLA_FFI_Error* unimplemented(const char* function, const char* why) {
  char message[512];
  snprintf(message, sizeof message, "%s is not implemented by pjrt-ref: %s", function, why);
  return new_error(XLA_FFI_Error_Code_UNIMPLEMENTED, message);
}

static XLA_FFI_Error* error_create(XLA_FFI_Error_Create_Args* args) {
  return new_error(args->errc, args->message);
}

static void error_get_message(XLA_FFI_Error_GetMessage_Args* args) {
  args->message = args->error->message;
}

static void error_destroy(XLA_FFI_Error_Destroy_Args* args) {
  pjrt_ref_ffi_error_destroy(args->error);
}

int pjrt_ref_ffi_error_code(XLA_FFI_Error* error) { return (int)error->code; }

const char* pjrt_ref_ffi_error_message(XLA_FFI_Error* error) {
  return error->message != NULL ? error->message : "";
}

void pjrt_ref_ffi_error_destroy(XLA_FFI_Error* error) {
  if (error == NULL) return;
  free(error->message);
  free(error);
}

void pjrt_ref_ffi_free(void* data) { free(data); }

/* ------------------------------------------------------------ types */

/* The type registry: name -> id and TypeInfo (its deleter frees a state of
 * that type). Ids are handed out from 1; 0 is XLA_FFI_UNKNOWN_TYPE_ID. */
typedef struct registered_type {
  char* name;
  size_t name_size;
  int64_t id;
  void (*deleter)(void* object);
} registered_type;

static pthread_mutex_t types_lock = PTHREAD_MUTEX_INITIALIZER;
static registered_type* types = NULL;
static size_t num_types = 0;
static int64_t next_type_id = 1;

static registered_type* type_by_name(const char* name, size_t name_size) {
  for (size_t i = 0; i < num_types; i++)
    if (types[i].name_size == name_size && memcmp(types[i].name, name, name_size) == 0)
      return &types[i];
  return NULL;
}

static registered_type* type_by_id(int64_t id) {
  for (size_t i = 0; i < num_types; i++)
    if (types[i].id == id) return &types[i];
  return NULL;
}

static registered_type* add_type(const char* name, size_t name_size, int64_t id) {
  registered_type* grown = realloc(types, (num_types + 1) * sizeof(registered_type));
  if (grown == NULL) return NULL;
  types = grown;
  registered_type* entry = &types[num_types++];
  entry->name = malloc(name_size + 1);
  memcpy(entry->name, name, name_size);
  entry->name[name_size] = 0;
  entry->name_size = name_size;
  entry->id = id;
  entry->deleter = NULL;
  if (id >= next_type_id) next_type_id = id + 1;
  return entry;
}

/* XLA_FFI_Type_Register's rule: id 0 asks for the name's id (a new one for a
 * new name); a given id must match the name's, or be free for a new name. */
static XLA_FFI_Error* register_type(const char* name, size_t name_size, int64_t* type_id,
                                    void (*deleter)(void*)) {
  char message[512];
  XLA_FFI_Error* error = NULL;
  pthread_mutex_lock(&types_lock);
  registered_type* entry = type_by_name(name, name_size);
  if (entry == NULL) {
    if (*type_id != 0 && type_by_id(*type_id) != NULL) {
      snprintf(message, sizeof message, "type id %lld is already taken by another type than '%.*s'",
               (long long)*type_id, (int)name_size, name);
      error = new_error(XLA_FFI_Error_Code_ALREADY_EXISTS, message);
    } else {
      entry = add_type(name, name_size, *type_id != 0 ? *type_id : next_type_id);
      if (entry == NULL) error = new_error(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
    }
  } else if (*type_id != 0 && *type_id != entry->id) {
    snprintf(message, sizeof message, "type '%.*s' is registered with id %lld, not %lld",
             (int)name_size, name, (long long)entry->id, (long long)*type_id);
    error = new_error(XLA_FFI_Error_Code_INVALID_ARGUMENT, message);
  }
  if (error == NULL) {
    *type_id = entry->id;
    if (deleter != NULL) entry->deleter = deleter;
  }
  pthread_mutex_unlock(&types_lock);
  return error;
}

static XLA_FFI_Error* type_register(XLA_FFI_Type_Register_Args* args) {
  void (*deleter)(void*) = args->type_info != NULL ? args->type_info->deleter : NULL;
  return register_type(args->name.ptr, args->name.len, &args->type_id->type_id, deleter);
}

XLA_FFI_Error* pjrt_ref_ffi_type_register(const char* name, size_t name_size, int64_t* type_id,
                                          void (*deleter)(void* object)) {
  return register_type(name, name_size, type_id, deleter);
}

/* ------------------------------------------------------------ context, state */

static XLA_FFI_Error* execution_context_get(XLA_FFI_ExecutionContext_Get_Args* args) {
  XLA_FFI_ExecutionContext* ctx = args->ctx;
  for (int64_t i = 0; i < ctx->num_user_data; i++) {
    if (ctx->user_data[i].type_id == args->type_id->type_id) {
      args->data = ctx->user_data[i].data;
      return NULL;
    }
  }
  char message[256];
  snprintf(message, sizeof message,
           "no user data of type id %lld in this execution's context (PJRT FFI extension, user_data_add)",
           (long long)args->type_id->type_id);
  return new_error(XLA_FFI_Error_Code_NOT_FOUND, message);
}

static XLA_FFI_Error* state_set(XLA_FFI_State_Set_Args* args) {
  pjrt_ref_ffi_state* slot = args->ctx->state;
  if (slot == NULL) return new_error(XLA_FFI_Error_Code_FAILED_PRECONDITION, "this call has no state slot");
  if (slot->state != NULL)
    return new_error(XLA_FFI_Error_Code_ALREADY_EXISTS, "the state of this call site is already set");
  slot->type_id = args->type_id->type_id;
  slot->state = args->state;
  return NULL;
}

static XLA_FFI_Error* state_get(XLA_FFI_State_Get_Args* args) {
  pjrt_ref_ffi_state* slot = args->ctx->state;
  if (slot == NULL || slot->state == NULL)
    return new_error(XLA_FFI_Error_Code_NOT_FOUND, "the state of this call site is not set");
  if (slot->type_id != args->type_id->type_id)
    return new_error(XLA_FFI_Error_Code_INVALID_ARGUMENT, "the state of this call site has another type id");
  args->state = slot->state;
  return NULL;
}

void pjrt_ref_ffi_state_destroy(pjrt_ref_ffi_state* slot) {
  if (slot == NULL || slot->state == NULL) return;
  pthread_mutex_lock(&types_lock);
  registered_type* type = type_by_id(slot->type_id);
  void (*deleter)(void*) = type != NULL ? type->deleter : NULL;
  pthread_mutex_unlock(&types_lock);
  if (deleter != NULL) deleter(slot->state);
  slot->state = NULL;
}

static XLA_FFI_Error* run_id_get(XLA_FFI_RunId_Get_Args* args) {
  args->run_id = args->ctx->run_id;
  return NULL;
}

static XLA_FFI_Error* device_ordinal_get(XLA_FFI_DeviceOrdinal_Get_Args* args) {
  args->device_ordinal = args->ctx->device_ordinal;
  return NULL;
}

/* ------------------------------------------------------------ memory, threads */

/* "Device" memory is host memory on pjrt-ref. */
static XLA_FFI_Error* device_memory_allocate(XLA_FFI_DeviceMemory_Allocate_Args* args) {
  size_t alignment = args->alignment < sizeof(void*) ? sizeof(void*) : args->alignment;
  if ((alignment & (alignment - 1)) != 0)
    return new_error(XLA_FFI_Error_Code_INVALID_ARGUMENT, "alignment must be a power of two");
  void* data = NULL;
  if (posix_memalign(&data, alignment, args->size > 0 ? args->size : 1) != 0)
    return new_error(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "DeviceMemory_Allocate: out of memory");
  args->data = data;
  return NULL;
}

static XLA_FFI_Error* device_memory_free(XLA_FFI_DeviceMemory_Free_Args* args) {
  free(args->data);
  return NULL;
}

/* The header allows tasks to run in the caller's thread; pjrt-ref runs each
 * at once, so a pool of one thread is what the handler sees. */
static XLA_FFI_Error* thread_pool_schedule(XLA_FFI_ThreadPool_Schedule_Args* args) {
  args->task(args->data);
  return NULL;
}

static XLA_FFI_Error* thread_pool_num_threads(XLA_FFI_ThreadPool_NumThreads_Args* args) {
  *args->num_threads = 1;
  return NULL;
}

static XLA_FFI_Error* stream_get(XLA_FFI_Stream_Get_Args* args) {
  (void)args;
  return unimplemented("XLA_FFI_Stream_Get", "pjrt-ref runs on the host, which has no device stream");
}

static XLA_FFI_Error* handler_register(XLA_FFI_Handler_Register_Args* args) {
  (void)args;
  return unimplemented("XLA_FFI_Handler_Register",
                       "register handlers from Python with jax.ffi.register_ffi_target(name, capsule, "
                       "platform=\"pjrt_ref\") or through the PJRT FFI extension's register_handler");
}

/* ------------------------------------------------------------ futures */

/* An async handler returns at once with `call_frame->future` set and
 * completes the future later, from any thread. */
struct XLA_FFI_Future {
  pthread_mutex_t lock;
  pthread_cond_t done_signal;
  int done;
  XLA_FFI_Error* error;   /* owned once SetError handed it over */
};

static XLA_FFI_Error* future_create(XLA_FFI_Future_Create_Args* args) {
  XLA_FFI_Future* future = calloc(1, sizeof(XLA_FFI_Future));
  if (future == NULL) return new_error(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_init(&future->lock, NULL);
  pthread_cond_init(&future->done_signal, NULL);
  args->future = future;
  return NULL;
}

static XLA_FFI_Error* complete(XLA_FFI_Future* future, XLA_FFI_Error* error) {
  pthread_mutex_lock(&future->lock);
  int twice = future->done;
  if (!twice) {
    future->done = 1;
    future->error = error;
    pthread_cond_broadcast(&future->done_signal);
  }
  pthread_mutex_unlock(&future->lock);
  if (twice) {
    pjrt_ref_ffi_error_destroy(error);
    return new_error(XLA_FFI_Error_Code_FAILED_PRECONDITION, "the future is already completed");
  }
  return NULL;
}

static XLA_FFI_Error* future_set_available(XLA_FFI_Future_SetAvailable_Args* args) {
  return complete(args->future, NULL);
}

static XLA_FFI_Error* future_set_error(XLA_FFI_Future_SetError_Args* args) {
  XLA_FFI_Error* error = args->error != NULL
      ? args->error : new_error(XLA_FFI_Error_Code_UNKNOWN, "future failed without an error");
  return complete(args->future, error);
}

/* Waits for `future`, frees it and returns its error (NULL: available). */
static XLA_FFI_Error* await_future(XLA_FFI_Future* future) {
  pthread_mutex_lock(&future->lock);
  while (!future->done) pthread_cond_wait(&future->done_signal, &future->lock);
  XLA_FFI_Error* error = future->error;
  pthread_mutex_unlock(&future->lock);
  pthread_cond_destroy(&future->done_signal);
  pthread_mutex_destroy(&future->lock);
  free(future);
  return error;
}

/* ------------------------------------------------------------ the table */

static XLA_FFI_Api api = {
    .struct_size = XLA_FFI_Api_STRUCT_SIZE,
    .extension_start = NULL,
    .api_version = {
        .struct_size = XLA_FFI_Api_Version_STRUCT_SIZE,
        .extension_start = NULL,
        .major_version = XLA_FFI_API_MAJOR,
        .minor_version = XLA_FFI_API_MINOR,
    },
    .internal_api = NULL,   /* XLA's own handlers only; ffi.h never reads it */
    .XLA_FFI_Error_Create = error_create,
    .XLA_FFI_Error_GetMessage = error_get_message,
    .XLA_FFI_Error_Destroy = error_destroy,
    .XLA_FFI_Handler_Register = handler_register,
    .XLA_FFI_Stream_Get = stream_get,
    .XLA_FFI_Type_Register = type_register,
    .XLA_FFI_ExecutionContext_Get = execution_context_get,
    .XLA_FFI_State_Set = state_set,
    .XLA_FFI_State_Get = state_get,
    .XLA_FFI_DeviceMemory_Allocate = device_memory_allocate,
    .XLA_FFI_DeviceMemory_Free = device_memory_free,
    .XLA_FFI_ThreadPool_Schedule = thread_pool_schedule,
    .XLA_FFI_ThreadPool_NumThreads = thread_pool_num_threads,
    .XLA_FFI_Future_Create = future_create,
    .XLA_FFI_Future_SetAvailable = future_set_available,
    .XLA_FFI_Future_SetError = future_set_error,
    .XLA_FFI_RunId_Get = run_id_get,
    .XLA_FFI_DeviceOrdinal_Get = device_ordinal_get,
};

const XLA_FFI_Api* pjrt_ref_ffi_api(void) { return &api; }

/* ------------------------------------------------------------ calls */

XLA_FFI_Error* pjrt_ref_ffi_call(XLA_FFI_Handler* handler, XLA_FFI_CallFrame* frame) {
  frame->future = NULL;
  XLA_FFI_Error* error = handler(frame);
  if (frame->future == NULL) return error;
  XLA_FFI_Error* outcome = await_future(frame->future);   /* the future outlives the return */
  frame->future = NULL;
  if (error != NULL) {   /* both: the handler's own error wins */
    pjrt_ref_ffi_error_destroy(outcome);
    return error;
  }
  return outcome;
}

XLA_FFI_Error* pjrt_ref_ffi_metadata(XLA_FFI_Handler* handler, XLA_FFI_Metadata* metadata) {
  XLA_FFI_Metadata_Extension extension = {
      .extension_base = {.struct_size = XLA_FFI_Metadata_Extension_STRUCT_SIZE,
                         .type = XLA_FFI_Extension_Metadata, .next = NULL},
      .metadata = metadata,
  };
  XLA_FFI_CallFrame frame;
  memset(&frame, 0, sizeof frame);
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;   /* what handlers check, not sizeof */
  frame.extension_start = &extension.extension_base;
  frame.api = &api;
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args.struct_size = XLA_FFI_Args_STRUCT_SIZE;
  frame.rets.struct_size = XLA_FFI_Rets_STRUCT_SIZE;
  frame.attrs.struct_size = XLA_FFI_Attrs_STRUCT_SIZE;
  metadata->struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
  return handler(&frame);
}

/* dladdr finds the loaded object holding an address: a handler pointer that
 * lies in none (a number, freed memory) is refused before anything calls it. */
int pjrt_ref_ffi_is_code_address(void* address) {
  Dl_info info;
  return address != NULL && dladdr(address, &info) != 0 && info.dli_fname != NULL;
}

/* ------------------------------------------------------------ legacy custom calls */

/* XLA's status type for status-returning legacy calls, and the two functions
 * such handlers call (xla/service/custom_call_status.h declares them; XLA
 * defines them, and so does this library, loaded with RTLD_GLOBAL so that a
 * handler library finds them). */
typedef struct XlaCustomCallStatus_ {
  char* message;
  int failed;
} XlaCustomCallStatus;

void XlaCustomCallStatusSetSuccess(XlaCustomCallStatus* status) { status->failed = 0; }

void XlaCustomCallStatusSetFailure(XlaCustomCallStatus* status, const char* message,
                                   size_t message_len) {
  free(status->message);
  status->message = strndup(message, message_len);
  status->failed = 1;
}

typedef void original_fn(void* out, const void** in);
typedef void status_fn(void* out, const void** in, XlaCustomCallStatus* status);
typedef void unified_fn(void* out, const void** in, const char* opaque, size_t opaque_len,
                        XlaCustomCallStatus* status);

/* api_version 1: ORIGINAL, 2: STATUS_RETURNING, 3: STATUS_RETURNING_UNIFIED
 * (XLA CPU's CustomCallApiVersion); Python checked the version. */
void pjrt_ref_legacy_call(void* fn, int api_version, void* out, const void** in,
                          const char* opaque, size_t opaque_len, char** status_message) {
  XlaCustomCallStatus status = {.message = NULL, .failed = 0};
  if (api_version == 1) ((original_fn*)fn)(out, in);
  else if (api_version == 2) ((status_fn*)fn)(out, in, &status);
  else ((unified_fn*)fn)(out, in, opaque, opaque_len, &status);
  if (status.failed && status.message == NULL) status.message = strdup("custom call failed");
  if (!status.failed) {
    free(status.message);
    status.message = NULL;
  }
  *status_message = status.message;
}
