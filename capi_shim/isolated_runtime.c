/* GetPjrtApi for hosts that run Python: pjrt-ref's Python in a runtime of
 * its own, so no host thread's GIL is ever on the path of a PJRT call.
 *
 * The shim (python_boot.c) runs pjrt-ref's Python in whatever interpreter
 * the process has. In a Python host that is the host's interpreter, and
 * every call needs the host's GIL: a host thread that holds the GIL while
 * it waits for another thread's PJRT call (PyTorch/XLA indexing with a
 * tensor not yet computed, jaxlib compiling against a topology) waits
 * forever. This library is what `pjrt_ref.library_path()` hands to
 * frameworks by default (PJRT_REF_RUNTIME, pjrt_ref/settings.py). It loads
 * the shim with dlmopen into a new link namespace, where the shim's own
 * copy of libpython starts a second interpreter with its own GIL; the
 * host's threads call the shim's slots directly and take only that GIL.
 * Buffers stay zero-copy: both interpreters share the address space, and
 * one heap (one_heap.c).
 *
 * A namespace has its own copy of libc, and some of its state must agree
 * with the host's (the shim itself sets up the fourth, a host thread's
 * ctype tables in our libc, at the thread's first call: entry_guards.c):
 *   - the heap: the shim's malloc family serves the namespace from the
 *     host's allocator (one_heap.c; we pass the host's functions in);
 *   - thread-specific keys: both libcs number keys from 0, and the slots
 *     live in the thread, which both share, so the second Python's GIL
 *     state key would land on the host Python's. We take the namespace
 *     libc's low keys first, so its Python's keys sit above any the host
 *     will use (PyTorch/XLA uses about a hundred);
 *   - the environment: the namespace's libc starts with a pointer to the
 *     host's `environ` array, which the host's next setenv may free. It
 *     gets a copy of its own; pjrt-ref's settings read the host's live
 *     environment through the host's getenv (pjrt_ref_use_host_getenv).
 *
 * If the namespace cannot be made (static TLS exhausted, a libc without
 * dlmopen), the shim is loaded into the host's namespace, as with
 * PJRT_REF_RUNTIME=shared, and stderr says so.
 *
 * Built by setup.py as a plain C library next to the shim; it needs no
 * Python itself.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host_heap.h"

#ifndef PJRT_REF_SHIM_FILE
#error "setup.py defines PJRT_REF_SHIM_FILE, the shim's file name"
#endif

/* Keys the namespace's libc hands out before its Python starts: 768 of the
 * 1024 (PTHREAD_KEYS_MAX), leaving the host the low ones. */
#define HOST_KEY_ROOM 768

typedef const void* (*get_api_fn)(void);


static get_api_fn shim_get_pjrt_api;

/* The shim's path: the directory this library really is in (through any
 * symbolic link the host opened it by) and PJRT_REF_SHIM_FILE. */
static int shim_path(char* out, size_t size) {
    Dl_info info;
    if (!dladdr((void*)&shim_path, &info) || info.dli_fname == NULL) return 0;
    char* real = realpath(info.dli_fname, NULL);
    const char* self = real ? real : info.dli_fname;
    const char* slash = strrchr(self, '/');
    int fits = snprintf(out, size, "%.*s/%s", slash ? (int)(slash - self) : 1, slash ? self : ".",
                        PJRT_REF_SHIM_FILE) < (int)size;
    free(real);
    return fits;
}

static void use_host_heap(void* shim) {
    void (*use)(const pjrt_ref_heap_functions*) = (void (*)(const pjrt_ref_heap_functions*))dlsym(shim, "pjrt_ref_use_host_heap");
    pjrt_ref_heap_functions host = {malloc, free, calloc, realloc, posix_memalign,
                           aligned_alloc, memalign, malloc_usable_size};
    if (use) use(&host);
}

static void keep_low_thread_keys_for_the_host(void* shim) {
    int (*key_create)(pthread_key_t*, void (*)(void*)) =
        (int (*)(pthread_key_t*, void (*)(void*)))dlsym(shim, "pthread_key_create");
    pthread_key_t key = 0;
    while (key_create && key + 1 < HOST_KEY_ROOM && key_create(&key, NULL) == 0) {}
}

