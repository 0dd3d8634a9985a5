/* A tiny thread pool that computes one matrix product's blocks (of rows or
 * of columns) on several cores, without Python's GIL.
 *
 * Read interpreter/native/blocks.py and products.py first: they decide how a
 * product is cut into blocks (from its shape alone, so the bits never depend
 * on who computes which block) and whether helpers join (only onto idle
 * CPUs); this file, called through gemm_pool.py, only *runs* the blocks,
 * each one a call of single-threaded OpenBLAS gemm (the function pointer
 * Python found in numpy's OpenBLAS, openblas.py).
 *
 * Why C and not Python threads: a Python helper thread sleeps on a lock,
 * and when it is woken its (idle, halted) virtual CPU must first be
 * rescheduled by the hypervisor, then the thread needs the GIL to start,
 * and again to report that its block is done. Here, Python calls one C
 * function (cffi releases the GIL for the whole call), and the pool's
 * threads *spin* for a short while after their last block before they
 * sleep, so that the next product finds them awake. Design:
 * docs/performance-design.md; numbers: benchmarks/README.md.
 *
 * The protocol, for one product ("job"):
 *   1. The caller takes the pool (one job at a time: a second host thread
 *      that finds the pool busy gets 0 back, and products.py calls again with
 *      helpers == 0: it computes the same blocks itself and never waits).
 *   2. It writes the job's parameters, then publishes the job by storing a
 *      new `claim` word: generation (32 bits) | blocks (16) | next (16).
 *      It wakes as many sleeping workers as it wants helpers.
 *   3. The caller and every awake worker claim blocks by incrementing
 *      `next` with a compare-and-swap that also checks the generation, so
 *      a worker that wakes late can never claim a block of a later job.
 *      A worker reads the job's parameters only after a successful claim:
 *      the job cannot end (and its parameters change) while one of its
 *      blocks is unfinished.
 *   4. Each finished block increments `done`. The caller, once no block is
 *      left to claim, waits for `done` to reach the block count (spinning
 *      briefly, then sleeping on a futex that the last worker wakes).
 *   The caller never waits for a worker that has not started: blocks no
 *   worker has claimed are the caller's.
 *
 * Fork: a forked child has none of the pool's threads. A pthread_atfork
 * child handler forgets them (and a job that another thread of the parent
 * had in flight), so the child starts new workers the first time it needs
 * them. (interpreter/loader.py forks to check a program's bytecode.)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gemm_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* CBLAS constants (cblas.h); OpenBLAS's ILP64 build ("64_" symbol suffix)
 * takes 64-bit integers for sizes and leading dimensions. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111 };
typedef void (*sgemm_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float *,
                         int64_t, const float *, int64_t, float, float *, int64_t);
typedef void (*dgemm_fn)(int, int, int, int64_t, int64_t, int64_t, double, const double *,
                         int64_t, const double *, int64_t, double, double *, int64_t);

/* How often a spinning thread looks at the clock (pauses between looks),
 * and how often it offers its CPU to other runnable threads (looks between
 * sched_yield calls): a spinner must not delay work of the host's. */
#define PAUSES_PER_CLOCK_READ 32
#define CLOCK_READS_PER_YIELD 16

/* One product: C = A @ B (or C += A @ B), row-major, computed in blocks of
 * rows or columns. */
struct job {
    intptr_t gemm;            /* sgemm_fn or dgemm_fn */
    int is_double;
    int trans_a, trans_b;     /* CblasNoTrans (111) or CblasTrans (112) */
    int axis;                 /* GEMM_POOL_ROW_BLOCKS or GEMM_POOL_COLUMN_BLOCKS */
    int accumulate;           /* 1: gemm's beta is 1 (C += A @ B), else 0 */
    int64_t rows, columns, inner, blocks;
    intptr_t a, b, c;
    int64_t lda, ldb, ldc;
};

