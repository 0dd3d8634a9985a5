"""Fusion: a run of elementwise steps becomes one step.

`fuse_region(region)` scans a block's steps for runs of fusable steps that
produce tensors of one shape, and replaces each run (of at least two
computing steps) by one step. Values a run produces that are used after it
(by later steps, nested regions or the block's results) are written out; the
others never exist as full arrays. Three kinds of fused step:

* a run of float add, subtract, multiply, divide, negate, abs, maximum,
  minimum, compare and select (and splats) runs on numpy (numpy_runs.py):
  each member's unfused function, intermediates in the outputs' memory
  where their lifetimes allow (else in cache-sized chunk buffers), results
  straight into the outputs;
* any other run of the ops below compiles to one numba loop over the
  elements, intermediates in registers, if it has at least
  COMPILE_MIN_ELEMENTS elements (else its steps stay as they are);
* a run that contains a transcendental op without a vectorisable
  implementation (f32 log and log1p; any f64 one) runs its
  steps' own kernels chunk by chunk (`_chunked_step`): numpy's vectorised
  float64 math beats the scalar libm calls a numba loop would make, and
  cache-sized pieces need no full-size temporaries. Such an op never
  shares a run with an op that only compiles (integer and bit ops, iota:
  `_kinds_mix`), which would drag those through numpy chunk by chunk.

Large numba loops and numpy runs are split over threads, in contiguous
pieces of the index range (native/threads.py): each element is computed exactly as
before.

What fuses: the ops `element_expression` translates, integer and float
(native/loop_expressions.py and scalar_expressions.py say why each gives
the unfused kernels' bits; every value is cast back to its own type, which
is the spec's wrap-around for integers), iota (the element's index, from
its place in the run: JAX's PRNG counters never exist as arrays), and
broadcast_in_dim of a one-element value (a splat), which joins as a scalar
operand, as does a big splat constant (splat_constants.py). Ops with a compiled form only join runs of at least
COMPILE_MIN_ELEMENTS; smaller runs stay whole on numpy. Constants, and small
steps that read nothing the run makes (the index arithmetic between a PRNG
round's elementwise ops: a slice of the rotation table, `32 - r`), move
before the fused step instead of cutting the run in two.

When numba pays. Starting numba costs every process a fixed time and
memory once the first kernel is needed, even when kernels load from the
disk cache, and each kernel costs time to load (more to compile the first
time). So numba is used only where it saves work on every call, decided at
plan time from op kinds and shapes:

* plain arithmetic, maximum, minimum, compare and select never need it:
  numpy's ufuncs writing their intermediates into the outputs move the same
  memory as a compiled loop, so a program made of such runs (an MLP
  training step) never starts numba;
* f32 exp/expm1/logistic/tanh (much faster compiled than numpy's float64
  functions on widened copies), sqrt, TOTALORDER compares and converts pay
  only on large tensors, from COMPILE_MIN_ELEMENTS (2^17) elements; below
  it, thousands of calls would not pay back the start-up (W4's log_softmax
  exp on 128x10 stays unfused);
* compiled while loops (loops.py) and region bodies (native/regions.py) replace
  the interpreter's per-iteration / per-element Python work and always pay.

A kernel numba has not built on the machine is built in the background
(background.py) once its run has run PJRT_REF_JIT_HOT_SECONDS; meanwhile the
run goes through its steps' own kernels in FIRST_FORM_CHUNK pieces, and a
single long call (10^8 elements) hands its remaining elements to the
compiled loop as soon as it is built.

Measurements: docs/performance-design.md, "Design notes moved from the code".

PJRT_REF_JIT=0 turns all of this off (no fused steps at all, never numba);
PJRT_REF_JIT_MIN_ELEMENTS=n moves the size threshold (0: compile runs of
any size, which the tests use to check compiled loops on small inputs).
"""
from __future__ import annotations

import math
import time
import weakref
from typing import TYPE_CHECKING

import numpy as np

from pjrt_ref import settings
from pjrt_ref.interpreter.steps import Step
from pjrt_ref.interpreter.native import codegen, threads
from pjrt_ref.interpreter.native.loop_expressions import TYPE_NAMES, element_expression, loop_expression
from pjrt_ref.interpreter.native.scalar_expressions import FLOATS, MATH_F32, VECTOR_MATH_F32, scalar_expression
from pjrt_ref.interpreter.native.scope import CONTROL_FLOW_OPS
from pjrt_ref.interpreter.types import TensorType
from pjrt_ref.interpreter.optimiser import background, numpy_runs
from pjrt_ref.interpreter.optimiser.fused_step import fused_step
from pjrt_ref.interpreter.optimiser.loops import compile_while

