/* PLUGIN_Profiler_Error, the profiler extension's own error type: a code and
 * a message in one malloc'd block, read and freed by the host through the
 * extension's error_* functions without entering Python. Made by Python
 * through pjrt_ref_profiler_error_new (pjrt_ref/capi/profiler_extension.py).
 * Included by the C source build_shim.py generates. */
#include "pjrt_profiler_extension.h"

/* A PLUGIN_Profiler_Error: code and message in one allocation. The static
 * ones (Python gone, out of memory) are never freed. */
struct PLUGIN_Profiler_Error {
    int code;
    int is_static;
    size_t message_size;
    const char* message;
};

static PLUGIN_Profiler_Error pjrt_ref_profiler_gone = {
    PJRT_Error_Code_UNAVAILABLE, 1, sizeof(pjrt_ref_gone_message) - 1, pjrt_ref_gone_message};
static const char pjrt_ref_profiler_no_memory_message[] = "pjrt-ref profiler: out of memory";
static PLUGIN_Profiler_Error pjrt_ref_profiler_no_memory = {
    PJRT_Error_Code_RESOURCE_EXHAUSTED, 1, sizeof(pjrt_ref_profiler_no_memory_message) - 1,
    pjrt_ref_profiler_no_memory_message};
#define PJRT_REF_PROFILER_GONE (&pjrt_ref_profiler_gone)

PLUGIN_Profiler_Error* pjrt_ref_profiler_error_new(int code, const char* message, size_t size) {
    PLUGIN_Profiler_Error* error = malloc(sizeof(PLUGIN_Profiler_Error) + size + 1);
    if (error == NULL) return &pjrt_ref_profiler_no_memory;
    char* text = (char*)(error + 1);
    memcpy(text, message, size);
    text[size] = 0;
    error->code = code;
    error->is_static = 0;
    error->message_size = size;
    error->message = text;
    return error;
}

static void pjrt_ref_profiler_error_destroy(PLUGIN_Profiler_Error_Destroy_Args* args) {
    if (args->error != NULL && !args->error->is_static) free(args->error);
}

static void pjrt_ref_profiler_error_message(PLUGIN_Profiler_Error_Message_Args* args) {
    args->message = args->error->message;
    args->message_size = args->error->message_size;
}

static PLUGIN_Profiler_Error* pjrt_ref_profiler_error_get_code(PLUGIN_Profiler_Error_GetCode_Args* args) {
    args->code = args->error->code;
    return NULL;
}
