/* The C side of the product pool (gemm_pool.c explains it). These
 * declarations are also given to cffi (build_gemm_pool.py): Python
 * (gemm_pool.py) calls them with the GIL released. */
#include <stdint.h>

/* The version of these declarations: gemm_pool.py loads no module built from
 * another (a stale build after a pull would take the wrong arguments). */
#define GEMM_POOL_ABI 2

/* Most worker threads the pool starts (one per helper CPU). */
#define GEMM_POOL_MAX_WORKERS 63
/* Most blocks in one product (a 16-bit field of the pool's claim word). */
#define GEMM_POOL_MAX_BLOCKS 65535
/* Which dimension of C the blocks cut (the `axis` argument). */
#define GEMM_POOL_ROW_BLOCKS 0
#define GEMM_POOL_COLUMN_BLOCKS 1

/* C = A @ B, or C += A @ B when `accumulate` is 1 (gemm's beta = 1: each
 * block adds its product to C's block; whether that gives the bits of
 * adding the whole product afterwards is product_probes.py's run-time
 * probe), with C row-major, rows x columns, leading dimension ldc, computed by
 * `blocks` blocks of rows (axis GEMM_POOL_ROW_BLOCKS), block k being rows
 * [rows*k/blocks, rows*(k+1)/blocks), or likewise blocks of columns
 * (GEMM_POOL_COLUMN_BLOCKS); each block is one gemm call.
 * `gemm` is the address of OpenBLAS's ILP64 cblas_sgemm (is_double 0) or
 * cblas_dgemm (1); trans_a/trans_b are CblasNoTrans (111) or CblasTrans
 * (112) with the leading dimensions CBLAS expects for a row-major call.
 * helpers == 0: this thread computes every block (the path
 * product_probes.py's exactness probes use). Otherwise up to `helpers`
 * pool workers help; workers spin `spin_ns` ns for the next job before sleeping.
 * Returns 1 when C is computed, 0 when another thread's product holds the
 * pool, `blocks` is not in 1..GEMM_POOL_MAX_BLOCKS or `axis` is neither
 * value (nothing was done:
 * compute C another way). The caller has checked every other argument
 * (gemm_pool.py, products.py); nothing here can fail. */
int gemm_pool_multiply(intptr_t gemm, int is_double, int trans_a, int trans_b, int64_t rows,
                       int64_t columns, int64_t inner, intptr_t a, int64_t lda, intptr_t b,
                       int64_t ldb, intptr_t c, int64_t ldc, int accumulate, int axis, int blocks,
                       int helpers, int64_t spin_ns);

/* Workers spinning right now, waiting for a job (they are "runnable" in
 * /proc/loadavg but would yield to any real work). */
int gemm_pool_spinning(void);

/* Workers started so far in this process. */
int gemm_pool_workers(void);