if TYPE_CHECKING:
    from pjrt_ref.interpreter.optimiser.splat_constants import SplatScalars

# Fusing fewer computing steps than this does not pay for the loop's call,
# except for ops whose unfused float kernels take several passes (maximum
# and minimum fix up signed zeros; relu is one of them).
MIN_COMPUTING_STEPS = 2
ALONE_WORTH_FUSING = ("stablehlo.maximum", "stablehlo.minimum")
# An f32 exp/expm1/logistic/tanh alone compiles too once it is this large:
# the compiled loop is much faster than numpy's float64 function on a
# widened copy, and worth a kernel compile (cached on disk) only for
# tensors of some size.
ALONE_MATH_MIN_ELEMENTS = 1 << 14
# Runs that need numba compile only from this many elements on (see the
# module docstring, "When numba pays"); PJRT_REF_JIT_MIN_ELEMENTS overrides.
COMPILE_MIN_ELEMENTS = settings.default("PJRT_REF_JIT_MIN_ELEMENTS")


def compile_min_elements() -> int:
    """PJRT_REF_JIT_MIN_ELEMENTS, read for each run considered."""
    return settings.get("PJRT_REF_JIT_MIN_ELEMENTS")


def _worth_fusing_alone(op, shape: tuple) -> bool:
    if op.name in ALONE_WORTH_FUSING:
        return True
    return (op.name in VECTOR_MATH_F32 and scalar_expression(op) is not None
            and math.prod(shape) >= ALONE_MATH_MIN_ELEMENTS)


def _is_splat(op, shape) -> bool:
    """broadcast_in_dim of a one-element tensor (0-d, or JAX's `(1,)` of a
    `maxval - minval`) to `shape`."""
    return (op.name == "stablehlo.broadcast_in_dim" and len(op.operand_types) == 1
            and isinstance(op.operand_types[0], TensorType)
            and None not in op.operand_types[0].shape and math.prod(op.operand_types[0].shape) == 1
            and op.operand_types[0].quant is None
            and op.result_type.shape == shape and op.result_type.dtype == op.operand_types[0].dtype
            and op.result_type.dtype in TYPE_NAMES)


def _fusable_shape(op):
    """The shape a fusable op produces (None if the op cannot fuse)."""
    if len(op.result_types) != 1 or not isinstance(op.result_type, TensorType):
        return None
    shape = op.result_type.shape
    if any(d is None for d in shape):
        return None
    if _is_splat(op, shape):
        return shape
    if scalar_expression(op) is None and not _needs_chunks(op):
        # Integer, bit, rounding and conversion ops and iota have a compiled
        # form only: they join runs big enough to compile, and leave smaller
        # runs whole to numpy.
        if not _compiled_only(op) or math.prod(shape) < compile_min_elements():
            return None
        if op.name == "stablehlo.iota":
            return shape
    if any(t.shape not in (shape, ()) for t in op.operand_types):
        return None
    if any(t.shape == () for t in op.operand_types) and shape != ():
        return None  # elementwise ops take equal shapes; 0-d only via a splat
    return shape


COMPILED, CHUNKED, EITHER = "compiled", "chunked", "either"


def _run_kind(op) -> str:
    """How a run with `op` must run: COMPILED (an op with a compiled form
    only), CHUNKED (a transcendental with numpy's form only) or EITHER."""
    if op.name == "stablehlo.iota" or (scalar_expression(op) is None and _compiled_only(op)):
        return COMPILED
    return CHUNKED if _needs_chunks(op) else EITHER


def _kinds_mix(kinds: set, kind: str) -> bool:
    """Whether a step of `kind` may join a run of `kinds`: never a compiled-only
    op with a chunked-only one. A run of both went chunk by chunk through
    the unfused kernels: a PRNG's hash with the log of its uniform (JAX's
    binomial and multinomial samplers) ran at twice its unfused time."""
    return not {COMPILED, CHUNKED} <= kinds | {kind}


