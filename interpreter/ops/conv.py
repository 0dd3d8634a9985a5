"""Convolutions: `convolution` and `dynamic_conv`.

Spec "convolution" (docs/spec.md#convolution) and "dynamic_conv"
(docs/spec.md#dynamic_conv). The input is laid out as (batch, feature,
spatial...), padded and dilated, cut into windows with a strided view, and
each group of windows is contracted with its slice of the kernel by one
`tensordot`; ungrouped convolutions copy their windows into one matrix
(im2col) slice by slice and take one matrix product, which is faster.
Arithmetic is as for `dot_general` (see `dot.work_dtype`).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pjrt_ref.errors import InvalidArgument, Unimplemented
from pjrt_ref.interpreter.native import blas
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.ops.dot import from_work, to_work, work_dtype
from pjrt_ref.interpreter.ops.window import pad_and_dilate


def _validate_conv(op) -> None:
    for t in (*op.operand_types, *op.result_types):
        if getattr(t, "quant", None) is not None:
            raise op.error("quantized convolution is not supported", cls=Unimplemented)
    spatial = len(op.attrs["dimension_numbers"].input_spatial_dimensions)
    for name in ("window_strides", "lhs_dilation", "rhs_dilation", "window_reversal"):
        value = op.attrs.get(name)
        if value is not None and len(value) != spatial:
            raise op.error(f"{name} has {len(value)} entries for {spatial} spatial dimension(s)",
                           cls=InvalidArgument)


@register("stablehlo.convolution", validate=_validate_conv)
def convolution(op, lhs, rhs):
    """Spec "convolution": window strides, (negative) padding, lhs/rhs
    dilation, window reversal, feature and batch groups, any dimension
    numbers. precision_config is ignored."""
    return convolve(op, lhs, rhs, op.attrs.get("padding"))


@register("stablehlo.dynamic_conv", validate=_validate_conv)
def dynamic_conv(op, lhs, rhs, padding):
    """Spec "dynamic_conv": `convolution` with the padding given as an operand."""
    return convolve(op, lhs, rhs, padding)


def convolve(op, lhs, rhs, padding) -> np.ndarray:
    attrs = op.attrs
    numbers = attrs["dimension_numbers"]
    spatial = len(numbers.input_spatial_dimensions)
    padding = (np.zeros((spatial, 2), np.int64) if padding is None
               else np.asarray(padding, np.int64).reshape(spatial, 2))
    strides = tuple(attrs.get("window_strides") or (1,) * spatial)
    lhs_dilation = tuple(attrs.get("lhs_dilation") or (1,) * spatial)
    rhs_dilation = tuple(attrs.get("rhs_dilation") or (1,) * spatial)
    reversal = tuple(attrs.get("window_reversal") or (False,) * spatial)
    feature_groups = int(attrs.get("feature_group_count", 1))
    batch_groups = int(attrs.get("batch_group_count", 1))
    result_type = op.result_type
    work = work_dtype(lhs.dtype, rhs.dtype, result_type.dtype)

    if feature_groups == 1 and batch_groups == 1:
        return _convolve_channels_last(lhs, rhs, numbers, padding, strides, lhs_dilation,
                                       rhs_dilation, reversal, result_type, work)
    # Canonical layouts: x (N, C, spatial...), kernel (O, I, spatial...).
    x = np.transpose(to_work(lhs, work), (numbers.input_batch_dimension,
                                          numbers.input_feature_dimension,
                                          *numbers.input_spatial_dimensions))
    kernel = np.transpose(to_work(rhs, work), (numbers.kernel_output_feature_dimension,
                                               numbers.kernel_input_feature_dimension,
                                               *numbers.kernel_spatial_dimensions))
    flipped = tuple(2 + d for d, r in enumerate(reversal) if r)
    if flipped:
        kernel = np.flip(kernel, flipped)
    out_spatial = output_spatial_sizes(x.shape[2:], kernel.shape[2:], padding, strides,
                                       lhs_dilation, rhs_dilation)
    x = pad_and_dilate(x, np.zeros((), work), [(0, 0), (0, 0)] + [tuple(p) for p in padding],
                       (1, 1) + lhs_dilation)
    patches = _windows(x, kernel.shape[2:], strides, rhs_dilation, out_spatial)
    result = _grouped_contraction(patches, kernel, feature_groups, batch_groups)
    # result is (N, O, spatial...): move to the output dimension numbers.
    order = (numbers.output_batch_dimension, numbers.output_feature_dimension,
             *numbers.output_spatial_dimensions)
    result = np.transpose(result, np.argsort(order))
    return np.asarray(from_work(result, result_type.dtype), order="C")


def output_spatial_sizes(input_sizes, window_sizes, padding, strides, lhs_dilation,
                         rhs_dilation) -> tuple[int, ...]:
    """The spec's output spatial sizes: windows that fit in the padded,
    lhs-dilated input, stepping by the stride (computed from the operands,
    so dynamic `?` result dimensions work)."""
    sizes = []
    for size, window, (low, high), stride, base, dilation in zip(
            input_sizes, window_sizes, padding, strides, lhs_dilation, rhs_dilation):
        padded = (size - 1) * base + 1 + low + high if size > 0 else low + high
        span = (window - 1) * dilation + 1
        sizes.append(0 if padded < span else (padded - span) // stride + 1)
    return tuple(sizes)


def _convolve_channels_last(lhs, rhs, numbers, padding, strides, lhs_dilation, rhs_dilation,
                            reversal, result_type, work) -> np.ndarray:
    """Ungrouped convolution as one matrix product (im2col): x laid out
    (N, spatial..., C); each window position's strided slice of x is copied
    into rows of (C, window...), one whole slice at a time (fast, unlike a
    copy of a window view), and the rows are multiplied by the kernel laid
    out (I, window...) x O, a product computed as dot_general's are
    (`blas.matmul`: fixed blocks of rows, each one gemm call)."""
    spatial = len(numbers.input_spatial_dimensions)
    x = np.transpose(to_work(lhs, work), (numbers.input_batch_dimension,
                                          *numbers.input_spatial_dimensions,
                                          numbers.input_feature_dimension))
    kernel = np.transpose(to_work(rhs, work), (numbers.kernel_input_feature_dimension,
                                               *numbers.kernel_spatial_dimensions,
                                               numbers.kernel_output_feature_dimension))
    flipped = tuple(1 + d for d, r in enumerate(reversal) if r)
    if flipped:
        kernel = np.flip(kernel, flipped)
    out_spatial = output_spatial_sizes(x.shape[1:-1], kernel.shape[1:-1], padding, strides,
                                       lhs_dilation, rhs_dilation)
    x = pad_and_dilate(x, np.zeros((), work), [(0, 0)] + [tuple(p) for p in padding] + [(0, 0)],
                       (1,) + lhs_dilation + (1,))
    window = kernel.shape[1:1 + spatial]
    n, channels, out_features = x.shape[0], x.shape[-1], kernel.shape[-1]
    spans = [(w - 1) * d + 1 for w, d in zip(window, rhs_dilation)]
    fits = 0 not in out_spatial and all(s <= size for s, size in zip(spans, x.shape[1:-1]))
    # Every element is written below when the windows fit; else the result is 0.
    patches = (np.empty if fits else np.zeros)((n,) + out_spatial + (channels,) + window, work)
    if fits and np.prod(out_spatial) < np.prod(window):
        _fill_patches_by_output_position(patches, x, out_spatial, strides, rhs_dilation)
    elif fits:
        _fill_patches_by_window_position(patches, x, window, out_spatial, strides, rhs_dilation)
    rows = int(np.prod((n,) + out_spatial, dtype=np.int64))
    depth = channels * int(np.prod(window, dtype=np.int64))
    with np.errstate(all="ignore"):   # blas.matmul: split over idle CPUs like dot_general
        result = blas.matmul(patches.reshape(rows, depth), kernel.reshape(depth, out_features))
    result = result.reshape((n,) + out_spatial + (out_features,))
    # result is (N, spatial..., O): move to the output dimension numbers.
    order = (numbers.output_batch_dimension, *numbers.output_spatial_dimensions,
             numbers.output_feature_dimension)
    result = np.transpose(result, np.argsort(order))
    return np.asarray(from_work(result, result_type.dtype), order="C")


def _fill_patches_by_window_position(patches, x, window, out_spatial, strides, dilation) -> None:
    """im2col, one copy per window position: the strided slice of x (N,
    spatial..., C) that this kernel tap meets at every output position.
    Few copies when the window is small (a 3x3 kernel: 9)."""
    for position in np.ndindex(*window):
        source = tuple(slice(p * d, p * d + (o - 1) * s + 1, s) for p, d, o, s
                       in zip(position, dilation, out_spatial, strides))
        patches[(Ellipsis, slice(None)) + position] = x[(slice(None),) + source]


def _fill_patches_by_output_position(patches, x, out_spatial, strides, dilation) -> None:
    """im2col, one copy per output position: the window of x it sees, for
    every batch row and channel. The same patches as by window position;
    this is for windows larger than the output, as in a convolution's
    kernel gradient (JAX's transpose of a 3x3 convolution over 32x32 has
    a 32x32 window and a 3x3 output: 9 copies instead of 1024 scattered
    ones, each a contiguous (N, C, window...) block of the patches). x is
    first laid out (N, C, spatial...) so each copy reads runs of a row."""
    channels_first = np.ascontiguousarray(np.moveaxis(x, -1, 1))
    window = patches.shape[2 + len(out_spatial):]
    for position in np.ndindex(*out_spatial):
        source = tuple(slice(p * s, p * s + (w - 1) * d + 1, d) for p, s, w, d
                       in zip(position, strides, window, dilation))
        patches[(slice(None),) + position] = channels_first[(slice(None), slice(None)) + source]


def _windows(x, window, strides, dilation, out_spatial) -> np.ndarray:
    """(N, C, out_spatial..., window...) view of x's dilated, strided windows."""
    spans = [(w - 1) * d + 1 for w, d in zip(window, dilation)]
    n, c = x.shape[:2]
    if 0 in out_spatial or any(s > size for s, size in zip(spans, x.shape[2:])):
        return np.zeros((n, c) + tuple(out_spatial) + tuple(window), x.dtype)
    view = sliding_window_view(x, spans, axis=tuple(range(2, x.ndim)))
    index = (slice(None), slice(None))
    index += tuple(slice(0, o * s, s) for o, s in zip(out_spatial, strides))
    index += tuple(slice(None, None, d) for d in dilation)
    return view[index]


def _grouped_contraction(patches, kernel, feature_groups, batch_groups) -> np.ndarray:
    """Contract (N, C, S..., W...) windows with the (O, I, W...) kernel per group."""
    n, c = patches.shape[:2]
    out_features = kernel.shape[0]
    groups = max(feature_groups, batch_groups)
    per_group = out_features // groups
    window_axes = tuple(range(2 + (patches.ndim - 2) // 2, patches.ndim))
    outputs = []
    for g in range(groups):
        if feature_groups > 1:
            size = c // feature_groups
            lhs = patches[:, g * size:(g + 1) * size]
        elif batch_groups > 1:
            size = n // batch_groups
            lhs = patches[g * size:(g + 1) * size]
        else:
            lhs = patches
        rhs = kernel[g * per_group:(g + 1) * per_group]
        # tensordot over (C, W...) -> (N, S..., O)
        with np.errstate(all="ignore"):
            out = np.tensordot(lhs, rhs, axes=((1,) + window_axes, (1,) + tuple(range(2, rhs.ndim))))
        outputs.append(np.moveaxis(out, -1, 1))
    return np.concatenate(outputs, axis=1) if len(outputs) > 1 else outputs[0]
