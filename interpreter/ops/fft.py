"""`fft` (spec "fft", docs/spec.md#fft): FFT, IFFT, RFFT and IRFFT over the
last `len(fft_length)` dimensions.

scipy.fft's pocketfft computes single-precision transforms in single
precision with the same algorithms as XLA's DUCC FFT (results agree to the
bit); narrower floats are computed in f32. IFFT and IRFFT are normalised by
1/n, as in the spec.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_complex

# fft_type -> the scipy.fft function (imported on first use: importing
# scipy.fft is slow, and every program's first load would pay it).
_TRANSFORMS = {"FFT": "fftn", "IFFT": "ifftn", "RFFT": "rfftn", "IRFFT": "irfftn"}


def _validate_fft(op) -> None:
    if op.attrs.get("fft_type") not in _TRANSFORMS:
        raise op.error(f"unknown fft_type {op.attrs.get('fft_type')}", cls=Unimplemented)


def _compute_type(operand: np.ndarray) -> np.ndarray:
    if operand.dtype in (np.float32, np.float64, np.complex64, np.complex128):
        return operand
    return operand.astype(np.complex64 if is_complex(operand.dtype) else np.float32)


def _transformed_lengths(op, lengths) -> tuple:
    """Result sizes of the transformed dimensions (RFFT keeps n // 2 + 1)."""
    if op.attrs["fft_type"] == "RFFT":
        return lengths[:-1] + (lengths[-1] // 2 + 1,)
    return lengths


@register("stablehlo.fft", validate=_validate_fft)
def fft(op, operand):
    """Spec "fft". Zero-length transforms give zeros of the result shape."""
    lengths = tuple(op.attrs["fft_length"])
    result_type = op.result_type
    shape = operand.shape[:operand.ndim - len(lengths)] + _transformed_lengths(op, lengths)
    if 0 in lengths or operand.size == 0 or 0 in shape:
        return np.zeros(shape, result_type.dtype)
    axes = tuple(range(operand.ndim - len(lengths), operand.ndim))
    import scipy.fft

    transform = getattr(scipy.fft, _TRANSFORMS[op.attrs["fft_type"]])
    result = transform(_compute_type(operand), s=lengths, axes=axes)
    return np.asarray(result.astype(result_type.dtype), order="C").reshape(shape)