def _compiled_only(op) -> bool:
    """An op fused loops compile but numpy runs do not take: the integer,
    bit, rounding and conversion ops of loop_expressions.py, and iota (the
    element's index; of a plain integer type, whose cast from the index
    keeps its low bits as the interpreter's does)."""
    if op.name == "stablehlo.iota":
        dtype = op.result_type.dtype
        return dtype in TYPE_NAMES and dtype.kind in "iu" and op.result_type.quant is None
    return loop_expression(op) is not None


def _needs_chunks(op) -> bool:
    """A transcendental op on floats without a vectorisable compiled form
    (libm's, or any float64 one): fuses only into chunked runs."""
    if op.name in VECTOR_MATH_F32 and scalar_expression(op) is not None:
        return False
    return (op.name in MATH_F32 and len(op.operand_types) == 1
            and op.operand_types[0].dtype in FLOATS and op.result_type.dtype in FLOATS
            and op.operand_types[0].quant is None and op.result_type.quant is None)


# --- finding runs -------------------------------------------------------------

def count_uses(region, counts: dict | None = None) -> dict:
    """slot -> number of reads, in `region` and every region nested in it."""
    counts = {} if counts is None else counts
    for step in region.steps:
        for slot in step.operands:
            counts[slot] = counts.get(slot, 0) + 1
        for nested in step.regions:
            count_uses(nested, counts)
    for slot in region.result_slots:
        counts[slot] = counts.get(slot, 0) + 1
    return counts


def fuse_region(region, splats: SplatScalars | None = None) -> None:
    """Fuse runs of elementwise steps in `region` and in the bodies of the
    control-flow ops inside it (see the module docstring). A run reads the
    big splat constants of `splats` as their scalars (splat_constants.py)."""
    uses = count_uses(region)
    # Kept for inlining a function's body into a compiled loop (loops.py).
    region.unfused_steps = list(region.steps)
    new_steps: list = []
    run: list = []        # the fusable steps of the current run
    before: list = []     # steps met inside the run that move before it
    made_by_run: set = set()
    kinds: set = set()    # the run's _run_kind()s
    scalar_reads: dict = {}   # id -> step: the run's splats of a scalar constant
    shape = None

    def fuse_nested(step) -> None:
        for nested in step.regions:
            fuse_region(nested, splats)

    def close_run():
        fused = _fuse(run, _with_scalar_reads_inside(uses, scalar_reads), shape) if run else None
        if fused is None:
            # Unfused: the run's steps in their original order.
            mine = [step for step in run if id(step) not in scalar_reads]
            new_steps.extend(sorted(mine + before, key=order.__getitem__))
        else:
            new_steps.extend(before)
            new_steps.append(fused)
        run.clear()
        before.clear()
        made_by_run.clear()
        kinds.clear()
        scalar_reads.clear()

    def join_run(step, step_shape):
        # (Not recursive: a closure that calls itself is a reference cycle, which
        # every compile would leave to Python's cycle collector.)
        nonlocal shape
        splat_reads = _scalar_reads(step, step_shape, splats, made_by_run)
        for member in splat_reads + [step]:
            run.append(member)
            made_by_run.update(member.results)
            kinds.add(_run_kind(member.op))
        scalar_reads.update((id(splat), splat) for splat in splat_reads)
        shape = step_shape

    order = {id(step): index for index, step in enumerate(region.steps)}
    order = _IdOrder(order)
    for step in region.steps:
        if step.op.name == "stablehlo.while":
            step = compile_while(step, fuse_nested) or step
        if step.op.name in CONTROL_FLOW_OPS:
            for nested in step.regions:
                fuse_region(nested, splats)
        step_shape = _fusable_shape(step.op) if not step.regions else None
        if step_shape is not None and (not run or (
                step_shape == shape and _kinds_mix(kinds, _run_kind(step.op)))):
            join_run(step, step_shape)
            continue
        if run and _can_move_before_run(step, made_by_run):
            before.append(step)
            continue
        close_run()
        if step_shape is not None:
            join_run(step, step_shape)
        else:
            new_steps.append(step)
    close_run()
    region.steps = new_steps
    region.runners = None


def _scalar_reads(step, shape: tuple, splats: SplatScalars | None, made_by_run: set) -> list:
    """The splat members a run takes in for the big splat constants `step`
    reads (one per constant and run): broadcasts of their scalars."""
    if splats is None:
        return []
    members = []
    for slot, ttype in zip(step.operands, step.op.operand_types):
        if slot in splats and slot not in made_by_run and ttype.shape == shape:
            splat = splats.splat_step(slot, ttype, step.op.location, step.op.module)
            if _is_splat(splat.op, shape):
                members.append(splat)
                made_by_run.add(slot)
    return members