static struct {
    _Atomic uint64_t claim;       /* generation << 32 | blocks << 16 | next */
    _Atomic uint32_t wake_word;   /* futex word sleeping workers wait on */
    _Atomic uint32_t done;        /* blocks of the current job finished */
    _Atomic uint32_t caller_sleeping;
    _Atomic int busy;             /* a caller owns the pool */
    _Atomic int sleepers;         /* workers asleep on wake_word */
    _Atomic int spinning;         /* workers spinning, waiting for a job */
    _Atomic int64_t spin_ns;      /* how long workers spin (set by callers) */
    pthread_mutex_t start_lock;   /* serialises starting workers */
    int workers;                  /* workers started (under start_lock) */
    struct job job;               /* written only by the pool's owner */
} pool = {.start_lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;

static long futex(_Atomic uint32_t *word, int op, uint32_t value) {
    return syscall(SYS_futex, (uint32_t *)word, op | FUTEX_PRIVATE_FLAG, value, NULL, NULL, 0);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static uint32_t generation_of(uint64_t claim) { return (uint32_t)(claim >> 32); }

/* Spin until `done(argument)` is true or `spin_ns` has passed; whether it
 * became true. Pauses between checks (kind to the sibling hyperthread), and
 * yields the CPU now and then. */
static int spin_until(int (*done)(const void *), const void *argument, int64_t spin_ns) {
    if (spin_ns <= 0)
        return done(argument);
    int64_t deadline = now_ns() + spin_ns;
    for (unsigned reads = 1;; reads++) {
        for (int i = 0; i < PAUSES_PER_CLOCK_READ; i++) {
            if (done(argument))
                return 1;
            CPU_RELAX();
        }
        if (now_ns() >= deadline)
            return done(argument);
        if (reads % CLOCK_READS_PER_YIELD == 0)
            sched_yield();
    }
}

/* Claim the next unclaimed block of job `generation`: its index, or -1 when
 * none is left or that job is over. */
static int64_t claim_block(uint32_t generation) {
    uint64_t claim = atomic_load(&pool.claim);
    for (;;) {
        uint64_t blocks = (claim >> 16) & 0xffff, next = claim & 0xffff;
        if (generation_of(claim) != generation || next >= blocks)
            return -1;
        if (atomic_compare_exchange_weak(&pool.claim, &claim, claim + 1))
            return (int64_t)next;
    }
}

/* One gemm call: rows [row, row + rows) and columns [column, column +
 * columns) of C. A's row `row` starts `row` rows down in a row-major A, or
 * `row` elements along in a transposed one (A stored as its transpose,
 * row-major); B's column `column` likewise. */
static void gemm_call(const struct job *job, int64_t row, int64_t rows, int64_t column,
                      int64_t columns) {
    int64_t size = job->is_double ? sizeof(double) : sizeof(float);
    intptr_t a = job->a + (job->trans_a == CBLAS_NO_TRANS ? row * job->lda : row) * size;
    intptr_t b = job->b + (job->trans_b == CBLAS_NO_TRANS ? column : column * job->ldb) * size;
    intptr_t c = job->c + (row * job->ldc + column) * size;
    if (job->is_double)
        ((dgemm_fn)job->gemm)(CBLAS_ROW_MAJOR, job->trans_a, job->trans_b, rows, columns,
                              job->inner, 1.0, (const double *)a, job->lda, (const double *)b,
                              job->ldb, job->accumulate ? 1.0 : 0.0, (double *)c, job->ldc);
    else
        ((sgemm_fn)job->gemm)(CBLAS_ROW_MAJOR, job->trans_a, job->trans_b, rows, columns,
                              job->inner, 1.0f, (const float *)a, job->lda, (const float *)b,
                              job->ldb, job->accumulate ? 1.0f : 0.0f, (float *)c, job->ldc);
}

/* Block `block` of the product, cut as blas.product_blocks cuts it. */
static void run_block(const struct job *job, int64_t block) {
    int64_t length = job->axis == GEMM_POOL_ROW_BLOCKS ? job->rows : job->columns;
    int64_t lo = length * block / job->blocks, hi = length * (block + 1) / job->blocks;
    if (job->axis == GEMM_POOL_ROW_BLOCKS)
        gemm_call(job, lo, hi - lo, 0, job->columns);
    else
        gemm_call(job, 0, job->rows, lo, hi - lo);
}

/* Claim and run blocks of job `generation` until none is left. */
static void work_on(uint32_t generation) {
    int64_t block;
    while ((block = claim_block(generation)) >= 0) {
        run_block(&pool.job, block);
        atomic_fetch_add(&pool.done, 1);
        /* From here on the job may be over and the next one being written:
         * only pool-wide words. The caller announces that it sleeps before
         * it reads `done` again, so one of us sees the other. */
        if (atomic_load(&pool.caller_sleeping))
            futex(&pool.done, FUTEX_WAKE, 1);
    }
}

static int new_job_published(const void *seen) {
    return generation_of(atomic_load(&pool.claim)) != *(const uint32_t *)seen;
}

/* A worker: wait for a job (spinning for spin_ns, then asleep), help with
 * it, repeat. Workers live as long as the process. */
static void *worker_main(void *unused) {
    (void)unused;
    uint32_t seen = generation_of(atomic_load(&pool.claim));
    for (;;) {
        atomic_fetch_add(&pool.spinning, 1);
        int found = spin_until(new_job_published, &seen, atomic_load(&pool.spin_ns));
        atomic_fetch_sub(&pool.spinning, 1);
        if (!found) {
            atomic_fetch_add(&pool.sleepers, 1);
            uint32_t word = atomic_load(&pool.wake_word);
            /* Checked after announcing ourselves as a sleeper: a job
             * published before this was seen here, one published after it
             * sees us in `sleepers` and wakes us (futex compares `word`). */
            if (!new_job_published(&seen))
                futex(&pool.wake_word, FUTEX_WAIT, word);
            atomic_fetch_sub(&pool.sleepers, 1);
        }
        uint32_t generation = generation_of(atomic_load(&pool.claim));
        if (generation != seen) {
            seen = generation;
            work_on(generation);
        }
    }
    return NULL;
}

static void forget_pool_in_child(void) {
    /* Only the forking thread exists in the child: no worker, no job. */
    atomic_store(&pool.busy, 0);
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.spinning, 0);
    atomic_store(&pool.caller_sleeping, 0);
    pthread_mutex_init(&pool.start_lock, NULL);
    pool.workers = 0;
}

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, forget_pool_in_child); }

