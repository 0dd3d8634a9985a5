"""Does the other backend's result agree with the reference's, and by how much not?

Floating-point elements agree when `|other - reference| <= atol + rtol *
|reference|` (numpy's `isclose` with the reference as the expected value),
when both are NaN, or when both are the same infinity. Integers and
booleans must be equal. Complex numbers are compared part by part.

The distance reported for floats is in ULPs (units in the last place): how
many representable numbers of the element type lie between the two values,
counted on the bit patterns, so it is exact and the same on every machine.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...interpreter.types import is_complex, is_float

DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-6
WORST_SHOWN = 5

_UNSIGNED_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass
class Comparison:
    """One result of one op: the reference's value against the other's."""

    reference: np.ndarray
    other: np.ndarray
    problem: str | None = None        # shapes or types differ: no element comparison
    differing: int = 0                # elements beyond tolerance
    max_ulp: int | None = None        # largest ULP distance (floats), over all elements
    worst: list[tuple] = field(default_factory=list)   # (index, reference, other, ulp or None)

    @property
    def agrees(self) -> bool:
        return self.problem is None and self.differing == 0


def float_parts(array: np.ndarray) -> np.ndarray:
    """A complex array as its (real, imag) pairs on a last axis; other arrays unchanged."""
    if is_complex(array.dtype):
        return np.stack([array.real, array.imag], axis=-1)
    return array


def ordered_bits(array: np.ndarray) -> np.ndarray:
    """Float bit patterns as int64 that order like the values: consecutive
    floats differ by 1, and -0 and +0 are both 0 (sign-magnitude to a line).

    The sign is the type's top bit (bit 3 of float4_e2m1fn's byte, say);
    types without negative numbers (float8_e8m0fnu) have none."""
    import ml_dtypes

    info = ml_dtypes.finfo(array.dtype)
    bits = np.ascontiguousarray(array).view(_UNSIGNED_OF_SIZE[array.dtype.itemsize]).astype(np.uint64)
    if float(info.min) >= 0:
        return bits.astype(np.int64)
    sign_bit = np.uint64(1 << (info.bits - 1))
    magnitude = (bits & (sign_bit - np.uint64(1))).astype(np.int64)
    return np.where(bits & sign_bit, -magnitude, magnitude)


def ulp_distance(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Per-element ULP distance as float64 (exact below 2**53), NaN where either is NaN."""
    distance = np.abs(ordered_bits(reference).astype(np.float64) - ordered_bits(other).astype(np.float64))
    either_nan = np.isnan(reference.astype(np.float64)) | np.isnan(other.astype(np.float64))
    return np.where(either_nan, np.nan, distance)


def _float_mismatch(reference: np.ndarray, other: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    wide_reference, wide_other = reference.astype(np.float64), other.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(wide_other - wide_reference) <= atol + rtol * np.abs(wide_reference)
    same = (wide_reference == wide_other) | (np.isnan(wide_reference) & np.isnan(wide_other))
    return ~(close | same)


def compare(reference, other, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL) -> Comparison:
    """Compare one result; `reference` is pjrt-ref's value."""
    reference, other = np.asarray(reference), np.asarray(other)
    result = Comparison(reference, other)
    if reference.dtype != other.dtype or reference.shape != other.shape:
        result.problem = "types differ"
        return result
    if reference.size == 0:
        return result
    floats = is_float(reference.dtype) or is_complex(reference.dtype)
    if floats:
        ours, theirs = float_parts(reference), float_parts(other)
        mismatch = _float_mismatch(ours, theirs, rtol, atol)
        ulps = ulp_distance(ours, theirs)
        if ours.ndim > reference.ndim:     # complex: an element is as far as its farther part
            mismatch, ulps = mismatch.any(axis=-1), np.fmax.reduce(ulps, axis=-1)
        finite_ulps = ulps[~np.isnan(ulps)]
        result.max_ulp = int(finite_ulps.max()) if finite_ulps.size else 0
        rank = np.where(np.isnan(ulps), np.inf, ulps)          # NaN against a number first
    else:
        mismatch = reference != other
        rank = np.abs(reference.astype(np.float64) - other.astype(np.float64))
    result.differing = int(mismatch.sum())
    if result.differing:
        positions = np.flatnonzero(mismatch)
        order = positions[np.argsort(-rank.reshape(-1)[positions], kind="stable")][:WORST_SHOWN]
        for flat in order:
            index = np.unravel_index(flat, reference.shape)
            ulp = None
            if floats:
                ulp = ulps.reshape(-1)[flat]
                ulp = None if np.isnan(ulp) else int(ulp)
            result.worst.append((index, reference[index], other[index], ulp))
    return result
