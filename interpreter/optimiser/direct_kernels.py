"""Elementwise steps on plain dtypes call numpy's ufunc directly.

The generic elementwise kernels (ops/elementwise_*.py) widen narrow types,
round results back and silence numpy's warnings, all per call: a few
microseconds that dominate ops on small tensors. For operands whose dtype is
already the compute dtype (float32, float64, 8- to 64-bit integers) widening
and rounding are no-ops, and `FunctionPlan.run` already silences numpy, so
the step can call the same numpy function directly. Only ops whose generic
kernel applies exactly that function on such dtypes are listed here.

Other ops get their lean kernels from their own modules: a kernel
registered with `specialize=` (registry.py) is asked once per step, here,
for a version with its type- and attribute-dependent decisions already
made (reduce, broadcast_in_dim, reshape, transpose, point gather and scatter).
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.interpreter.ops.elementwise_compare import DIRECTIONS
from pjrt_ref.interpreter.ops.elementwise_support import PLAIN_INTEGERS
from pjrt_ref.interpreter.registry import lookup

FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float64))
INTEGERS = PLAIN_INTEGERS
SIGNED = frozenset(t for t in INTEGERS if t.kind == "i")
BOOL = frozenset({np.dtype(np.bool_)})


def _logistic(x):
    return 1 / (1 + np.exp(-x))


# op -> (numpy function, dtypes it applies to). Binary arithmetic: the
# generic kernel is `function(widen(lhs), widen(rhs))`, rounded to the result
# type; maximum/minimum of floats are left out (they fix up signed zeros).
EXACT_OPS = {
    "stablehlo.add": (np.add, FLOATS | INTEGERS),
    "stablehlo.subtract": (np.subtract, FLOATS | INTEGERS),
    "stablehlo.multiply": (np.multiply, FLOATS | INTEGERS),
    "stablehlo.divide": (np.true_divide, FLOATS),
    "stablehlo.maximum": (np.maximum, INTEGERS),
    "stablehlo.minimum": (np.minimum, INTEGERS),
    "stablehlo.negate": (np.negative, FLOATS | INTEGERS),
    "stablehlo.abs": (np.abs, FLOATS | SIGNED),
    # and/or/xor/not: bitwise on integers, logical on booleans (np.invert
    # of a bool is `not`), as ops/bitwise.py's kernels compute them.
    "stablehlo.and": (np.bitwise_and, BOOL | INTEGERS),
    "stablehlo.or": (np.bitwise_or, BOOL | INTEGERS),
    "stablehlo.xor": (np.bitwise_xor, BOOL | INTEGERS),
    "stablehlo.not": (np.invert, BOOL | INTEGERS),
}

# Transcendental ops: the generic kernel computes in double precision and
# rounds once to the result type (see elementwise_unary.MATH_UNARY_OPS).
MATH_OPS = {
    "stablehlo.exponential": np.exp,
    "stablehlo.exponential_minus_one": np.expm1,
    "stablehlo.log": np.log,
    "stablehlo.log_plus_one": np.log1p,
    "stablehlo.logistic": _logistic,
    "stablehlo.sine": np.sin,
    "stablehlo.cosine": np.cos,
    "stablehlo.tanh": np.tanh,
    "stablehlo.sqrt": np.sqrt,
}


def _as_array(value, ndarray=np.ndarray, asarray=np.asarray):
    """numpy returns scalars for 0-d results; kernels return arrays."""
    return value if type(value) is ndarray else asarray(value)


def exact_function(step):
    """The numpy function of an elementwise step running this module's
    direct kernel (so on plain dtypes, with no widening or rounding), else None."""
    entry = EXACT_OPS.get(step.op.name)
    if entry is None or step.regions or len(step.results) != 1:
        return None
    if getattr(step.kernel, "exact_function", None) is not entry[0]:
        return None
    return entry[0]


def _exact_kernel(function, arity: int):
    if arity == 1:
        def kernel(op, x):
            return _as_array(function(x))
    else:
        def kernel(op, x, y):
            return _as_array(function(x, y))
    kernel.exact_function = function     # reuse.py gives it an `out=`
    return kernel


# Large float32 operands go through float64 in chunks of this many elements:
# the float64 temporaries stay in cache, and no 8 MB array is allocated (and
# page-faulted in) per call. Same values.
CHUNK = 1 << 14


def _math_kernel(function, dtype: np.dtype):
    if dtype == np.float64:
        return _exact_kernel(function, 1)
    double = np.dtype(np.float64)

    def kernel(op, x):
        if x.size <= CHUNK:
            return _as_array(function(x.astype(double)).astype(dtype))
        flat = x.reshape(-1)
        result = np.empty(flat.size, dtype)
        for start in range(0, flat.size, CHUNK):
            # Assignment rounds to nearest even, like astype.
            result[start:start + CHUNK] = function(flat[start:start + CHUNK].astype(double))
        return result.reshape(x.shape)
    return kernel


def _compare_kernel(function):
    def kernel(op, x, y):
        return _as_array(function(x, y))
    return kernel


def fast_kernel(op):
    """A direct kernel for the planned op, or None if it has none."""
    name = op.name
    if name not in EXACT_OPS and name not in MATH_OPS and name != "stablehlo.compare":
        return None
    types = op.operand_types + op.result_types
    dtypes = {getattr(t, "dtype", None) for t in types}
    if any(getattr(t, "quant", None) is not None for t in types):
        return None
    if name in EXACT_OPS:
        function, allowed = EXACT_OPS[name]
        if len(dtypes) == 1 and dtypes <= allowed:
            return _exact_kernel(function, len(op.operand_types))
    elif name in MATH_OPS:
        if len(dtypes) == 1 and dtypes <= FLOATS:
            return _math_kernel(MATH_OPS[name], op.result_type.dtype)
    elif name == "stablehlo.compare":
        operand_dtypes = {t.dtype for t in op.operand_types}
        if (len(operand_dtypes) == 1 and operand_dtypes <= FLOATS | INTEGERS
                and op.attrs.get("compare_type") != "TOTALORDER"):
            return _compare_kernel(DIRECTIONS[op.attrs["comparison_direction"]])
    return None


def specialized_kernel(step):
    """The op's own plan-time specialisation (registry `specialize`), or None.

    Asked only while the step still runs its registered generic kernel (an
    earlier rewrite, e.g. dots.py, may have given it another one) and for
    unquantized types (quantized steps run a dequantizing wrapper)."""
    entry = lookup(step.op.name)
    if entry is None or entry.specialize is None or step.kernel is not entry.fn:
        return None
    types = step.op.operand_types + step.op.result_types
    if any(getattr(t, "quant", None) is not None for t in types):
        return None
    return entry.specialize(step.op)


def specialize_region(region) -> None:
    """Give every step with a direct kernel that kernel, in nested regions too."""
    for step in region.steps:
        kernel = fast_kernel(step.op) or specialized_kernel(step)
        if kernel is not None:
            step.kernel = kernel
        for nested in step.regions:
            specialize_region(nested)
    region.runners = None