/* Start workers until there are `wanted` (as many as can be started).
 * They start with every signal blocked: signals (Ctrl-C) are for the host's
 * threads, and Python's handlers expect to run there. */
static void start_workers(int wanted) {
    pthread_once(&fork_handler_once, register_fork_handler);
    pthread_mutex_lock(&pool.start_lock);
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    while (pool.workers < wanted && pool.workers < GEMM_POOL_MAX_WORKERS) {
        pthread_attr_t attributes;
        pthread_t thread;
        pthread_attr_init(&attributes);
        pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&thread, &attributes, worker_main, NULL);
        pthread_attr_destroy(&attributes);
        if (failed)
            break;   /* no more threads: the caller does more blocks itself */
        pthread_setname_np(thread, "pjrt_ref_gemm");
        pool.workers++;
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    pthread_mutex_unlock(&pool.start_lock);
}

static int all_blocks_done(const void *blocks) {
    return atomic_load(&pool.done) >= *(const uint32_t *)blocks;
}

int gemm_pool_multiply(intptr_t gemm, int is_double, int trans_a, int trans_b, int64_t rows,
                       int64_t columns, int64_t inner, intptr_t a, int64_t lda, intptr_t b,
                       int64_t ldb, intptr_t c, int64_t ldc, int accumulate, int axis, int blocks,
                       int helpers, int64_t spin_ns) {
    struct job job = {gemm, is_double, trans_a, trans_b, axis, accumulate != 0, rows, columns,
                      inner, blocks, a, b, c, lda, ldb, ldc};
    if (blocks < 1 || blocks > GEMM_POOL_MAX_BLOCKS)
        return 0;         /* `claim` has 16 bits for them (products.py checks) */
    if (axis != GEMM_POOL_ROW_BLOCKS && axis != GEMM_POOL_COLUMN_BLOCKS)
        return 0;
    if (helpers <= 0) {   /* every block on this thread (blas.blocks_are_exact) */
        for (int64_t block = 0; block < blocks; block++)
            run_block(&job, block);
        return 1;
    }
    if (atomic_exchange(&pool.busy, 1))
        return 0;         /* another host thread's product has the pool */
    atomic_store(&pool.spin_ns, spin_ns);
    start_workers(helpers);

    pool.job = job;
    atomic_store(&pool.done, 0);
    uint32_t generation = generation_of(atomic_load(&pool.claim)) + 1;
    atomic_store(&pool.claim, (uint64_t)generation << 32 | (uint64_t)blocks << 16);
    /* Wake sleepers only for the helpers the spinning workers do not
     * provide. (A spinner that gives up right now announces itself as a
     * sleeper and then looks at `claim` again: it sees this job.) */
    atomic_fetch_add(&pool.wake_word, 1);
    int wanted = helpers - atomic_load(&pool.spinning);
    if (wanted > 0 && atomic_load(&pool.sleepers) > 0)
        futex(&pool.wake_word, FUTEX_WAKE, wanted);

    work_on(generation);
    uint32_t total = (uint32_t)blocks;
    if (!spin_until(all_blocks_done, &total, spin_ns)) {
        atomic_store(&pool.caller_sleeping, 1);
        uint32_t finished;
        while ((finished = atomic_load(&pool.done)) < total)
            futex(&pool.done, FUTEX_WAIT, finished);
        atomic_store(&pool.caller_sleeping, 0);
    }
    atomic_store(&pool.busy, 0);
    return 1;
}

int gemm_pool_spinning(void) { return atomic_load(&pool.spinning); }

int gemm_pool_workers(void) { return pool.workers; }
