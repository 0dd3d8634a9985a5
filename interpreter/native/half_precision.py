"""float16 and bfloat16 in compiled loops: computed in float32, rounded as the interpreter rounds.

numba has no half-precision arithmetic, and before this module a loop
with one float16 or bfloat16 op ran interpreted as a whole (W13 in
benchmarks/README.md). The interpreter computes these types widened
(`ops/elementwise_support.compute_dtype`, `widen_for_math`) and rounds each
result back with numpy's or ml_dtypes' casts. Compiled loops do the same:

* a half-precision value lives in the loop as the float32 holding it
  exactly (optimiser/loops.py converts carried and captured arrays on the way
  in and out, which is exact both ways);
* an exact op (arithmetic, compare, select, maximum, rounding, sign, clamp,
  converts between floats) is its float32 expression from
  loop_expressions.py or scalar_expressions.py, as the interpreter applies
  numpy's float32 function, then rounded to the result type;
* a transcendental op is a float64 expression (libm, through numba's
  `math`), where the interpreter applies numpy's float64 function, then
  rounded. The two float64 functions may differ in the last bit, which
  changes the rounded result only if the exact value lies that close to a
  rounding boundary. A half type has only 65,536 values, so each such op
  is run on all of them the first time a process compiles it
  (`math_agrees`), on the machine it runs on, against the interpreter's
  own kernel; it compiles only if every result has the interpreter's bits
  (NaNs compare as NaNs: their payloads are an exception the jit's
  "Bits" list already names).

Rounding (`ROUNDING_PRELUDE`) is to nearest even, with overflow to
infinity and subnormals kept, on the bits: from a float64 holding the
exact value as numpy rounds float64 -> float16 directly, and as ml_dtypes
rounds to bfloat16 through float32 (a float64 is first rounded to float32:
its double rounding is what the interpreter returns, so it is what this
returns).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from pjrt_ref.interpreter.native import float64_math
from pjrt_ref.interpreter.native.scalar_expressions import F32, FLOATS

F16 = np.dtype(np.float16)
BF16 = np.dtype("bfloat16")
HALF_TYPES = (F16, BF16)
ELEMENT_TYPES = {F16: "f16", BF16: "bf16"}
# The numba helper that rounds a float64 to each type (ROUNDING_PRELUDE).
ROUNDERS = {F16: "round_to_float16", BF16: "round_to_bfloat16"}

# Transcendentals as float64 expressions (float64_math.py): numpy's
# float64 functions in the interpreter, libm's here.
MATH_F64 = float64_math.MATH_F64
# Correctly rounded on every IEEE machine, in numpy and in libm alike.
SQRT_F64 = "math.sqrt(float64({0}))"


def is_half(dtype) -> bool:
    return dtype in HALF_TYPES


def half_expression(op, widened_expression) -> tuple[str, bool] | None:
    """The numba expression of `op`, some of whose types are float16 or
    bfloat16, and whether it must pass `math_agrees` first; or None.

    `widened_expression(op)` is the translator's template of an op whose
    types are float32 and wider (loop_expressions, scalar_expressions). The
    translator has checked that every type is a plain static tensor."""
    operands = [t.dtype for t in op.operand_types]
    result = op.result_types[0].dtype
    if op.name == "stablehlo.bitcast_convert":
        return None
    if op.name == "stablehlo.convert" and is_half(result) and operands[0] not in FLOATS + HALF_TYPES:
        return None   # integer -> half: numpy and ml_dtypes take different routes; kept interpreted
    if op.name in MATH_F64 or op.name == "stablehlo.sqrt":
        if not (is_half(result) and operands == [result]):
            return None
        template = MATH_F64.get(op.name, SQRT_F64)
        return f"{ROUNDERS[result]}({template})", op.name in MATH_F64
    template = widened_expression(_widened(op))
    if template is None:
        return None
    if is_half(result):
        template = f"{ROUNDERS[result]}(float64({template}))"
    return template, False


def _widened(op):
    """`op` with every half type replaced by float32 (what it computes in)."""
    def widen(ttype):
        return dataclasses.replace(ttype, dtype=F32, element_type="f32") if is_half(ttype.dtype) else ttype

    return dataclasses.replace(op, operand_types=tuple(map(widen, op.operand_types)),
                               result_types=tuple(map(widen, op.result_types)), cache={})


@functools.cache
def math_agrees(op_name: str, dtype: np.dtype) -> bool:
    """Whether the compiled `op_name` gives the interpreter's bits for every
    value of half type `dtype` on this machine (see the module docstring)."""
    inputs = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    return float64_math.compiled_matches_interpreter(
        op_name, inputs, f"{ROUNDERS[dtype]}({MATH_F64[op_name]})", F32, ELEMENT_TYPES[dtype])


# The rounding helpers, added by codegen to a generated module that calls one.
ROUNDING_PRELUDE = '''

@njit(cache=True, error_model="numpy", inline="always")
def round_to_float16(x):
    """x (a float64 holding the exact value) rounded to nearest even to
    float16 precision, as numpy casts float64 -> float16: to infinity from
    65520 (the midpoint past 65504) up; below 2^-14 to multiples of 2^-24
    (subnormals); else to 10 fraction bits, by adding just under half a
    unit of the 11th bit (plus the 10th bit, for ties to even) and clearing
    what lies below it. A carry into the exponent is the right answer."""
    value = float64(x)
    size = abs(value)
    if not size < 65520.0:
        return float32(value if value != value else math.copysign(np.inf, value))
    if size < 6.103515625e-05:
        return float32(np.rint(value * 16777216.0) / 16777216.0)
    bits = np.float64(value).view(np.uint64)
    rounded = np.uint64((bits + np.uint64(0x1FFFFFFFFFF) + ((bits >> np.uint64(42)) & np.uint64(1)))
                        & np.uint64(0xFFFFFC0000000000))
    return float32(rounded.view(np.float64))


@njit(cache=True, error_model="numpy", inline="always")
def round_to_bfloat16(x):
    """x rounded to bfloat16 through float32, as ml_dtypes casts: the
    float32 rounded to nearest even to 7 fraction bits the same way (its
    exponent range is float32's, so subnormals and overflow to infinity
    need no case of their own); NaN stays NaN."""
    value = float32(x)
    if value != value:
        return value
    bits = np.float32(value).view(np.uint32)
    rounded = np.uint32((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000))
    return rounded.view(np.float32)
'''
PRELUDE_FUNCTIONS = ("round_to_float16", "round_to_bfloat16")
