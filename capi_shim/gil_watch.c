/* The hang detector: a report when an entry point has waited too long for
 * Python's GIL. Included by entry_guards.c, after
 * pjrt_ref_python_gone.
 *
 * Every slot takes the GIL (PJRT_REF_ENTER). When another thread of the host
 * holds the GIL while it waits in C or C++ code for a result that this very
 * call would produce, neither can go on: a deadlock that no plugin running
 * Python in the host's interpreter can break from inside (docs/architecture.md,
 * "The GIL, and a Python of its own"). It cannot be detected without a timeout, because a long C call
 * holding the GIL (a big numpy operation) looks the same for a while. So a
 * watchdog thread looks, once a second, at the calls waiting for the GIL,
 * and reports each one that has waited longer than PJRT_REF_GIL_STALL
 * seconds: the entry point, the waiting thread, every thread inside
 * pjrt-ref, and every Python thread's stack, the GIL's holder among them.
 * The call keeps waiting: the report is a diagnosis, not a way out (the host
 * may yet release the GIL).
 *
 * Cost on the fast path: each wait is bracketed by a clock read and a few
 * atomic stores into this thread's record.
 */

#include <signal.h>
#include <sys/syscall.h>
#include <time.h>

#define PJRT_REF_WAITER_SLOTS 256
/* PJRT_REF_GIL_STALL's default in pjrt_ref/settings.py, for the one wait
 * that comes before Python reads the settings (python_boot.c); a project
 * test keeps the two equal. */
#define PJRT_REF_DEFAULT_GIL_STALL 60.0

/* One thread's record. A thread claims one the first time it calls in and
 * gives it back when it exits (the key's destructor). */
struct pjrt_ref_waiter {
    atomic_int used;
    pid_t tid;                          /* the kernel's id: /proc/self/task/<tid> */
    unsigned long thread;               /* pthread_self(), as Python prints it */
    _Atomic(const char*) entry;         /* the entry point waiting for the GIL, else NULL */
    _Atomic(long long) since_ns;        /* when it started waiting */
    atomic_int reported;                /* this wait has been reported */
};

static struct pjrt_ref_waiter pjrt_ref_waiters[PJRT_REF_WAITER_SLOTS];
static _Thread_local struct pjrt_ref_waiter* pjrt_ref_my_waiter;
static pthread_key_t pjrt_ref_waiter_key;
static pthread_once_t pjrt_ref_waiter_key_once = PTHREAD_ONCE_INIT;
static _Atomic(long long) pjrt_ref_gil_stall_ns;     /* 0: no watchdog */
static PyInterpreterState* pjrt_ref_watched_interpreter;

static long long pjrt_ref_now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

static void pjrt_ref_release_waiter(void* record) {
    struct pjrt_ref_waiter* waiter = record;
    atomic_store(&waiter->entry, NULL);
    atomic_store(&waiter->used, 0);
}

static void pjrt_ref_make_waiter_key(void) {
    pthread_key_create(&pjrt_ref_waiter_key, pjrt_ref_release_waiter);
}

/* This thread's record, claimed on first use; NULL if all are taken (the
 * thread's waits then go unwatched). */
static struct pjrt_ref_waiter* pjrt_ref_this_waiter(void) {
    if (pjrt_ref_my_waiter != NULL) return pjrt_ref_my_waiter;
    pthread_once(&pjrt_ref_waiter_key_once, pjrt_ref_make_waiter_key);
    for (int i = 0; i < PJRT_REF_WAITER_SLOTS; i++) {
        int free_slot = 0;
        struct pjrt_ref_waiter* waiter = &pjrt_ref_waiters[i];
        if (atomic_compare_exchange_strong(&waiter->used, &free_slot, 1)) {
            waiter->tid = (pid_t)syscall(SYS_gettid);
            waiter->thread = (unsigned long)pthread_self();
            pthread_setspecific(pjrt_ref_waiter_key, waiter);
            return pjrt_ref_my_waiter = waiter;
        }
    }
    return NULL;
}

/* Bracket a wait for the GIL by `entry` (a string literal). */
static struct pjrt_ref_waiter* pjrt_ref_gil_wait_begin(const char* entry) {
    if (atomic_load_explicit(&pjrt_ref_gil_stall_ns, memory_order_relaxed) == 0) return NULL;
    struct pjrt_ref_waiter* waiter = pjrt_ref_this_waiter();
    if (waiter == NULL || atomic_load(&waiter->entry) != NULL) return NULL;   /* nested: outer counts */
    atomic_store(&waiter->since_ns, pjrt_ref_now_ns());
    atomic_store(&waiter->reported, 0);
    atomic_store(&waiter->entry, entry);
    return waiter;
}

static void pjrt_ref_gil_wait_end(struct pjrt_ref_waiter* waiter) {
    if (waiter == NULL) return;
    if (atomic_load(&waiter->reported))
        dprintf(2, "pjrt-ref: %s on thread %d got the GIL after %.0f s.\n",
                atomic_load(&waiter->entry), (int)waiter->tid,
                (pjrt_ref_now_ns() - atomic_load(&waiter->since_ns)) / 1e9);
    atomic_store(&waiter->entry, NULL);
}

