"""Element and tensor types: from MLIR types to numpy dtypes and shapes.

StableHLO's element types (spec section "Types") map onto numpy dtypes, with
ml_dtypes supplying the narrow floats (bf16, the f8/f6/f4 families) and the
2- and 4-bit integers. `i1` is numpy's bool. Quantized element types
(`!quant.uniform<storage:expressed, scale:zero_point>`) are carried as their
storage type plus a `QuantParams` describing the quantization.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

# Spec element type name (as MLIR prints it) -> numpy dtype.
ELEMENT_DTYPES: dict[str, np.dtype] = {
    "i1": np.dtype(np.bool_),
    "i2": np.dtype(ml_dtypes.int2),
    "i4": np.dtype(ml_dtypes.int4),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "ui2": np.dtype(ml_dtypes.uint2),
    "ui4": np.dtype(ml_dtypes.uint4),
    "ui8": np.dtype(np.uint8),
    "ui16": np.dtype(np.uint16),
    "ui32": np.dtype(np.uint32),
    "ui64": np.dtype(np.uint64),
    "f4E2M1FN": np.dtype(ml_dtypes.float4_e2m1fn),
    "f6E2M3FN": np.dtype(ml_dtypes.float6_e2m3fn),
    "f6E3M2FN": np.dtype(ml_dtypes.float6_e3m2fn),
    "f8E3M4": np.dtype(ml_dtypes.float8_e3m4),
    "f8E4M3": np.dtype(ml_dtypes.float8_e4m3),
    "f8E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "f8E4M3B11FNUZ": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "f8E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "f8E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8E8M0FNU": np.dtype(ml_dtypes.float8_e8m0fnu),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "complex<f32>": np.dtype(np.complex64),
    "complex<f64>": np.dtype(np.complex128),
}
# Signless and signed integers share a numpy dtype.
for _bits in (2, 4, 8, 16, 32, 64):
    ELEMENT_DTYPES[f"si{_bits}"] = ELEMENT_DTYPES[f"i{_bits}"]

DTYPE_ELEMENT_NAMES: dict[np.dtype, str] = {}
for _name, _dtype in ELEMENT_DTYPES.items():
    DTYPE_ELEMENT_NAMES.setdefault(_dtype, _name)


# The predicates below are memoised: `dtype.name` is a Python property that
# costs microseconds, and kernels ask them on every call.
@functools.cache
def is_float(dtype: np.dtype) -> bool:
    """True for every floating-point element type, ml_dtypes' included."""
    return dtype.kind == "f" or (dtype.kind == "V" and "float" in dtype.name) or \
        dtype.name.startswith(("float", "bfloat"))


def is_complex(dtype: np.dtype) -> bool:
    return dtype.kind == "c"


def is_bool(dtype: np.dtype) -> bool:
    return dtype == np.bool_


@functools.cache
def is_integer(dtype: np.dtype) -> bool:
    """True for signed and unsigned integers (not i1), ml_dtypes' included."""
    return dtype.kind in "iu" or dtype.name in ("int2", "int4", "uint2", "uint4")


@functools.cache
def is_unsigned(dtype: np.dtype) -> bool:
    return dtype.kind == "u" or dtype.name in ("uint2", "uint4")


@dataclass(frozen=True)
class QuantParams:
    """A `!quant.uniform` element type (spec "Quantized element types")."""

    storage_dtype: np.dtype
    expressed_dtype: np.dtype
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    quantization_dimension: int | None = None
    storage_min: int | None = None
    storage_max: int | None = None

    @property
    def storage_bounds(self) -> tuple[int, int]:
        info = ml_dtypes.iinfo(self.storage_dtype) if self.storage_dtype.name in (
            "int2", "int4", "uint2", "uint4") else np.iinfo(self.storage_dtype)
        lo = info.min if self.storage_min is None else self.storage_min
        hi = info.max if self.storage_max is None else self.storage_max
        return int(lo), int(hi)


@dataclass(frozen=True)
class TensorType:
    """A ranked tensor type: shape (None for a dynamic `?` dim) and dtype."""

    shape: tuple[int | None, ...]
    dtype: np.dtype
    element_type: str
    quant: QuantParams | None = None
    bounds: tuple[int | None, ...] | None = None

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    def __str__(self) -> str:
        dims = "x".join("?" if d is None else str(d) for d in self.shape)
        return f"tensor<{dims + 'x' if dims else ''}{self.element_type}>"


@dataclass(frozen=True)
class TokenType:
    """`!stablehlo.token`: orders side effects; carries no data."""

    def __str__(self) -> str:
        return "!stablehlo.token"


