"""Fused runs that numba would not pay for, on numpy chunk by chunk.

A run of float add, subtract, multiply, divide, negate, abs, maximum,
minimum, compare and select (fusion.py, "When numba pays") becomes one step that applies each
member's unfused function to the elements, results straight into the
outputs, splats as 0-d operands (numpy broadcasts them); large runs are
split over threads (native/threads.py; numpy releases the GIL in its loops). Each
element meets exactly the functions the unfused kernels apply to it, so the
bits are the same, without starting numba.

Where intermediates live (`place_members`): an intermediate whose lifetime
ends before an output of its dtype is written is computed in that output's
memory, as one would by hand (`np.multiply(g, c, out=o); np.subtract(p, o,
out=o)` for an SGD update). A run whose intermediates all fit that way runs
each member once over its whole range, which beats cache-sized chunks with
warm caches and cold: each chunk costs a ufunc call and restarts the
hardware prefetcher. Only a run needing other buffers goes chunk by chunk,
so those stay small and in cache. Measurements: docs/performance-design.md,
"Design notes moved from the code".
"""
from __future__ import annotations

import math

import numpy as np

from pjrt_ref.interpreter.native import threads
from pjrt_ref.interpreter.ops.elementwise_binary import maximum_values, minimum_values
from pjrt_ref.interpreter.ops.elementwise_compare import DIRECTIONS
from pjrt_ref.interpreter.optimiser.direct_kernels import EXACT_OPS, FLOATS as FAST_FLOATS
from pjrt_ref.interpreter.steps import Step
from pjrt_ref.interpreter.optimiser.fused_step import fused_step

# Elements per thread below which a run is not split, so runs split from
# 2^21 elements on. These runs are memory-bound: a second thread mostly
# competes for the same memory bandwidth and pays a hand-off, and gains
# only on large arrays (docs/performance-design.md, "Design notes moved
# from the code").
MIN_PIECE = 1 << 20


def _chunk_function(op, splats: tuple = (False, False)):
    """`function(*operands, out=chunk)` computing one chunk of `op` as its
    unfused kernel does, or None if `op` has none here. `splats` says which
    operands are 0-d (a splat's value).

    float add/subtract/multiply/divide/negate/abs: the ufunc of their direct
    kernel (direct_kernels.py). float maximum/minimum: numpy's maximum/minimum
    and the kernel's signed-zero fix-up (`maximum_values`), done only where
    it can change something when one operand is 0-d (`_max_min_with_scalar`).
    float compare (FLOAT or no compare_type): numpy's comparison, as
    direct_kernels' kernel. select: each element copied from the operand `pred`
    picks, as the kernel's np.where (`_select`)."""
    operands = {t.dtype for t in op.operand_types}
    result = op.result_type.dtype
    if op.name == "stablehlo.compare":
        if (len(operands) == 1 and operands <= FAST_FLOATS
                and op.attrs.get("compare_type") in (None, "FLOAT")):
            return DIRECTIONS[op.attrs["comparison_direction"]]
        return None
    if op.name == "stablehlo.select":
        return _select if op.operand_types[0].dtype == np.bool_ else None
    if operands != {result} or result not in FAST_FLOATS:
        return None
    if op.name in ("stablehlo.maximum", "stablehlo.minimum"):
        is_max = op.name == "stablehlo.maximum"
        if any(splats) and not all(splats):
            return _max_min_with_scalar(np.maximum if is_max else np.minimum, is_max)
        return _into_out(maximum_values if is_max else minimum_values)
    entry = EXACT_OPS.get(op.name)
    if entry is None or result not in entry[1]:
        return None
    return entry[0]


def _fill(value, out):
    np.copyto(out, value)
    return out


_BITS = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}


def _select(pred, on_true, on_false, out):
    """pred ? on_true : on_false by the bits: (true & mask) | (false & ~mask)
    with mask all ones where pred holds. Every element is a copy of the bits
    np.where would pick, without its per-element branch (much faster on a
    random mask, like a relu's). The mask is built in `out`; a 0-d operand
    whose bits are all zero (a +0.0 splat, as in a relu's gradient) needs no
    pass of its own."""
    if pred.ndim == 0:
        np.copyto(out, on_true if pred else on_false)
        return out
    bits = _BITS[out.dtype.itemsize]
    result = out.view(bits)
    np.negative(pred.view(np.int8), dtype=bits, out=result)  # 0 or all ones
    if _all_zero_bits(on_false):
        return _and_bits(result, on_true, bits, out)
    if _all_zero_bits(on_true):
        np.invert(result, out=result)
        return _and_bits(result, on_false, bits, out)
    inverse = np.invert(result)
    np.bitwise_and(np.asarray(on_true).view(bits), result, out=result)
    np.bitwise_and(np.asarray(on_false).view(bits), inverse, out=inverse)
    np.bitwise_or(result, inverse, out=result)
    return out


