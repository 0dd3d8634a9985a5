"""Helpers shared by the elementwise op families (no ops are registered here).

Two rules shape every elementwise kernel:

* Narrow types compute in a wider numpy type and are rounded back, like XLA
  CPU does: bf16, f16 and the f8/f6/f4 floats compute in float32; the 2- and
  4-bit integers compute in int8/uint8 and wrap to their width.
* A kernel returns an ndarray of exactly the result type's dtype and shape
  (numpy turns 0-d results into scalars; `as_result` undoes that).

Integer overflow wraps silently (spec: integer arithmetic is modular), so
kernels run under `np.errstate(all="ignore")`: numpy never warns.
"""
from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.types import is_bool, is_complex, is_float, is_integer, is_unsigned

# The 8- to 64-bit integers, whose numpy dtype is the element type itself.
PLAIN_INTEGERS = frozenset(np.dtype(f"{kind}{size}") for kind in "iu" for size in (1, 2, 4, 8))
_NARROW_INTEGERS = {"int2": (np.int8, 2), "int4": (np.int8, 4),
                    "uint2": (np.uint8, 2), "uint4": (np.uint8, 4)}


@functools.cache   # dtype.name costs microseconds; kernels ask per call
def bit_width(dtype: np.dtype) -> int:
    """Number of bits of one element of `dtype` (i1 counts as 1)."""
    if is_bool(dtype):
        return 1
    if dtype.name in _NARROW_INTEGERS:
        return _NARROW_INTEGERS[dtype.name][1]
    if dtype.name.startswith("float4_"):
        return 4
    if dtype.name.startswith("float6_"):
        return 6
    return dtype.itemsize * 8


@functools.cache
def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The numpy dtype an elementwise op on `dtype` computes in."""
    if dtype.name in _NARROW_INTEGERS:
        return np.dtype(_NARROW_INTEGERS[dtype.name][0])
    if is_float(dtype) and dtype not in (np.float32, np.float64):
        return np.dtype(np.float32)
    return dtype


def widen(array: np.ndarray) -> np.ndarray:
    """`array` in its compute dtype (exact: every narrow value fits)."""
    return np.asarray(array).astype(compute_dtype(array.dtype), copy=False)


def widen_for_math(array: np.ndarray) -> np.ndarray:
    """`array` in double precision (float64 or complex128), for the
    transcendental functions: computed in double and rounded once, single
    precision results are (almost always) the correctly rounded ones. XLA
    CPU uses its own approximations, which are off by an ulp now and then;
    numpy's single precision exp/sin/... and complex64 loops are off more
    often, so double precision is the closer and the better-defined choice."""
    if is_complex(array.dtype):
        return array.astype(np.complex128, copy=False)
    if is_float(array.dtype):
        return array.astype(np.float64, copy=False)
    return widen(array)


def complex_from_parts(real: np.ndarray, imag: np.ndarray) -> np.ndarray:
    """real + i*imag, built part by part: the expression `real + 1j * imag`
    would compute 1j * imag as a complex product and turn an infinite or NaN
    imaginary part into a NaN real part."""
    real, imag = np.broadcast_arrays(real, imag)
    result = np.empty(real.shape, np.result_type(real.dtype, imag.dtype, np.complex64))
    result.real = real
    result.imag = imag
    return result


def as_result(values, dtype: np.dtype) -> np.ndarray:
    """`values` as an ndarray of exactly `dtype`: narrow floats are rounded
    to nearest even, narrow integers wrap to their width."""
    # numpy's and ml_dtypes' integer casts are modular; float casts round
    # to nearest even.
    return np.asarray(values).astype(dtype, copy=False)


def contiguous(array: np.ndarray) -> np.ndarray:
    """`array` in C order, keeping 0-d arrays 0-d (unlike np.ascontiguousarray)."""
    return array if array.flags.c_contiguous else array.copy(order="C")


def float_bits_dtype(dtype: np.dtype) -> np.dtype:
    """The unsigned integer dtype with the same width as float `dtype`."""
    return np.dtype(f"u{dtype.itemsize}")


def integer_info(dtype: np.dtype):
    """`iinfo` for numpy and ml_dtypes integers alike."""
    if dtype.name in _NARROW_INTEGERS:
        return ml_dtypes.iinfo(dtype)
    return np.iinfo(dtype)


def elementwise(fn):
    """Decorate a kernel `fn(op, *operands)` so numpy never warns inside it."""

    @functools.wraps(fn)
    def kernel(op, *operands, **kwargs):
        with np.errstate(all="ignore"):
            return fn(op, *operands, **kwargs)

    return kernel


# --- Load-time validation ----------------------------------------------------

def _category(dtype: np.dtype) -> str:
    if is_bool(dtype):
        return "bool"
    if is_complex(dtype):
        return "complex"
    if is_float(dtype):
        return "float"
    if is_integer(dtype):
        return "unsigned" if is_unsigned(dtype) else "signed"
    return "other"


def accepts(*categories: str):
    """A `validate` hook: every operand and result is a (non-quantized)
    tensor whose element type is in `categories` ("bool", "signed",
    "unsigned", "float", "complex"; "integer" means both signednesses;
    results may be any type when "any result" is given)."""
    allowed = set(categories)
    if "integer" in allowed:
        allowed |= {"signed", "unsigned"}
    results_free = "any result" in allowed

    def validate(op) -> None:
        types = list(op.operand_types)
        if not results_free:
            types += list(op.result_types)
        for ttype in types:
            if getattr(ttype, "quant", None) is not None:
                raise op.error(f"quantized element type {ttype.element_type} is not "
                               "supported by this op in pjrt-ref", cls=Unimplemented)
            if not hasattr(ttype, "dtype"):
                raise op.error(f"expected tensors, got {ttype}")
            if _category(ttype.dtype) not in allowed:
                raise op.error(f"element type {ttype.element_type} is not supported "
                               f"(expected {', '.join(sorted(categories))})",
                               cls=Unimplemented)

    return validate