@dataclass(frozen=True)
class TupleType:
    """`tuple<...>` of other value types."""

    types: tuple = field(default_factory=tuple)

    def __str__(self) -> str:
        return "tuple<" + ", ".join(map(str, self.types)) + ">"


@dataclass(frozen=True)
class FutureType:
    """`!stablehlo.future<...>`: the result of `async_start`, consumed by
    `async_done`; its runtime value is the tuple of the awaited values."""

    types: tuple = field(default_factory=tuple)

    def __str__(self) -> str:
        return "!stablehlo.future<" + ", ".join(map(str, self.types)) + ">"


class Token:
    """The runtime value of a token."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Token"


TOKEN = Token()

_QUANT_RE = re.compile(
    r"!quant\.uniform<(?P<storage>[a-z0-9]+)(?::(?P<smin>-?\d+):(?P<smax>-?\d+))?"
    r":(?P<expressed>[a-zA-Z0-9]+)(?::(?P<axis>\d+))?,\s*(?P<params>.*)>$")


def parse_quant_type(text: str) -> QuantParams:
    """Parse `!quant.uniform<i8<-127:127>:f32:1, {0.1:2, 0.2:3}>` and friends."""
    text = re.sub(r"<(-?\d+):(-?\d+)>", r":\1:\2", text.strip(), count=1)
    match = _QUANT_RE.match(text)
    if not match:
        raise ValueError(f"cannot read quantized type {text}")
    params = match["params"].strip().strip("{}")
    scales, zero_points = [], []
    for item in params.split(","):
        scale, _, zero_point = item.strip().partition(":")
        scales.append(float(scale))
        zero_points.append(int(zero_point) if zero_point else 0)
    return QuantParams(
        storage_dtype=ELEMENT_DTYPES[match["storage"]],
        expressed_dtype=ELEMENT_DTYPES[match["expressed"]],
        scales=tuple(scales),
        zero_points=tuple(zero_points),
        quantization_dimension=int(match["axis"]) if match["axis"] else None,
        storage_min=int(match["smin"]) if match["smin"] else None,
        storage_max=int(match["smax"]) if match["smax"] else None,
    )


def element_type_of(mlir_element_type) -> tuple[str, np.dtype, QuantParams | None]:
    """Name, numpy dtype and quantization of an MLIR element type."""
    text = str(mlir_element_type)
    if text.startswith("!quant."):
        quant = parse_quant_type(text)
        return text, quant.storage_dtype, quant
    try:
        return text, ELEMENT_DTYPES[text], None
    except KeyError:
        raise ValueError(f"unsupported element type {text}") from None


# A program names few distinct types (a 12-layer transformer: 38 in 3,900
# operands and results), and printing one costs a tenth of converting it.
_CONVERTED: dict[str, object] = {}
_CONVERTED_MAX = 4096


def convert_type(mlir_type):
    """Convert an MLIR value type to TensorType, TokenType or TupleType.

    The types are frozen values, so one converted type is shared by every
    op whose type prints the same."""
    text = str(mlir_type)
    converted = _CONVERTED.get(text)
    if converted is None:
        converted = _convert_type(mlir_type)
        if len(_CONVERTED) >= _CONVERTED_MAX:
            _CONVERTED.clear()
        _CONVERTED[text] = converted
    return converted


def _convert_type(mlir_type):
    from jaxlib.mlir import ir

    mlir_type = mlir_type.maybe_downcast() if type(mlir_type) is ir.Type else mlir_type
    if isinstance(mlir_type, ir.RankedTensorType):
        ranked = mlir_type
        name, dtype, quant = element_type_of(ranked.element_type)
        shape = tuple(None if ranked.is_dynamic_dim(i) else ranked.get_dim_size(i)
                      for i in range(ranked.rank))
        return TensorType(shape, dtype, name, quant)
    if isinstance(mlir_type, ir.TupleType):
        tup = mlir_type
        return TupleType(tuple(convert_type(tup.get_type(i)) for i in range(tup.num_types)))
    text = str(mlir_type)
    if text in ("!stablehlo.token", "!mhlo.token"):
        return TokenType()
    if text.startswith("!stablehlo.future<"):
        from jaxlib.mlir.dialects import stablehlo
        return FutureType(tuple(convert_type(t) for t in stablehlo.FutureType(mlir_type).types))
    if isinstance(mlir_type, ir.UnrankedTensorType):
        raise ValueError(f"unranked tensor type {text} is not supported")
    # A bare element type (e.g. the scalar arguments of some region blocks).
    name, dtype, quant = element_type_of(mlir_type)
    return TensorType((), dtype, name, quant)
