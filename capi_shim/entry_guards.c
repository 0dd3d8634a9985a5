/* The guards every slot passes through on its way into Python, and the few
 * C helpers Python calls: included by the C source that build_shim.py
 * generates (after Python.h, pjrt_c_api.h and the slot declarations).
 *
 * - pjrt_ref_enter / pjrt_ref_leave: no call enters a finalizing
 *   interpreter, and at shutdown only the exiting thread enters while the
 *   atexit hook (pjrt_ref/capi/__init__.py) waits for calls in flight.
 * - PJRT_REF_ENTER / PJRT_REF_LEAVE: take the GIL (re-entrantly, in any of
 *   the three states a host calls in; a long wait is reported, gil_watch.c), park the host's pending exception,
 *   and carry a Ctrl-C back to the host's Python code.
 * - PJRT_REF_GONE: the one static error a slot returns when Python may not
 *   be entered; the Error_* entry points recognise it without Python.
 */

static int pjrt_ref_python_gone(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return !Py_IsInitialized() || Py_IsFinalizing();
#else
    return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

#include "gil_watch.c"                    /* the hang detector PJRT_REF_ENTER feeds */

static int pjrt_ref_in_own_namespace(void);   /* python_boot.c */

/* A thread's first call, in a namespace of our own (isolated_runtime.c):
 * a libc sets up its per-thread ctype tables (isalpha, toupper...) in the
 * threads it creates, and the host's libc created this one, so ours would
 * read NULL tables (MLIR's lexer crashed in isalpha). Set ours up. */
static _Thread_local int pjrt_ref_thread_prepared;

static void pjrt_ref_prepare_thread(void) {
    static void (*ctype_init)(void);
    static atomic_int looked_up;
    if (pjrt_ref_thread_prepared) return;
    pjrt_ref_thread_prepared = 1;
    if (!pjrt_ref_in_own_namespace()) return;
    if (!atomic_load(&looked_up)) {
        void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);   /* ours: we are in our namespace */
        ctype_init = libc ? (void (*)(void))dlsym(libc, "__ctype_init") : NULL;
        atomic_store(&looked_up, 1);
    }
    if (ctype_init) ctype_init();
}

static atomic_int pjrt_ref_inflight;      /* calls inside Python right now */
static atomic_int pjrt_ref_closing;       /* set by pjrt_ref_begin_shutdown */
static pthread_t pjrt_ref_closing_thread;

/* Whether this call may enter Python; if so it counts as in flight until
 * pjrt_ref_leave(). (Count first, then check: the shutdown hook either sees
 * us in flight or we see it closing.) */
static int pjrt_ref_enter(void) {
    if (pjrt_ref_python_gone()) return 0;
    pjrt_ref_prepare_thread();
    atomic_fetch_add(&pjrt_ref_inflight, 1);
    if (atomic_load(&pjrt_ref_closing) && !pthread_equal(pthread_self(), pjrt_ref_closing_thread)) {
        atomic_fetch_sub(&pjrt_ref_inflight, 1);
        return 0;
    }
    return 1;
}

static void pjrt_ref_leave(void) {
    atomic_fetch_sub(&pjrt_ref_inflight, 1);
}

void pjrt_ref_begin_shutdown(void) {
    pjrt_ref_closing_thread = pthread_self();
    atomic_store(&pjrt_ref_closing, 1);
}

int pjrt_ref_inflight_calls(void) {
    return atomic_load(&pjrt_ref_inflight);
}

/* PJRT_Chunk memory the plugin hands to a framework's send callback, which
 * frees it with chunk->deleter (pjrt_ref/services/host_callbacks.py): plain C, so
 * the deleter never needs Python. */
void* pjrt_ref_chunk_alloc(size_t size) {
    return malloc(size ? size : 1);
}

void pjrt_ref_chunk_free(void* data, void* deleter_arg) {
    (void)deleter_arg;
    free(data);
}

/* Ctrl-C during an entry point: Python turns the KeyboardInterrupt into a
 * CANCELLED error and asks, through `requested`, for the interrupt to be
 * raised again once the call has returned to C (PJRT_REF_LEAVE); setting it
 * from Python would raise it at once, inside the entry point. The host may
 * call us again (PJRT_Error_GetCode, _Message, _Destroy) before its Python
 * code runs: while the interrupt is `carried`, each call takes it off at
 * entry and puts it back at exit, so it reaches the host's Python code and
 * not one of those calls. Once the host has run it, the next entry finds
 * no interrupt pending and stops carrying it. */
static _Thread_local int pjrt_ref_interrupt_requested;
static _Thread_local int pjrt_ref_interrupt_carried;

/* In a Python of our own (isolated_runtime.c) the host's Python had the
 * signal itself, forwarded to us: nothing to raise again. */
void pjrt_ref_request_interrupt(void) {
    if (!pjrt_ref_in_own_namespace()) pjrt_ref_interrupt_requested = 1;
}

/* isolated_runtime.c's SIGINT handler, after the host's: the plugin's Python
 * gets the interrupt only while a call is inside it, so a Ctrl-C the host
 * handled between calls never cancels a later call. Async-signal-safe. */
__attribute__((visibility("default")))
void pjrt_ref_forward_interrupt(void) {
    if (atomic_load(&pjrt_ref_inflight) > 0) PyErr_SetInterruptEx(SIGINT);
}

/* A host may call us while its own Python exception is pending (e.g. a
 * framework destroying buffers while unwinding from a failed Python
 * callback). Park that exception around our call and put it back after, so
 * neither side sees the other's error. */
#define PJRT_REF_ENTER(entry)                                   \
    struct pjrt_ref_waiter* pjrt_ref_wait =                     \
        PyGILState_Check() ? NULL : pjrt_ref_gil_wait_begin(entry); \
    PyGILState_STATE pjrt_ref_gil = PyGILState_Ensure();        \
    pjrt_ref_gil_wait_end(pjrt_ref_wait);                       \
    PyObject *pjrt_ref_type, *pjrt_ref_value, *pjrt_ref_tb;     \
    PyErr_Fetch(&pjrt_ref_type, &pjrt_ref_value, &pjrt_ref_tb); \
    if (pjrt_ref_interrupt_carried && !PyOS_InterruptOccurred()) \
        pjrt_ref_interrupt_carried = 0
#define PJRT_REF_LEAVE                                          \
    PyErr_Restore(pjrt_ref_type, pjrt_ref_value, pjrt_ref_tb);  \
    if (pjrt_ref_interrupt_requested || pjrt_ref_interrupt_carried) { \
        pjrt_ref_interrupt_requested = 0;                       \
        pjrt_ref_interrupt_carried = 1;                         \
        PyErr_SetInterrupt();                                   \
    }                                                           \
    PyGILState_Release(pjrt_ref_gil)

static char pjrt_ref_gone_storage[16];
#define PJRT_REF_GONE ((PJRT_Error*)pjrt_ref_gone_storage)
static const char pjrt_ref_gone_message[] =
    "pjrt-ref: the Python interpreter behind this plugin is shutting down";