static void give_own_environment(void* shim) {
    extern char** environ;
    char*** namespace_environ = (char***)dlsym(shim, "environ");
    if (namespace_environ == NULL || environ == NULL) return;
    size_t count = 0;
    while (environ[count]) count++;
    char** copy = calloc(count + 1, sizeof *copy);
    if (copy == NULL) return;
    for (size_t i = 0; i < count; i++) copy[i] = strdup(environ[i]);
    *namespace_environ = copy;
    void (*use_getenv)(char* (*)(const char*)) =
        (void (*)(char* (*)(const char*)))dlsym(shim, "pjrt_ref_use_host_getenv");
    if (use_getenv) use_getenv(getenv);
}

static void* own_namespace_shim;

/* The host's exit does not finalize the plugin's Python: run its atexit
 * functions, while every library is still loaded. */
static void exit_plugin_python(void) {
    void (*exit_python)(void) = (void (*)(void))dlsym(own_namespace_shim, "pjrt_ref_exit_own_python");
    if (exit_python) exit_python();
}

static void* load_in_own_namespace(const char* path) {
    void* shim = dlmopen(LM_ID_NEWLM, path, RTLD_NOW | RTLD_LOCAL);
    if (shim == NULL) {
        fprintf(stderr, "pjrt-ref: could not give the plugin a Python of its own (%s); it runs in "
                        "the host's Python, where a thread holding the GIL while it waits for a "
                        "PJRT call can deadlock (PJRT_REF_RUNTIME=shared)\n", dlerror());
        return NULL;
    }
    use_host_heap(shim);
    keep_low_thread_keys_for_the_host(shim);
    give_own_environment(shim);
    own_namespace_shim = shim;
    atexit(exit_plugin_python);
    return shim;
}

/* Ctrl-C. The host's Python has a SIGINT handler; a call running in the
 * plugin's Python would never see it. Ours runs the host's and then hands
 * the interrupt to the plugin's Python (pjrt_ref_forward_interrupt), whose
 * running call then ends with CANCELLED while the host raises its own
 * KeyboardInterrupt. A host that later sets another C handler simply
 * replaces ours: Ctrl-C then waits for the call, as on XLA. */
static struct sigaction host_sigint;
static void (*forward_interrupt_to_plugin)(void);

static void on_sigint(int signum, siginfo_t* info, void* context) {
    if (host_sigint.sa_flags & SA_SIGINFO) host_sigint.sa_sigaction(signum, info, context);
    else host_sigint.sa_handler(signum);
    forward_interrupt_to_plugin();
}

static void forward_interrupts(void* shim) {
    forward_interrupt_to_plugin = (void (*)(void))dlsym(shim, "pjrt_ref_forward_interrupt");
    int host_has_handler = (host_sigint.sa_flags & SA_SIGINFO)
        || (host_sigint.sa_handler != SIG_DFL && host_sigint.sa_handler != SIG_IGN);
    struct sigaction ours = host_sigint;
    if (host_has_handler && forward_interrupt_to_plugin) {
        ours.sa_sigaction = on_sigint;
        ours.sa_flags |= SA_SIGINFO;
    }
    sigaction(SIGINT, &ours, NULL);   /* the host's, or ours in front of it */
}

static void load_shim(void) {
    char path[4096] = "";
    if (!shim_path(path, sizeof path) || access(path, R_OK) != 0) {
        fprintf(stderr, "pjrt-ref: the shim library %s is not beside this one: a copy of pjrt-ref's "
                        "plugin library needs it (a symbolic link does not)\n", path);
        return;
    }
    void* shim = load_in_own_namespace(path);
    if (shim == NULL) shim = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (shim == NULL) {
        fprintf(stderr, "pjrt-ref: could not load %s: %s\n", path, dlerror());
        return;
    }
    get_api_fn get_api = (get_api_fn)dlsym(shim, "GetPjrtApi");
    if (get_api == NULL || shim != own_namespace_shim) {
        shim_get_pjrt_api = get_api;
        return;
    }
    sigaction(SIGINT, NULL, &host_sigint);
    if (get_api() != NULL) {   /* boots the plugin's Python, on this thread */
        forward_interrupts(shim);
        shim_get_pjrt_api = get_api;
    }
}

/* The PJRT plugin's one exported function (pjrt_c_api.h: "GetPjrtApi"). */
__attribute__((visibility("default")))
const void* GetPjrtApi(void) {
    static pthread_once_t loaded = PTHREAD_ONCE_INIT;
    pthread_once(&loaded, load_shim);
    return shim_get_pjrt_api ? shim_get_pjrt_api() : NULL;
}
