/* A PJRT plugin that stands in front of another one and keeps what a host
 * compiles and runs on it.
 *
 * pjrt-ref's plugin test kit (pjrt_ref/testkit) loads a plugin under test
 * through this library, so that for each test that fails on the plugin it
 * has the programs the test compiled and the arguments of each execution,
 * whatever the framework and whatever path the framework's dispatch takes
 * (jaxlib's C++ fast path included): every call reaches the plugin through
 * its PJRT_Api table, and this library is that table.
 *
 * GetPjrtApi loads the plugin at PJRT_REF_RECORD_PLUGIN and returns a copy
 * of its table (its own size, version and extensions) in which three slots
 * are ours; every other slot is the plugin's own function:
 *   - PJRT_Client_Compile writes the program and its serialized compile
 *     options, then compiles on the plugin;
 *   - PJRT_Executable_DeserializeAndLoad notes that the executable came
 *     from serialized bytes (nothing to replay);
 *   - PJRT_LoadedExecutable_Execute, while the environment names a test
 *     (PJRT_REF_RECORD_TEST, set by testkit/record_plugin.py around each
 *     test), copies every argument to the host and writes it before the
 *     plugin runs (a donated argument is gone afterwards).
 *
 * Records go to the folder PJRT_REF_RECORD_DIR, read again at every call;
 * `index.tsv` there lists them, one tab-separated line each, and
 * testkit/records.py reads it:
 *   program    N  FORMAT  TEST        program-N.code, program-N.options
 *   compiled   N  ok|error  MESSAGE
 *   execution  E  N  DEVICES  ARGS  TEST   (N 0: an executable not seen compiled)
 *   argument   E  DEVICE  INDEX  TYPE  DIMS  ok|MESSAGE      argument-E-DEVICE-INDEX.bin
 *   executed   E  ok|error  MESSAGE
 *
 * Slot positions come from capi_shim/entry_points.py (setup.py passes them
 * as PJRT_REF_SLOT_* macros): the table is a fixed header, then one
 * function pointer per entry point in that order.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt_c_api.h"

#if !defined(PJRT_REF_SLOT_PJRT_Client_Compile) || !defined(PJRT_REF_SLOT_PJRT_LoadedExecutable_Execute)
#error "setup.py defines PJRT_REF_SLOT_<entry point>, each slot's position in PJRT_Api"
#endif

/* Arguments larger than this are noted, not written. */
#define LARGEST_ARGUMENT_BYTES ((size_t)256 << 20)

typedef PJRT_Error* (*slot_fn)(void* args);
typedef void (*void_slot_fn)(void* args);

/* The table's fixed header: struct_size, extension_start, pjrt_api_version. */
#define FIRST_SLOT_OFFSET (sizeof(size_t) + sizeof(void*) + sizeof(PJRT_Api_Version))
#define SLOT_OFFSET(index) (FIRST_SLOT_OFFSET + (size_t)(index) * sizeof(void*))

static const char* plugin_table;   /* the plugin's own PJRT_Api */
static char* our_table;            /* its copy, with our slots */
static size_t table_size;

static slot_fn plugin_slot(size_t index) {
    if (SLOT_OFFSET(index) + sizeof(void*) > table_size) return NULL;
    slot_fn fn;
    memcpy(&fn, plugin_table + SLOT_OFFSET(index), sizeof fn);
    return fn;
}

static void set_our_slot(size_t index, slot_fn fn) {
    if (SLOT_OFFSET(index) + sizeof(void*) <= table_size)
        memcpy(our_table + SLOT_OFFSET(index), &fn, sizeof fn);
}

/* ------------------------------------------------------------- records */

static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;
static long programs_seen, executions_seen;

static const char* record_dir(void) {
    const char* dir = getenv("PJRT_REF_RECORD_DIR");
    return dir && dir[0] ? dir : NULL;
}

static void write_file(const char* dir, const char* name, const void* data, size_t size) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return;
    FILE* out = fopen(path, "wb");
    if (!out) return;
    if (size) fwrite(data, 1, size, out);
    fclose(out);
}