def _all_zero_bits(value) -> bool:
    """A 0-d operand whose every bit is zero (+0.0, or integer/bool 0)."""
    return np.ndim(value) == 0 and not np.asarray(value).tobytes().strip(b"\0")


def _and_bits(mask, value, bits, out):
    """out = value & mask on the bits (mask in `out` already, as `bits`)."""
    np.bitwise_and(np.asarray(value).view(bits), mask, out=mask)
    return out


def _into_out(function):
    def apply(*operands, out):
        np.copyto(out, function(*operands))
        return out
    return apply


def _max_min_with_scalar(numpy_function, is_max: bool):
    """IEEE maximum (minimum) of an array and a 0-d value, as
    `maximum_values` (`minimum_values`) computes it: numpy's function (NaN
    propagates, the first NaN wins), then, only if the 0-d value is a zero,
    the array's zeros get the zero the spec picks (max(-0, +0) = +0,
    min(-0, +0) = -0): the 0-d one if its sign is the winning one, else the
    array's own.

    A relu's max(x, +0) takes the short way: every zero of the result must
    be +0, and adding +0 turns -0 into +0 and changes nothing else (a
    signalling NaN comes out quiet: NaN payloads are unspecified, see
    tests/support/jit_support.py), one pass instead of a compare and a masked copy."""
    def apply(lhs, rhs, out):
        scalar, array = (lhs, rhs) if lhs.ndim == 0 else (rhs, lhs)
        # numpy's maximum/minimum have no vector loop for a 0-d operand
        # (far slower than on two arrays): the 0-d value is spread over `out`
        # first (`array` never shares its memory: see place_members), and
        # the operands keep their order (the first NaN wins).
        np.copyto(out, scalar)
        numpy_function(*((out, array) if lhs.ndim == 0 else (array, out)), out=out)
        if scalar == 0:
            positive_zero = not np.signbit(scalar)
            if is_max and positive_zero:
                np.add(out, scalar, out=out)
                return out
            scalar_wins = positive_zero == is_max
            np.copyto(out, scalar if scalar_wins else array, where=array == 0)
        return out
    return apply


def runs_on_numpy(ops: list) -> bool:
    """Whether every computing op of a run (splats left out) has a chunk function."""
    return all(_chunk_function(op) is not None for op in ops)


# Elements per chunk of a run that needs buffers of its own: a chunk's
# buffers (256 KB each in float32) stay in a 1 MB L2, and a ufunc call's
# fixed cost is small next to its work.
NUMPY_CHUNK = 1 << 16


def numpy_step(run: list, inputs: list, input_types: list, outputs: list, shape: tuple,
               is_splat) -> Step:
    """A run of float arithmetic, maximum/minimum, compare and select on
    numpy: each member's unfused function (`_chunk_function`), results
    straight into the outputs, intermediates in outputs' memory or in small
    chunk buffers (`place_members`), splats as 0-d operands (numpy
    broadcasts them). Each element meets the functions the unfused kernels
    apply to it: the same bits."""
    out_slots = [s.results[0] for s in outputs]
    scalars = {slot for slot, is_array in inputs if not is_array}
    aliases = {}  # a splat's result -> its 0-d operand
    members = []  # (function, operand slots, result slot, dtype)
    for step in run:
        operands = tuple(aliases.get(s, s) for s in step.operands)
        if is_splat(step):
            if step.results[0] not in out_slots:
                aliases[step.results[0]] = operands[0]
                continue
            function = _fill  # a splat used after the run: written out in full
        else:
            function = _chunk_function(step.op, tuple(s in scalars for s in operands))
        members.append((function, operands, step.results[0], step.op.result_type.dtype))
    targets = place_members(members, out_slots)
    kernel = _numpy_kernel(members, targets, inputs, [s.op.result_type.dtype for s in outputs],
                           shape)
    return fused_step(run, kernel, inputs, input_types, outputs, numpy=True)