def _with_scalar_reads_inside(uses: dict, scalar_reads: dict) -> dict:
    """`uses` as a run with `scalar_reads` sees them: its own splat of a
    constant is read only inside it (other readers read the constant)."""
    if not scalar_reads:
        return uses
    return {**uses, **{step.results[0]: 0 for step in scalar_reads.values()}}


# Steps that may move before a run they meet: pure data movement and
# elementwise ops of at most this many elements (index arithmetic), besides
# constants. Bigger ones stay where they are: they may start a run of their own.
MOVABLE_ELEMENTS = 64
MOVABLE_OPS = frozenset(f"stablehlo.{name}" for name in (
    "slice", "reshape", "broadcast_in_dim", "convert", "concatenate", "iota", "transpose",
    "dynamic_slice", "get_tuple_element", "tuple"))


def _can_move_before_run(step, made_by_run: set) -> bool:
    """Whether `step`, met inside a run, can run before it instead of cutting
    it: a constant, or a small pure step that reads nothing the run makes.
    The run's steps are pure, so nothing observes the new order."""
    if step.op.name == "stablehlo.constant":
        return True
    if step.regions or any(slot in made_by_run for slot in step.operands):
        return False
    if step.op.name not in MOVABLE_OPS and (
            len(step.op.result_types) != 1 or element_expression(step.op) is None):
        return False
    return all(isinstance(t, TensorType) and None not in t.shape
               and math.prod(t.shape) <= MOVABLE_ELEMENTS for t in step.op.result_types)


class _IdOrder:
    """step -> its index in the original block (steps are not hashable)."""

    def __init__(self, by_id: dict):
        self.by_id = by_id

    def __getitem__(self, step) -> int:
        return self.by_id[id(step)]


# --- building the fused step ----------------------------------------------------

def _fuse(run: list, uses: dict, shape: tuple):
    """The run as one step, or None where fusing it does not pay."""
    fused = _fuse_run(run, uses, shape)
    if fused is not None:
        fused.kernel = _with_scalar_operands(fused.kernel, fused.op.operand_types, shape)
    return fused


def _with_scalar_operands(kernel, operand_types: tuple, shape: tuple):
    """`kernel` given its splats' one-element operands as 0-d arrays, the
    form every fused kernel takes its scalars in."""
    one_element = [index for index, t in enumerate(operand_types) if t.shape not in (shape, ())]
    if not one_element:
        return kernel

    def with_scalar_operands(op, *values):
        values = list(values)
        for index in one_element:
            values[index] = values[index].reshape(())
        return kernel(op, *values)
    return with_scalar_operands


def _fuse_run(run: list, uses: dict, shape: tuple):
    """One step for the run, or None: the kind of step that pays
    (`_step_kind`), made by that kind's builder."""
    kind = _step_kind(run, shape)
    if kind is None:
        return None
    inputs, input_types = _run_inputs(run, shape)
    outputs = _run_outputs(run, uses)
    if not outputs:
        return None
    return _BUILDERS[kind](run, inputs, input_types, outputs, shape)


NUMPY, LOOP = "numpy", "loop"    # the kinds of fused step besides CHUNKED


def _step_kind(run: list, shape: tuple) -> str | None:
    """CHUNKED, NUMPY or LOOP (the module docstring), or None where fusing
    the run does not pay."""
    computing = [s for s in run if not _is_splat(s.op, shape)]
    on_numpy = numpy_runs.runs_on_numpy([s.op for s in computing])
    # One step with a splat is worth a numpy run: the splat is never
    # materialised (numpy broadcasts the 0-d value).
    if len(computing) < MIN_COMPUTING_STEPS and not (computing and (
            _worth_fusing_alone(computing[0].op, shape) or (on_numpy and len(computing) < len(run)))):
        return None
    if any(_needs_chunks(s.op) for s in run):
        return CHUNKED
    if on_numpy:
        return NUMPY
    if math.prod(shape) < compile_min_elements():
        return None  # too small for a compiled loop to pay for starting numba
    return LOOP


