"""Elementwise ops as numba scalar expressions, where they compute the
unfused kernels' bits.

`scalar_expression(op)` is the expression template of one op over its
operands {0}, {1}, ..., or None. Fused runs (optimiser/fusion.py), compiled `while`
loops (optimiser/loops.py) and region bodies (regions.py), the last two through
translator.py, all build their code from it. It has a module of its own,
below all of them: optimiser/fusion.py compiles `while` loops through
optimiser/loops.py, so neither can take it from the other without an import
circle, and the region compiler here imports nothing of optimiser/.

What fuses, and why it is exact (the same bits as the unfused kernels):

* f32/f64 add, subtract, multiply, divide, negate, abs: IEEE operations in
  the operands' precision (numba with `error_model="numpy"`: x / 0 is inf or
  NaN, no exception; no fastmath).
* f32/f64 maximum, minimum: NaN propagates (the NaN operand is returned),
  max(-0, +0) = +0 and min(-0, +0) = -0, as `elementwise_binary` does.
* f32/f64 compare with FLOAT (or no) compare_type, or TOTALORDER (on the
  bits, like elementwise_compare); select; f32 <-> f64 convert.
* sqrt (correctly rounded everywhere).
* f32 exp, expm1, logistic, tanh, sine, cosine (VECTOR_MATH_F32)
  everywhere, and, for compiled loops and region bodies only
  (LIBM_MATH_F32), f32 log and log1p. The unfused kernels compute these in
  float64 and round once to float32; so does compiled code, with float64
  functions of its own (vector_math.py, relative error below 2^-50) or
  libm's, where numpy uses its own SIMD ones. Those differ by an ulp of
  float64 or two now and then, which changes the float32 result (by one
  ulp) only if the exact value lies that close to a float32 rounding
  boundary. Measured over all 2^32 float32 inputs
  (tests/scripts/sweep_f32_math.py): exp, expm1, tanh, sine and cosine give
  the unfused bits on every input, logistic on all but one, where the
  compiled value is the correctly rounded one (vector_math.py). float64
  transcendentals are never compiled: there the difference would show.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.types import TensorType

F32, F64, BOOL = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.bool_)
FLOATS = (F32, F64)

# op -> scalar expression template over its operands {0}, {1}, ...
ARITHMETIC = {
    "stablehlo.add": "{0} + {1}",
    "stablehlo.subtract": "{0} - {1}",
    "stablehlo.multiply": "{0} * {1}",
    "stablehlo.divide": "{0} / {1}",
    "stablehlo.negate": "-{0}",
    "stablehlo.abs": "abs({0})",
    "stablehlo.maximum": "maximum({0}, {1})",
    "stablehlo.minimum": "minimum({0}, {1})",
    "stablehlo.sqrt": "math.sqrt(float64({0}))",
}
# f32 only: computed in float64, rounded once (see the module docstring).
# These are straight-line float64 code (vector_math.py) that LLVM
# vectorises inside a fused loop.
VECTOR_MATH_F32 = {
    "stablehlo.exponential": "exp_f32(float64({0}))",
    "stablehlo.exponential_minus_one": "expm1_f32(float64({0}))",
    "stablehlo.logistic": "logistic_f32(float64({0}))",
    "stablehlo.tanh": "tanh_f32(float64({0}))",
    "stablehlo.sine": "sin_f32(float64({0}))",
    "stablehlo.cosine": "cos_f32(float64({0}))",
}
# These call libm, which blocks vectorisation: numpy's vectorised float64
# log/log1p are faster than a numba loop's scalar calls, so runs with
# them go chunk by chunk through numpy instead. Compiled loops and region
# bodies (optimiser/loops.py, regions.py), which work on few elements at a time, do
# use them.
LIBM_MATH_F32 = {
    "stablehlo.log": "math.log(float64({0}))",
    "stablehlo.log_plus_one": "math.log1p(float64({0}))",
}
MATH_F32 = {**VECTOR_MATH_F32, **LIBM_MATH_F32}
COMPARE = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _dtypes(types) -> list:
    return [getattr(t, "dtype", None) for t in types]


def scalar_expression(op) -> str | None:
    """The numba scalar expression of one elementwise op, or None if it
    does not fuse exactly (see the module docstring)."""
    types = op.operand_types + op.result_types
    if any(not isinstance(t, TensorType) or t.quant is not None for t in types):
        return None
    operands, (result,) = _dtypes(op.operand_types), _dtypes(op.result_types)
    name = op.name
    if name in ARITHMETIC or name in MATH_F32:
        if any(d != result for d in operands) or result not in FLOATS:
            return None
        if name in MATH_F32 and result != F32:
            return None
        return ARITHMETIC.get(name) or MATH_F32[name]
    if name == "stablehlo.compare":
        if result != BOOL or operands[0] != operands[1] or operands[0] not in FLOATS:
            return None
        compare = COMPARE[op.attrs["comparison_direction"]]
        compare_type = op.attrs.get("compare_type")
        if compare_type == "TOTALORDER":
            # IEEE totalOrder through the bits, as elementwise_compare does.
            key = "total_order_key32" if operands[0] == F32 else "total_order_key64"
            return f"{key}({{0}}) {compare} {key}({{1}})"
        return "{0} %s {1}" % compare if compare_type in (None, "FLOAT") else None
    if name == "stablehlo.select":
        if operands[0] != BOOL or operands[1] != result or operands[2] != result:
            return None
        if result not in FLOATS + (BOOL,):
            return None
        return "{1} if {0} else {2}"
    if name == "stablehlo.convert":
        if operands[0] in FLOATS and result in FLOATS:
            return "{0}"
    return None
