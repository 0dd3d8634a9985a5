"""Plan-time optimisation of the interpreter: faster kernels for the same
semantics.

`optimize_function(plan)` runs once on each planned function, before it first
runs, and rewrites its steps:

0. `dots`: a matrix product used only by a transpose of it computes the
   transposed product directly (one pass instead of two).
1. `fastpath`: elementwise steps on plain dtypes (f32/f64 and the 8- to
   64-bit integers) call numpy's ufunc directly instead of the generic
   kernel (which widens, rounds back and enters `np.errstate` per call).
   The functions applied are the very ones the generic kernels apply.
   Other kernels registered with `specialize=` (reduce, broadcast_in_dim,
   reshape, transpose, point gather/scatter) are asked for a version with
   their type- and attribute-dependent decisions made here, once.
2. `fusion`: a run of elementwise steps whose intermediates are used only
   inside the run becomes one step: numpy ufuncs (intermediates in the
   outputs' memory or cache-sized chunks) for arithmetic, maximum/minimum,
   compare and select (`numpy_runs`), one
   numba loop over the elements for the rest, where numba pays (large
   tensors; see fusion.py, "When numba pays").
3. `loops` (numba): a `while` whose cond and body are small element-wise
   programs becomes one compiled function running every iteration.
4. `in_place`: a `while` whose body only updates a carried buffer with
   `dynamic_update_slice` (lax.scan's stacked outputs) owns that buffer
   (one copy on entry) and writes each update into it, instead of copying
   the whole buffer per iteration.
5. the function body's constants move into the frame every call starts
   from (`plan.preset_constants`): no step runs for them.

Kernels with regions ask `regions` (numba) for compiled bodies when their
numpy fast paths do not apply: scatter update computations, sort
comparators. `codegen` writes every generated kernel to a cache directory
so numba's own cache keeps the machine code across processes; `blas` caps
OpenBLAS at one thread (in both optimiser modes: `openblas` finds it) and
cuts big products into blocks fixed by their shape, shared with a small C
thread pool (`gemm_pool.c`) without the GIL, each shape run the way
`product_strategy` timed best on this machine; `heap`
keeps freed array memory in the process (no page faults per op result).

Switches (declared in pjrt_ref/settings.py; read when a program is planned):
    PJRT_REF_JIT=0       no numba: no fused steps, no compiled loops or regions
    PJRT_REF_JIT_MIN_ELEMENTS  elements from which a run that needs numba
                         compiles (default 2^17; fusion.py)
    PJRT_REF_OPTIMIZE=0  no plan-time rewrites at all (the plain interpreter)
    PJRT_REF_CACHE_DIR   where generated kernels live (~/.cache/pjrt_ref/numba)
    PJRT_REF_BLAS_THREADS  OpenBLAS threads (default 1; 0 leaves it alone)
    PJRT_REF_MATMUL_THREADS  threads per big matrix product (default: the CPUs)
    PJRT_REF_POOL_SPIN_US  how long the C pool's threads spin between
                         products before sleeping (default 300; blas.py)
    PJRT_REF_GEMM_POOL=0  split products on Python threads, not the C pool
    PJRT_REF_PRODUCT_PROBE=0  time no product shape (product_strategy.py)
    PJRT_REF_HEAP=0      leave malloc's thresholds alone (jit/heap.py)

numba is imported lazily, the first time a program has something to compile
(about 0.85 s and 120 MB per process, even when every kernel comes from the
disk cache): a program whose fused runs all run on numpy, like an MLP
training step, never starts it.
Every rewrite is checked by tests/test_jit_*.py against the unoptimised
interpreter (bit for bit) and against XLA CPU.
"""
from __future__ import annotations

from ... import settings


def optimize_enabled() -> bool:
    """PJRT_REF_OPTIMIZE, read each time a function is planned."""
    return settings.get("PJRT_REF_OPTIMIZE")


def jit_enabled() -> bool:
    """PJRT_REF_JIT (and PJRT_REF_OPTIMIZE), read each time a function is planned."""
    return optimize_enabled() and settings.get("PJRT_REF_JIT")


# Ops whose regions the interpreter runs as ordinary blocks (their kernels
# never look inside them): their bodies may be rewritten like a function's.
# Regions of other ops (reduce, scatter, sort, ...) are left alone: their
# kernels recognise bodies by their steps to pick numpy fast paths.
CONTROL_FLOW_OPS = ("stablehlo.while", "stablehlo.if", "stablehlo.case")


def optimize_function(plan) -> None:
    """Rewrite `plan`'s steps in place (see the module docstring)."""
    from . import blas

    _record_jit_setting(plan.body, jit_enabled())
    # In both modes: OpenBLAS's threads change how it splits a product, and
    # so its bits; PJRT_REF_OPTIMIZE=0 must compute what the optimiser does.
    blas.limit_blas_threads()
    if not optimize_enabled():
        return
    from ..plan import preset_constants
    from . import dots, fastpath, heap, in_place

    heap.keep_freed_memory()

    dots.fold_transposes(plan.body)
    fastpath.specialize_region(plan.body)
    if jit_enabled():
        from . import fusion

        fusion.fuse_region(plan.body)
    in_place.update_carries_in_place(plan.body)
    preset_constants(plan)  # last: the passes above read constants from the steps


def _record_jit_setting(region, enabled: bool) -> None:
    """Remember, on every region and op with regions, whether numba was on
    when the program was planned: region bodies compile on first run
    (`regions.py`), and must follow the setting of the plan, not of the
    moment they first run."""
    region.jit_enabled = enabled
    for step in region.steps:
        if step.regions:
            step.op.cache["jit_enabled"] = enabled
            for nested in step.regions:
                _record_jit_setting(nested, enabled)