def _run_inputs(run: list, shape: tuple) -> tuple[list, list]:
    """([(slot, is_array)], [type]) of the values the run reads and does not
    make, in the order it first reads them (is_array: of the run's shape,
    else a one-element splat operand)."""
    produced = {s.results[0] for s in run}
    inputs: list = []
    input_types: list = []
    for step in run:
        for slot, ttype in zip(step.operands, step.op.operand_types):
            if slot not in produced and slot not in (s for s, _ in inputs):
                inputs.append((slot, ttype.shape == shape))
                input_types.append(ttype)
    return inputs, input_types


def _run_outputs(run: list, uses: dict) -> list:
    """The run's steps whose values are read after it (or more often than inside it)."""
    inner_uses: dict = {}
    for step in run:
        for slot in step.operands:
            inner_uses[slot] = inner_uses.get(slot, 0) + 1
    return [s for s in run if uses.get(s.results[0], 0) > inner_uses.get(s.results[0], 0)]


def _numpy_step(run: list, inputs: list, input_types: list, outputs: list, shape: tuple):
    splats = {id(s) for s in run if _is_splat(s.op, shape)}
    return numpy_runs.numpy_step(run, inputs, input_types, outputs, shape,
                                 is_splat=lambda step: id(step) in splats)


def _loop_step(run: list, inputs: list, input_types: list, outputs: list, shape: tuple):
    """A compiled loop over the elements; built in the background, the run
    going through numpy meanwhile, where numba has not built it here before."""
    source, indexed = _loop_source(run, inputs, input_types, outputs, shape)

    def build():
        function = codegen.compile_safely(
            codegen.compile_fused, source,
            input_types=[(t.dtype, is_array) for (_, is_array), t in zip(inputs, input_types)],
            output_dtypes=[s.op.result_type.dtype for s in outputs], indexed=indexed)
        if function is None:
            return None
        return _fused_kernel(function, [is_array for _, is_array in inputs],
                             [s.op.result_type.dtype for s in outputs], shape, _min_piece(run),
                             indexed)

    if background.enabled() and not (codegen.is_built(source) and codegen.numba_started()):
        # Never compiled here, or numba not started in this process (its import alone
        # outlasts a first result): numpy now, the compiled loop once the run is hot and
        # the kernel built (background.py). Not at once: numba's import holds the GIL in
        # long stretches, and the numpy form's first runs waited for it at every call.
        chunked = _chunked_step(run, inputs, input_types, outputs, shape, FIRST_FORM_CHUNK).kernel
        switch = chunked.switch = background.Switchable(chunked)
        background.build_when_hot(build, switch, settings.get("PJRT_REF_JIT_HOT_SECONDS"))
        return fused_step(run, switch, inputs, input_types, outputs, source=source, background=True)
    kernel = build()
    if kernel is None:
        return None  # the steps stay as they are
    return fused_step(run, kernel, inputs, input_types, outputs, source=source)


def _loop_source(run: list, inputs: list, input_types: list, outputs: list, shape: tuple):
    """(the numba source of the run's loop, whether it reads element indices):
    each step one line (`element_expression`, or an iota's index), splats
    read as their scalar operand."""
    names = {}
    for index, (slot, is_array) in enumerate(inputs):
        names[slot] = f"a{index}" if is_array else f"s{index}"
    lines = []
    for index, step in enumerate(run):
        op = step.op
        if _is_splat(op, shape):
            names[step.results[0]] = names[step.operands[0]]
            continue
        if op.name == "stablehlo.iota":
            expression = _iota_expression(op.attrs["iota_dimension"], shape)
        else:
            expression = element_expression(op).format(*(names[s] for s in step.operands))
        variable = f"v{index}"
        lines.append((variable, expression, op.result_type.dtype))
        names[step.results[0]] = variable
    indexed = any(s.op.name == "stablehlo.iota" for s in run)
    source = codegen.fused_loop_source(
        inputs=[(names[slot], is_array, t.dtype) for (slot, is_array), t in zip(inputs, input_types)],
        body=lines,
        outputs=[(names[s.results[0]], s.op.result_type.dtype) for s in outputs],
        indexed=indexed,
    )
    return source, indexed


def _iota_expression(dimension: int, shape: tuple) -> str:
    """Spec "iota": the element's index along `dimension`, from its row-major
    index in the run, `base + i` (codegen.fused_loop_source)."""
    stride = math.prod(shape[dimension + 1:])
    index = "(base + i)" if stride == 1 else f"((base + i) // {stride})"
    return index if dimension == 0 else f"{index} % {shape[dimension]}"


