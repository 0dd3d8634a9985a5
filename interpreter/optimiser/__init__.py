"""Plan-time optimisation of the interpreter: faster kernels for the same
semantics.

Its public face is `optimize_function`; the passes below are its modules.
They build their fused and compiled steps on interpreter/native/ (numba
code generation, threads, BLAS), which the ops use as well; this package
imports ops/ and native/, and neither imports it.

`optimize_function(plan)` runs once on each planned function, before it first
runs, and rewrites its steps:

-. `inline`: a `func.call` of a small function without regions becomes the
   callee's steps in the caller's frame (JAX's `dynamic_index_in_dim`,
   `_where`, `closed_call`...), so the passes below see through it.
0. `dots`: a matrix product used only by a transpose of it computes the
   transposed product directly (one pass instead of two).
1. `direct_kernels`: elementwise steps on plain dtypes (f32/f64 and the 8- to
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
   tensors; see fusion.py, "When numba pays"). A loop numba never built on
   this machine is built by `background`'s thread while the run goes on
   numpy (PJRT_REF_JIT_BACKGROUND). A run reads a big splat constant
   (JAX folds broadcasts of constants into them) as its one value
   (`splat_constants`): one that only runs read is never written out.
3. `loops` (numba): a `while` whose cond and body are small element-wise
   programs becomes one compiled function running every iteration.
4. `invariant_layouts`: a matrix a `while` never changes, read by a
   product in its body as a transposed operand (a scan's `dy . W^T`), is
   copied row-major once per run of the loop (BLAS is quicker on it).
5. `in_place`: a `while` whose body only updates a carried buffer with
   `dynamic_update_slice` (lax.scan's stacked outputs) owns that buffer
   (one copy on entry) and writes each update into it, instead of copying
   the whole buffer per iteration; a carried accumulator updated only by
   `acc + a.b` (a scan's weight gradient) takes the product inside gemm
   (beta = 1) where that gives the same bits.
   `reuse`: an elementwise step (direct_kernels.py) that is the
   only reader of a matrix product writes its result into the product's
   new array (`out=`) instead of allocating another.
6. constants move into the frame every call starts from, those of loop
   bodies and if/case branches too, with small broadcasts of them
   (`preset_constants`): no step runs for them.

Before the rewrites, in both modes, `optimize_function` has the native
code set up the process (native/process_setup.py: OpenBLAS's threads, the
heap). Kernels with regions compile their bodies themselves, through
native/regions.py, when they first run.

Switches (defaults and help: the README's table, generated from
pjrt_ref/settings.py): PJRT_REF_OPTIMIZE=0 turns off every rewrite here
(the plain interpreter), PJRT_REF_JIT=0 numba (no fused steps, no compiled
loops or regions). The others are explained where they are read: fusion.py
(PJRT_REF_JIT_MIN_ELEMENTS) here, the rest in native/ (its __init__ names
them).

numba is imported lazily, the first time a program has something to compile:
starting it costs every process time and memory even when every kernel
comes from the disk cache, so a program whose fused runs all run on numpy,
like an MLP training step, never starts it (fusion.py, "When numba pays").

Bits: what each rewrite keeps against PJRT_REF_OPTIMIZE=0 (for region
bodies, which native/regions.py compiles in both modes, against
PJRT_REF_JIT=0).
docs/performance-design.md, "The bits of results", gives users the same
promise (the README's "Known limits" points there).

* `inline`, `direct_kernels` and specialised kernels, `fusion` (numpy, chunked and numba
  runs, on threads or not, with `splat_constants`), `loops`, native `regions`, `reuse`, `in_place`,
  `invariant_layouts` and preset constants keep the bits (the last two where
  BLAS's kernels do: each checks that once per shape on random operands,
  native/product_probes.py `accumulate_is_exact` and `layouts_agree`, and keeps the
  unrewritten computation where they do not): each element meets the same functions in
  the same precision (native/scalar_expressions.py, op by op). Two
  exceptions: where two NaNs meet, the NaN's sign and payload may differ
  (the spec leaves them open; tests/support/jit_support.py, `assert_same_values`); compiled f32
  transcendentals use other float64 functions than numpy's, so a result
  may be one float32 ulp off next to a rounding boundary (over all 2^32
  inputs: never for exp, expm1, tanh, sine, cosine; one input for logistic;
  tests/scripts/sweep_f32_math.py).
  Compiled loops keep the bits in more ways, each where a probe on the
  machine confirms it (native/half_precision.py, float64_math.py,
  tensor_ops.py): float16/bfloat16 rounded as numpy and ml_dtypes round,
  float64 transcendentals where libm is numpy's function, float sums in
  numpy's pairwise order; what no compiled code can match (a float
  product's BLAS order, a failed probe) runs by the interpreter's own
  kernel inside the loop (native/hand_back.py).
* `dots` does not: BLAS may sum the swapped product in another order;
  results agree to the rounding of a dot product (dots.py).
* Cutting big products into blocks is not a rewrite: `blas.matmul` does it
  in both modes, and a product has its blocks' bits whichever threads
  compute them, except a shape the timing gave to OpenBLAS's own threads
  (native/blocks.py, products.py).

tests/interpreter/test_optimiser_*.py check each rewrite against PJRT_REF_OPTIMIZE=0 (bit for
bit where the bits are kept, else to rounding) and against XLA CPU.
"""
from __future__ import annotations

from pjrt_ref.interpreter.native.process_setup import set_up_process
from pjrt_ref.interpreter.native.scope import jit_enabled, optimize_enabled
from pjrt_ref.interpreter.optimiser import direct_kernels, dots, fusion, in_place, inline, invariant_layouts, reuse, splat_constants
from pjrt_ref.interpreter.optimiser.preset import preset_constants


def optimize_function(plan) -> None:
    """Rewrite `plan`'s steps in place (see the module docstring)."""
    if optimize_enabled():
        inline.inline_calls(plan)
    _record_jit_setting(plan.body, jit_enabled())
    set_up_process(optimize=optimize_enabled())  # in both modes: see process_setup.py
    if not optimize_enabled():
        return

    dots.fold_transposes(plan.body)
    direct_kernels.specialize_region(plan.body)
    if jit_enabled():
        splats = splat_constants.add_scalars(plan)
        fusion.fuse_region(plan.body, splats)
        splat_constants.drop_unread(plan, splats)
    invariant_layouts.copy_transposed_invariants(plan)
    in_place.update_carries_in_place(plan.body)   # before reuse: it takes the adds it folds
    reuse.write_into_dead_products(plan.body)
    preset_constants(plan)  # last: the passes above read constants from the steps


def _record_jit_setting(region, enabled: bool) -> None:
    """Remember, on every region and op with regions, whether numba was on
    when the program was planned: region bodies compile on first run
    (`native/regions.py`), and must follow the setting of the plan, not of the
    moment they first run."""
    region.jit_enabled = enabled
    for step in region.steps:
        if step.regions:
            step.op.cache["jit_enabled"] = enabled
            for nested in step.regions:
                _record_jit_setting(nested, enabled)