def place_members(members: list, out_slots: list) -> list[int]:
    """Where each member writes: the index of an output array, or -1 for a
    buffer of its own.

    A member producing an output writes that output. An intermediate may
    use the memory of an output of its dtype that is not written yet and
    not lent to another intermediate alive at the same time: it is written
    at member i, last read at member `last`, and the output's own member k
    comes after `last`, or is `last` itself when k's function is a plain
    ufunc (numpy computes `out = f(x, out)` element by element in place;
    the select and max/min helpers read their operands after writing `out`,
    so they may not)."""
    writer = {result: i for i, (_, _, result, _) in enumerate(members)}
    last_read = {}
    for i, (_, operands, _, _) in enumerate(members):
        for slot in operands:
            last_read[slot] = i
    lent = {index: [] for index in range(len(out_slots))}  # output -> busy (from, to)
    targets = []
    for i, (_, _, result, dtype) in enumerate(members):
        if result in out_slots:
            targets.append(out_slots.index(result))
            continue
        last = last_read.get(result, i)
        targets.append(-1)
        for index, slot in enumerate(out_slots):
            k = writer[slot]
            function, _, _, out_dtype = members[k]
            in_place_ok = isinstance(function, np.ufunc)
            if out_dtype != dtype or k < last or (k == last and not in_place_ok) or k <= i:
                continue
            if all(last < begin or end < i for begin, end in lent[index]):
                lent[index].append((i, last))
                targets[-1] = index
                break
    return targets


def _numpy_kernel(members: list, targets: list, inputs: list, out_dtypes: list, shape: tuple):
    size = math.prod(shape)
    empty = np.empty
    needs_buffers = -1 in targets
    plan = [(function, operands, result, target, dtype)
            for (function, operands, result, dtype), target in zip(members, targets)]

    def run_range(flat: list, outs: list, start: int, stop: int) -> None:
        chunk = NUMPY_CHUNK if needs_buffers else stop - start
        buffers = [empty(min(chunk, stop - start), dtype) if target < 0 else None
                   for _, _, _, target, dtype in plan]
        for begin in range(start, stop, chunk):
            end = min(begin + chunk, stop)
            env = {slot: v[begin:end] if is_array else v
                   for v, (slot, is_array) in zip(flat, inputs)}
            for (function, operands, result, target, _), buffer in zip(plan, buffers):
                out = outs[target][begin:end] if target >= 0 else buffer[:end - begin]
                env[result] = function(*[env[s] for s in operands], out=out)

    input_slots = tuple(slot for slot, _ in inputs)

    def run_whole(values: tuple, outs: list) -> None:
        """Every member once over all elements, on the arrays as they come
        (a run with no buffers of its own has nothing to cut into chunks):
        no flattening, slicing or per-chunk bookkeeping, which is most of
        the cost of a small run."""
        env = dict(zip(input_slots, values))
        for function, operands, result, target, _ in plan:
            env[result] = function(*[env[s] for s in operands], out=outs[target])

    def fused_numpy(op, *values):
        if not needs_buffers and size < 2 * MIN_PIECE:
            outs = [empty(shape, dtype) for dtype in out_dtypes]
            run_whole(values, outs)
            return outs[0] if len(outs) == 1 else tuple(outs)
        flat = [v.reshape(-1) if is_array else v for v, (_, is_array) in zip(values, inputs)]
        outs = [empty(size, dtype) for dtype in out_dtypes]
        if size < 2 * MIN_PIECE:
            run_range(flat, outs, 0, size)
        else:
            threads.run_split(lambda start, stop: _quietly(run_range, flat, outs, start, stop),
                              size, MIN_PIECE)
        results = [out.reshape(shape) for out in outs]
        return results[0] if len(results) == 1 else tuple(results)

    fused_numpy.__doc__ = "A fused run on numpy (interpreter/optimiser/numpy_runs.py)."
    return fused_numpy


def _quietly(function, *args) -> None:
    """`function(*args)` with numpy's warnings off, as FunctionPlan.run has
    them: numpy's error state is per thread, and pieces run on pool threads."""
    with np.errstate(all="ignore"):
        function(*args)