/* One line of index.tsv; tabs and line breaks inside fields become spaces. */
static void index_line(const char* dir, const char* format, ...) {
    char line[8192];
    va_list fields;
    va_start(fields, format);
    vsnprintf(line, sizeof line, format, fields);
    va_end(fields);
    for (char* c = line; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    char path[4096];
    if (snprintf(path, sizeof path, "%s/index.tsv", dir) >= (int)sizeof path) return;
    FILE* out = fopen(path, "a");
    if (!out) return;
    fprintf(out, "%s\n", line);
    fclose(out);
}

static const char* current_test(void) {
    const char* test = getenv("PJRT_REF_RECORD_TEST");
    return test ? test : "";
}

/* The plugin's message for `error` (a tab-free copy in `out`), destroying the error. */
static const char* take_error(PJRT_Error* error, char* out, size_t size) {
    out[0] = 0;
    if (!error) return out;
    PJRT_Error_Message_Args message = {.struct_size = sizeof message, .error = error};
    void_slot_fn message_fn = (void_slot_fn)plugin_slot(PJRT_REF_SLOT_PJRT_Error_Message);
    if (message_fn) {
        message_fn(&message);
        snprintf(out, size, "%.*s", (int)(message.message_size < size ? message.message_size : size - 1),
                 message.message ? message.message : "");
    }
    for (char* c = out; *c; c++)
        if (*c == '\t') *c = ' ';
    PJRT_Error_Destroy_Args destroy = {.struct_size = sizeof destroy, .error = error};
    void_slot_fn destroy_fn = (void_slot_fn)plugin_slot(PJRT_REF_SLOT_PJRT_Error_Destroy);
    if (destroy_fn) destroy_fn(&destroy);
    return out;
}

/* ------------------------------------------- which program an executable runs */

typedef struct { const void* executable; long program; } known_executable;
static known_executable* known;
static size_t known_count, known_capacity;

static void remember_executable(const void* executable, long program) {
    if (known_count == known_capacity) {
        size_t capacity = known_capacity ? 2 * known_capacity : 256;
        known_executable* grown = realloc(known, capacity * sizeof *known);
        if (!grown) return;
        known = grown;
        known_capacity = capacity;
    }
    known[known_count++] = (known_executable){executable, program};
}

static long program_of(const void* executable) {
    for (size_t i = known_count; i-- > 0;)          /* the latest: addresses are reused */
        if (known[i].executable == executable) return known[i].program;
    return 0;
}

/* --------------------------------------------------------------- slots */

static PJRT_Error* record_compile(void* raw) {
    PJRT_Client_Compile_Args* args = raw;
    const char* dir = record_dir();
    slot_fn compile = plugin_slot(PJRT_REF_SLOT_PJRT_Client_Compile);
    if (!dir || !args || !args->program) return compile(raw);
    pthread_mutex_lock(&record_lock);
    long n = ++programs_seen;
    char name[64];
    snprintf(name, sizeof name, "program-%ld.code", n);
    write_file(dir, name, args->program->code, args->program->code_size);
    snprintf(name, sizeof name, "program-%ld.options", n);
    write_file(dir, name, args->compile_options, args->compile_options_size);
    index_line(dir, "program\t%ld\t%.*s\t%s", n, (int)args->program->format_size,
               args->program->format ? args->program->format : "", current_test());
    pthread_mutex_unlock(&record_lock);

    PJRT_Error* error = compile(raw);

    pthread_mutex_lock(&record_lock);
    if (error) {
        /* The host needs the error itself: note that there was one; its text reaches the test. */
        index_line(dir, "compiled\t%ld\terror\t", n);
    } else {
        remember_executable(args->executable, n);
        index_line(dir, "compiled\t%ld\tok\t", n);
    }
    pthread_mutex_unlock(&record_lock);
    return error;
}

static PJRT_Error* record_deserialize(void* raw) {
    PJRT_Executable_DeserializeAndLoad_Args* args = raw;
    slot_fn deserialize = plugin_slot(PJRT_REF_SLOT_PJRT_Executable_DeserializeAndLoad);
    PJRT_Error* error = deserialize(raw);
    const char* dir = record_dir();
    if (!dir || error) return error;
    pthread_mutex_lock(&record_lock);
    long n = ++programs_seen;
    index_line(dir, "program\t%ld\tserialized\t%s", n, current_test());
    index_line(dir, "compiled\t%ld\tok\t", n);
    remember_executable(args->loaded_executable, n);
    pthread_mutex_unlock(&record_lock);
    return error;
}

/* Copy one argument to the host and write it; say why not where it cannot be. */
static void record_argument(const char* dir, long execution, size_t device, size_t index,
                            PJRT_Buffer* buffer) {
    char message[1024] = "ok";
    PJRT_Buffer_ElementType_Args type = {.struct_size = sizeof type, .buffer = buffer};
    PJRT_Buffer_Dimensions_Args dims = {.struct_size = sizeof dims, .buffer = buffer};
    PJRT_Error* error = plugin_slot(PJRT_REF_SLOT_PJRT_Buffer_ElementType)(&type);
    if (!error) error = plugin_slot(PJRT_REF_SLOT_PJRT_Buffer_Dimensions)(&dims);
    char shape[1024] = "";
    for (size_t d = 0; !error && d < dims.num_dims; d++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? "," : "",
                 (long long)dims.dims[d]);
    void* data = NULL;
    PJRT_Buffer_ToHostBuffer_Args copy = {.struct_size = sizeof copy, .src = buffer};
    if (!error && type.type == PJRT_Buffer_Type_TOKEN) {
        snprintf(message, sizeof message, "token");
    } else if (!error) {
        slot_fn to_host = plugin_slot(PJRT_REF_SLOT_PJRT_Buffer_ToHostBuffer);
        error = to_host(&copy);                          /* dst NULL: asks the size */
        if (!error && copy.dst_size > LARGEST_ARGUMENT_BYTES) {
            snprintf(message, sizeof message, "not kept: %zu bytes", copy.dst_size);
        } else if (!error) {
            data = malloc(copy.dst_size ? copy.dst_size : 1);
            copy.dst = data;
            copy.event = NULL;
            error = to_host(&copy);
            if (!error && copy.event) {
                PJRT_Event_Await_Args await = {.struct_size = sizeof await, .event = copy.event};
                error = plugin_slot(PJRT_REF_SLOT_PJRT_Event_Await)(&await);
                PJRT_Event_Destroy_Args destroy = {.struct_size = sizeof destroy, .event = copy.event};
                PJRT_Error* destroyed = plugin_slot(PJRT_REF_SLOT_PJRT_Event_Destroy)(&destroy);
                char ignored[16];
                take_error(destroyed, ignored, sizeof ignored);
            }
            if (!error) {
                char name[96];
                snprintf(name, sizeof name, "argument-%ld-%zu-%zu.bin", execution, device, index);
                write_file(dir, name, data, copy.dst_size);
            }
        }
    }
    if (error) take_error(error, message, sizeof message);
    index_line(dir, "argument\t%ld\t%zu\t%zu\t%d\t%s\t%s", execution, device, index, (int)type.type,
               shape, message[0] ? message : "unreadable");
    free(data);
}

static PJRT_Error* record_execute(void* raw) {
    PJRT_LoadedExecutable_Execute_Args* args = raw;
    const char* dir = record_dir();
    slot_fn execute = plugin_slot(PJRT_REF_SLOT_PJRT_LoadedExecutable_Execute);
    if (!dir || !args || !current_test()[0]) return execute(raw);
    pthread_mutex_lock(&record_lock);
    long e = ++executions_seen;
    index_line(dir, "execution\t%ld\t%ld\t%zu\t%zu\t%s", e, program_of(args->executable),
               args->num_devices, args->num_args, current_test());
    for (size_t d = 0; args->argument_lists && d < args->num_devices; d++)
        for (size_t i = 0; i < args->num_args; i++)
            record_argument(dir, e, d, i, args->argument_lists[d][i]);
    pthread_mutex_unlock(&record_lock);

    PJRT_Error* error = execute(raw);

    pthread_mutex_lock(&record_lock);
    index_line(dir, "executed\t%ld\t%s\t", e, error ? "error" : "ok");
    pthread_mutex_unlock(&record_lock);
    return error;
}

/* ---------------------------------------------------------- GetPjrtApi */

typedef const void* (*get_api_fn)(void);

static const void* recording_table;

static void load_plugin(void) {
    const char* path = getenv("PJRT_REF_RECORD_PLUGIN");
    if (!path || !path[0]) {
        fprintf(stderr, "pjrt-ref recording proxy: PJRT_REF_RECORD_PLUGIN names no plugin\n");
        return;
    }
    void* plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    get_api_fn get = plugin ? (get_api_fn)dlsym(plugin, "GetPjrtApi") : NULL;
    if (!get) {
        fprintf(stderr, "pjrt-ref recording proxy: cannot load %s: %s\n", path, dlerror());
        return;
    }
    plugin_table = get();
    if (!plugin_table) return;
    memcpy(&table_size, plugin_table, sizeof table_size);
    if (table_size < SLOT_OFFSET(PJRT_REF_SLOT_PJRT_LoadedExecutable_Execute + 1)) {
        fprintf(stderr, "pjrt-ref recording proxy: %s's PJRT_Api is too short to record\n", path);
        return;
    }
    our_table = malloc(table_size);
    if (!our_table) return;
    memcpy(our_table, plugin_table, table_size);
    set_our_slot(PJRT_REF_SLOT_PJRT_Client_Compile, record_compile);
    set_our_slot(PJRT_REF_SLOT_PJRT_Executable_DeserializeAndLoad, record_deserialize);
    set_our_slot(PJRT_REF_SLOT_PJRT_LoadedExecutable_Execute, record_execute);
    recording_table = our_table;
}

/* NULL (the host reports it) if the plugin cannot be loaded. */
const void* GetPjrtApi(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_plugin);
    return recording_table;
}
