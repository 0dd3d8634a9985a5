"""Does the other backend's result agree with the reference's, and by how much not?

Floating-point elements agree when `|other - reference| <= atol + rtol *
|reference|` (numpy's `isclose` with the reference as the expected value),
when both are NaN, or when both are the same infinity. Integers and
booleans must be equal. Complex numbers are compared part by part.

Unless given, rtol and atol depend on the element type, as in
`torch.testing.assert_close` (a table many plugin authors know): f16
1e-3/1e-5, bf16 1.6e-2/1e-5, f32 1.3e-6/1e-5, f64 1e-7/1e-7; the 8-, 6- and
4-bit floats allow one rounding step (rtol = the type's epsilon) and 1e-5.
Two backends that sum a dot product in different orders differ by more
than a few ULPs near zero; atol is what lets those elements agree.

The distance reported for floats is in ULPs (units in the last place): how
many representable numbers of the element type lie between the two values,
counted on the bit patterns, so it is exact and the same on every machine.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from pjrt_ref.interpreter.types import is_complex, is_float

WORST_SHOWN = 5

# (rtol, atol) by element type name: torch.testing.assert_close's defaults.
_DEFAULT_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
                       "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}
_SMALL_FLOAT_ATOL = 1e-5


@dataclass(frozen=True)
class Tolerance:
    """rtol and atol given by the user (None: the element type's default)."""

    rtol: float | None = None
    atol: float | None = None

    def for_dtype(self, dtype: np.dtype) -> tuple[float, float]:
        """(rtol, atol) for floats (and complex numbers' parts) of `dtype`."""
        if is_complex(dtype):
            dtype = np.dtype(np.float32 if dtype == np.complex64 else np.float64)
        default = _DEFAULT_TOLERANCES.get(dtype.name)
        if default is None:
            default = (float(ml_dtypes.finfo(dtype).eps), _SMALL_FLOAT_ATOL)
        return (default[0] if self.rtol is None else self.rtol,
                default[1] if self.atol is None else self.atol)

    def __str__(self) -> str:
        if self.rtol is None and self.atol is None:
            return "the default tolerances"
        given = [f"{name}={value:g}" for name, value in (("rtol", self.rtol), ("atol", self.atol))
                 if value is not None]
        return " ".join(given) + ("" if len(given) == 2 else " (default otherwise)")

_UNSIGNED_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass
class Comparison:
    """One result of one op: the reference's value against the other's."""

    reference: np.ndarray
    other: np.ndarray
    problem: str | None = None        # shapes or types differ: no element comparison
    rtol: float = 0.0                 # the tolerances used (floats)
    atol: float = 0.0
    differing: int = 0                # elements beyond tolerance
    max_ulp: int | None = None        # largest ULP distance (floats), over all elements
    tolerance_used: float = 0.0       # largest |difference| / (atol + rtol * |reference|)
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
    with np.errstate(invalid="ignore"):       # some narrow-type casts warned "invalid value" in fuzz campaigns
        either_nan = np.isnan(reference.astype(np.float64)) | np.isnan(other.astype(np.float64))
    return np.where(either_nan, np.nan, distance)


def _float_mismatch(reference: np.ndarray, other: np.ndarray, rtol: float,
                    atol: float) -> tuple[np.ndarray, float]:
    """(where the elements differ beyond tolerance, the largest fraction of
    the tolerance an agreeing element uses)."""
    with np.errstate(invalid="ignore"):       # some narrow-type casts warned "invalid value" in fuzz campaigns
        wide_reference, wide_other = reference.astype(np.float64), other.astype(np.float64)
    same = (wide_reference == wide_other) | (np.isnan(wide_reference) & np.isnan(wide_other))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        difference = np.abs(wide_other - wide_reference)
        allowed = atol + rtol * np.abs(wide_reference)
        # (an infinity agrees only with the same infinity: `same` above)
        close = (difference <= allowed) & np.isfinite(wide_reference) & np.isfinite(wide_other)
        used = np.where(same | ~close, 0.0, difference / allowed)
    return ~(close | same), float(used.max()) if used.size else 0.0


def compare(reference, other, tolerance: Tolerance = Tolerance()) -> Comparison:
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
        result.rtol, result.atol = tolerance.for_dtype(reference.dtype)
        ours, theirs = float_parts(reference), float_parts(other)
        mismatch, result.tolerance_used = _float_mismatch(ours, theirs, result.rtol, result.atol)
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