/* The kernel's name for a thread of this process ("" if unknown). */
static void pjrt_ref_thread_name(pid_t tid, char* out, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
    FILE* file = fopen(path, "r");
    out[0] = 0;
    if (file == NULL) return;
    if (fgets(out, (int)size, file) != NULL) out[strcspn(out, "\n")] = 0;
    fclose(file);
}

typedef const char* (*pjrt_ref_dump_threads_fn)(int, PyInterpreterState*, PyThreadState*);

static void pjrt_ref_report_stall(struct pjrt_ref_waiter* stalled, long long now) {
    char name[64];
    pjrt_ref_thread_name(stalled->tid, name, sizeof name);
    dprintf(2,
        "pjrt-ref: %s on thread %d (\"%s\") has waited %.0f s for Python's GIL.\n"
        "  Another thread holds the GIL without running Python code. If it waits, in C or C++,\n"
        "  for a result of this call, the process is deadlocked: pjrt-ref runs in the host's\n"
        "  Python and needs the GIL to go on (docs/architecture.md, \"The GIL, and a Python of\n"
        "  its own\"). The call keeps waiting. PJRT_REF_RUNTIME=isolated gives the plugin a\n"
        "  Python of its own, which no host thread can block. PJRT_REF_GIL_STALL sets when this\n"
        "  report comes (0: never).\n"
        "  Threads inside pjrt-ref's entry points:\n",
        atomic_load(&stalled->entry), (int)stalled->tid, name,
        (now - atomic_load(&stalled->since_ns)) / 1e9);
    for (int i = 0; i < PJRT_REF_WAITER_SLOTS; i++) {
        struct pjrt_ref_waiter* waiter = &pjrt_ref_waiters[i];
        const char* entry = atomic_load(&waiter->entry);
        if (!atomic_load(&waiter->used) || entry == NULL) continue;
        pjrt_ref_thread_name(waiter->tid, name, sizeof name);
        dprintf(2, "    thread %d (\"%s\", 0x%016lx): %s, waiting %.0f s for the GIL\n",
                (int)waiter->tid, name, waiter->thread, entry,
                (now - atomic_load(&waiter->since_ns)) / 1e9);
    }
    /* Python's own stack dump, which needs no GIL (faulthandler uses it);
     * exported by libpython up to 3.12. */
    pjrt_ref_dump_threads_fn dump =
        (pjrt_ref_dump_threads_fn)dlsym(RTLD_DEFAULT, "_Py_DumpTracebackThreads");
    if (dump != NULL && pjrt_ref_watched_interpreter != NULL) {
        dprintf(2, "  Python threads (the GIL's holder is among them):\n");
        dump(2, pjrt_ref_watched_interpreter, NULL);
    }
}

static void* pjrt_ref_gil_watchdog(void* unused) {
    (void)unused;
    for (;;) {
        long long stall = atomic_load(&pjrt_ref_gil_stall_ns);
        struct timespec tick = {.tv_sec = 1, .tv_nsec = 0};
        if (stall > 0 && stall < 4000000000LL) tick = (struct timespec){0, stall / 4};
        nanosleep(&tick, NULL);
        if (stall == 0 || pjrt_ref_python_gone()) continue;   /* at exit: nothing to dump */
        long long now = pjrt_ref_now_ns();
        for (int i = 0; i < PJRT_REF_WAITER_SLOTS; i++) {
            struct pjrt_ref_waiter* waiter = &pjrt_ref_waiters[i];
            if (!atomic_load(&waiter->used) || atomic_load(&waiter->entry) == NULL) continue;
            if (atomic_load(&waiter->reported) || now - atomic_load(&waiter->since_ns) < stall) continue;
            atomic_store(&waiter->reported, 1);
            pjrt_ref_report_stall(waiter, now);
        }
    }
    return NULL;
}

static void pjrt_ref_start_gil_watchdog(void) {
    pthread_t thread;
    pthread_attr_t attributes;
    sigset_t all, before;
    sigfillset(&all);                        /* signals stay with the host's threads */
    pthread_sigmask(SIG_SETMASK, &all, &before);
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attributes, 256 * 1024);
    if (pthread_create(&thread, &attributes, pjrt_ref_gil_watchdog, NULL) == 0)
        pthread_setname_np(thread, "pjrt-ref-watch");
    pthread_attr_destroy(&attributes);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
}

/* Called from Python (pjrt_ref/capi/__init__.py; cffi releases the GIL): set the
 * stall in seconds (0: off) and start the watchdog once. */
void pjrt_ref_gil_watch(double seconds) {
    static pthread_once_t started = PTHREAD_ONCE_INIT;
    pjrt_ref_watched_interpreter = PyInterpreterState_Main();
    atomic_store(&pjrt_ref_gil_stall_ns, seconds > 0 ? (long long)(seconds * 1e9) : 0);
    if (seconds <= 0) return;
    pthread_once(&started, pjrt_ref_start_gil_watchdog);
}