def _iota_chunk(dimension: int, shape: tuple, dtype: np.dtype):
    """The chunked form of a fused iota: its elements [start, stop)."""
    stride, extent = math.prod(shape[dimension + 1:]), shape[dimension]

    def iota_chunk(start: int, stop: int) -> np.ndarray:
        return ((np.arange(start, stop, dtype=np.int64) // stride) % extent).astype(dtype)
    return iota_chunk


# Elements per thread below which a fused loop is not split (native/threads.py):
# a thread hand-off costs as much as many elements of arithmetic (which
# runs at memory speed), fewer of a transcendental.
MIN_PIECE_ARITHMETIC = 1 << 17
MIN_PIECE_MATH = 1 << 14


def _min_piece(run: list) -> int:
    if any(s.op.name in VECTOR_MATH_F32 for s in run):
        return MIN_PIECE_MATH
    return MIN_PIECE_ARITHMETIC


def _fused_kernel(function, array_inputs: list, out_dtypes: list, shape: tuple,
                  min_piece: int, indexed: bool = False):
    size = math.prod(shape)
    empty = np.empty

    def call(count: int, base: int, args: list, flat_outs: list) -> None:
        if indexed:
            function(count, base, *args, *flat_outs)
        else:
            function(count, *args, *flat_outs)

    def run(count: int, args: list, flat_outs: list, base: int = 0) -> None:
        if count < 2 * min_piece:
            call(count, base, args, flat_outs)
            return

        def run_piece(start: int, stop: int) -> None:
            call(stop - start, base + start,
                 [a[start:stop] if is_array else a for a, is_array in zip(args, array_inputs)],
                 [out[start:stop] for out in flat_outs])

        threads.run_split(run_piece, count, min_piece)

    def fused(op, *values):
        args = [v.ravel() if is_array else v[()] for v, is_array in zip(values, array_inputs)]
        outs = [empty(shape, dtype) for dtype in out_dtypes]
        run(size, args, [out.reshape(-1) for out in outs])
        return outs[0] if len(outs) == 1 else tuple(outs)

    def finish(values: tuple, flat_outs: list, start: int) -> None:
        """Elements [start, size) of `fused(op, *values)`, into the flat outputs:
        the rest of a call its chunked numpy form began (`ChunkedRun`)."""
        args = [v.reshape(-1)[start:] if is_array else v[()] for v, is_array in zip(values, array_inputs)]
        run(size - start, args, [out[start:] for out in flat_outs], base=start)

    fused.__doc__ = "A fused elementwise loop (interpreter/optimiser/fusion.py)."
    fused.finish = finish
    return fused


# --- runs with transcendental ops: chunked numpy ------------------------------------

# Elements per chunk: the chunk's temporaries (float64 ones too) stay in cache.
CHUNK = 1 << 14


INDICES = "indices"   # a chunked member computed from its element indices (a fused iota)


def _chunked_step(run: list, inputs: list, input_types: list, outputs: list, shape: tuple,
                  chunk: int = CHUNK) -> Step:
    """A run containing exp/log/tanh/...: its steps' own kernels applied
    chunk by chunk, so numpy's vectorised math still does the work but no
    intermediate exists at full size. Each element meets exactly the
    kernels it met unfused: the same bits."""
    members = []   # (kernel, op, operands, result); a splat's kernel is None, an iota's op is
    for step in run:   # INDICES and its kernel gives its elements [start, stop)
        if _is_splat(step.op, shape):
            members.append((None, None, step.operands, step.results[0]))
        elif step.op.name == "stablehlo.iota":
            indices = _iota_chunk(step.op.attrs["iota_dimension"], shape, step.op.result_type.dtype)
            members.append((indices, INDICES, (), step.results[0]))
        else:
            members.append((step.kernel, step.op, step.operands, step.results[0]))
    kernel = ChunkedRun(_with_last_reads(members, [slot for slot, _ in inputs]),
                             inputs, [s.results[0] for s in outputs],
                             [s.op.result_type.dtype for s in outputs], shape, chunk)
    return fused_step(run, kernel, inputs, input_types, outputs, chunked=True)


def _with_last_reads(members: list, input_slots: list) -> list:
    """Each member with the slots it reads for the last time (inputs and
    results of members): a chunk drops them there, and its memory holds
    only the values still to be read."""
    last_reader: dict = {}
    for index, (_, _, operands, _) in enumerate(members):
        for slot in operands:
            last_reader[slot] = index
    dead = [[] for _ in members]
    for slot, index in last_reader.items():
        dead[index].append(slot)
    return [(*member, tuple(slots)) for member, slots in zip(members, dead)]


# A background kernel's first form (background.py) runs in chunks this large:
# the unfused kernels' per-call cost, which 2^14-element chunks multiply
# (a PRNG run of 80 integer ops took twice its unfused time in them), is
# small next to their work, and a long call still reaches a chunk boundary
# often. Between chunks it projects the time its call still needs; from
# LONG_CALL_SECONDS on (numba's start and a compile, whose GIL the numpy
# form then shares, cost about that much: benchmarks/README.md) it reports
# its time to its Switchable at once, which queues the build when the run
# is hot, and finishes the call on the compiled loop once it is built.
# Shorter calls report at their end, as every other first form does.
FIRST_FORM_CHUNK = 1 << 20
LONG_CALL_SECONDS = 2.0


class ChunkedRun:
    """A fused elementwise run, chunk by chunk: the kernel `_chunked_step` plans.

    As a background kernel's first form it has a `switch` (the Switchable
    that will hand its calls to the compiled loop), held weakly: the switch
    holds its first form, and a cycle between them would leave every
    dropped plan to Python's cycle collector (JAX's tests count what a jit
    leaves there, `core_test.test_reference_cycles_jit`).
    """

    reports_time = True    # background.py: it reports its own time as it goes

    def __init__(self, members: list, inputs: list, out_slots: list, out_dtypes: list, shape,
                 chunk: int) -> None:
        self.members, self.inputs, self.out_dtypes = members, inputs, out_dtypes
        self.shape, self.size, self.chunk = shape, math.prod(shape), chunk
        self.written = {}    # result slot -> the indices of the outputs it is
        for index, slot in enumerate(out_slots):
            self.written.setdefault(slot, []).append(index)
        self._switch = None

    @property
    def switch(self):
        return None if self._switch is None else self._switch()

    @switch.setter
    def switch(self, switch) -> None:
        self._switch = None if switch is None else weakref.ref(switch)

    def __call__(self, op, *values):
        switch, size, chunk = self.switch, self.size, self.chunk
        flat = [v.reshape(-1) if is_array else v for v, (_, is_array) in zip(values, self.inputs)]
        outs = [np.empty(size, dtype) for dtype in self.out_dtypes]
        splats = {}  # a splat: its 0-d value across a whole chunk, made once
        began = last = time.perf_counter()
        try:
            for start in range(0, size, chunk):
                if switch is not None and start:
                    now = time.perf_counter()
                    if (now - began) * (size - start) / start >= LONG_CALL_SECONDS:
                        switch.spend(now - last)
                        last = now
                    compiled = switch.built()
                    if compiled is not None:
                        compiled.finish(values, outs, start)
                        break
                _run_chunk(self.members, self.inputs, flat, outs, self.written, splats, start,
                           min(start + chunk, size))
        finally:
            if switch is not None:
                switch.spend(time.perf_counter() - last)
        results = [out.reshape(self.shape) for out in outs]
        return results[0] if len(results) == 1 else tuple(results)


def _run_chunk(members: list, inputs: list, flat: list, outs: list, written: dict,
               splats: dict, start: int, stop: int) -> None:
    """Elements [start, stop) of a chunked run: each member's kernel in turn."""
    env = {slot: v[start:stop] if is_array else v for v, (slot, is_array) in zip(flat, inputs)}
    for kernel, member_op, operands, result, dead in members:
        if kernel is None:
            splat = splats.get(result)
            if splat is None:
                splat = splats[result] = np.broadcast_to(env[operands[0]], (stop - start,))
            env[result] = splat[:stop - start]
        elif member_op is INDICES:
            env[result] = kernel(start, stop)
        else:
            env[result] = kernel(member_op, *[env[s] for s in operands])
        for out_index in written.get(result, ()):
            outs[out_index][start:stop] = env[result]
        for slot in dead:      # read for the last time: its memory goes back at once
            del env[slot]


_BUILDERS = {CHUNKED: _chunked_step, NUMPY: _numpy_step, LOOP: _loop_step}
