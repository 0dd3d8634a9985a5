"""Batch normalisation: `batch_norm_inference`, `batch_norm_training` and
`batch_norm_grad` (spec sections of the same names, docs/spec.md#batch_norm_grad).

Each follows the spec's decomposition (XLA's batchnorm expander): statistics
over every dimension except `feature_index`, biased variance. Narrow floats
are computed in f32 and rounded at the end.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_float


def _validate(op) -> None:
    for t in op.operand_types:
        if t.quant is not None or not is_float(t.dtype):
            raise op.error(f"{op.name} needs floating-point operands", cls=Unimplemented)


def _work(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype.itemsize < 4 else x


def _per_feature(vector: np.ndarray, rank: int, feature_index: int) -> np.ndarray:
    """A 1-d per-feature vector shaped to broadcast against the operand."""
    shape = [1] * rank
    shape[feature_index] = vector.shape[0]
    return _work(vector).reshape(shape)


def _mean(x: np.ndarray, feature_index: int) -> np.ndarray:
    axes = tuple(d for d in range(x.ndim) if d != feature_index)
    return np.mean(x, axis=axes, keepdims=True)


def _outputs(op, *values):
    return tuple(np.asarray(np.asarray(v).astype(t.dtype), order="C")
                 for v, t in zip(values, op.result_types))


@register("stablehlo.batch_norm_inference", validate=_validate)
def batch_norm_inference(op, operand, scale, offset, mean, variance):
    """Spec "batch_norm_inference": scale * ((x - mean) / sqrt(variance + epsilon)) + offset,
    in the order of the spec's decomposition (dividing before scaling: `scale * (x - mean)`
    first overflows where the spec's result is finite)."""
    feature, epsilon, rank = op.attrs["feature_index"], op.attrs["epsilon"], operand.ndim
    x = _work(operand)
    with np.errstate(all="ignore"):
        stddev = np.sqrt(_per_feature(variance, rank, feature) + x.dtype.type(epsilon))
        result = _scaled(op, (x - _per_feature(mean, rank, feature)) / stddev, scale, offset)
    return _outputs(op, result)[0]


def _scaled(op, normalized: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """The spec's last step of batch_norm_inference and batch_norm_training: scale * normalized + offset."""
    feature, rank = op.attrs["feature_index"], normalized.ndim
    return _per_feature(scale, rank, feature) * normalized + _per_feature(offset, rank, feature)


@register("stablehlo.batch_norm_training", validate=_validate)
def batch_norm_training(op, operand, scale, offset):
    """Spec "batch_norm_training": normalise with the batch's own mean and
    (biased) variance; also return them."""
    feature, epsilon = op.attrs["feature_index"], op.attrs["epsilon"]
    x = _work(operand)
    with np.errstate(all="ignore"):
        mean = _mean(x, feature)
        centered = x - mean
        variance = _mean(centered * centered, feature)
        output = _scaled(op, centered / np.sqrt(variance + x.dtype.type(epsilon)), scale, offset)
    return _outputs(op, output, mean.reshape(-1), variance.reshape(-1))


@register("stablehlo.batch_norm_grad", validate=_validate)
def batch_norm_grad(op, operand, scale, mean, variance, grad_output):
    """Spec "batch_norm_grad": gradients of batch_norm_training with respect
    to operand, scale and offset, computed as XLA's batchnorm expander does."""
    feature, epsilon, rank = op.attrs["feature_index"], op.attrs["epsilon"], operand.ndim
    x, dy = _work(operand), _work(grad_output)
    axes = tuple(d for d in range(rank) if d != feature)
    count = x.dtype.type(x.size / x.shape[feature]) if x.size else x.dtype.type(0)
    with np.errstate(all="ignore"):
        variance_eps = _per_feature(variance, rank, feature) + x.dtype.type(epsilon)
        stddev = np.sqrt(variance_eps)
        centered = x - _per_feature(mean, rank, feature)
        normalized = centered / stddev
        i1 = dy * count
        i2 = np.sum(dy, axis=axes, keepdims=True)
        i3 = np.sum(dy * centered, axis=axes, keepdims=True)
        i6 = i1 - i2 - i3 * centered / variance_eps
        grad_operand = _per_feature(scale, rank, feature) / stddev / count * i6
        grad_scale = np.sum(dy * normalized, axis=axes)
        grad_offset = np.sum(dy, axis=axes)
    return _outputs(op, grad_operand, grad_scale, grad_offset)
