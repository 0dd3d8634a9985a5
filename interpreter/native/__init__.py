"""Compiled and native code the interpreter runs: numba functions, BLAS
products on a C thread pool, threads, the process heap.

The ops (`ops/`) call it while a program runs, and the optimiser (`optimiser/`)
builds its fused and compiled steps on it; it imports neither.

* `regions`: region bodies (scatter update computations, map, reduce folds,
  sort comparators) compiled to scalar numba functions, for the kernels
  whose bodies no single numpy call computes. `translator` writes their numba
  source (and that of optimiser/loops.py's compiled `while` loops) from
  `scalar_expressions`, op by op.
* `codegen` writes every generated kernel to a cache directory so numba's
  own cache keeps the machine code across processes; `vector_math` gives
  f32 exp, expm1, tanh and logistic their vectorised versions.
* `blas` is the face of matrix products: `openblas_threads` caps OpenBLAS
  at one thread (`openblas` finds it), and `blas.matmul` asks the
  process's `products.ProductEngine`, which cuts big products into blocks
  fixed by their shape (`blocks`), shared with a small C thread pool
  (`gemm_pool.c`, built by `build_gemm_pool.py`, loaded by `gemm_pool`)
  without the GIL, each shape run the way `product_strategy` timed best on
  this machine (`product_probes` runs the timing and the checks of which
  ways give the same bits). `threads` splits fused loops over Python
  threads (`helper_threads`).
* `heap` keeps freed array memory in the process (no page faults per op
  result). `process_setup.set_up_process` applies it and OpenBLAS's thread cap
  (the optimiser calls it for every planned function).
* `scope`: whether the optimiser runs (PJRT_REF_OPTIMIZE) and may use numba
  (PJRT_REF_JIT), and which ops' regions it may rewrite.

Switches read here (defaults and help: the README's table): threads.py
(PJRT_REF_JIT_THREADS), codegen.py (PJRT_REF_CACHE_DIR), openblas_threads.py
(PJRT_REF_BLAS_THREADS), products.py (PJRT_REF_MATMUL_THREADS), gemm_pool.py
(PJRT_REF_POOL_SPIN_US, PJRT_REF_GEMM_POOL), product_strategy.py
(PJRT_REF_PRODUCT_PROBE), heap.py (PJRT_REF_HEAP).
"""
