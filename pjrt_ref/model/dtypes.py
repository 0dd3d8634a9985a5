"""`PJRT_Buffer_Type` (pjrt_c_api.h) <-> numpy dtypes.

Sub-byte and narrow float types come from ml_dtypes, one byte per element in
host memory (the layout JAX and XLA's CPU client use for host buffers).
"""
from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from pjrt_ref.errors import InvalidArgument, Unimplemented


class BufferType(enum.IntEnum):
    """`PJRT_Buffer_Type` values."""

    INVALID = 0
    PRED = 1
    S8 = 2
    S16 = 3
    S32 = 4
    S64 = 5
    U8 = 6
    U16 = 7
    U32 = 8
    U64 = 9
    F16 = 10
    F32 = 11
    F64 = 12
    BF16 = 13
    C64 = 14
    C128 = 15
    F8E5M2 = 16
    F8E4M3FN = 17
    F8E4M3B11FNUZ = 18
    F8E5M2FNUZ = 19
    F8E4M3FNUZ = 20
    S4 = 21
    U4 = 22
    TOKEN = 23
    S2 = 24
    U2 = 25
    F8E4M3 = 26
    F8E3M4 = 27
    F8E8M0FNU = 28
    F4E2M1FN = 29
    S1 = 30
    U1 = 31
    F6E2M3FN = 32
    F6E3M2FN = 33


_NUMPY = {
    BufferType.PRED: np.bool_, BufferType.S8: np.int8, BufferType.S16: np.int16,
    BufferType.S32: np.int32, BufferType.S64: np.int64, BufferType.U8: np.uint8,
    BufferType.U16: np.uint16, BufferType.U32: np.uint32, BufferType.U64: np.uint64,
    BufferType.F16: np.float16, BufferType.F32: np.float32, BufferType.F64: np.float64,
    BufferType.BF16: ml_dtypes.bfloat16, BufferType.C64: np.complex64,
    BufferType.C128: np.complex128, BufferType.F8E5M2: ml_dtypes.float8_e5m2,
    BufferType.F8E4M3FN: ml_dtypes.float8_e4m3fn,
    BufferType.F8E4M3B11FNUZ: ml_dtypes.float8_e4m3b11fnuz,
    BufferType.F8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
    BufferType.F8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    BufferType.S4: ml_dtypes.int4, BufferType.U4: ml_dtypes.uint4,
    BufferType.S2: ml_dtypes.int2, BufferType.U2: ml_dtypes.uint2,
    BufferType.F8E4M3: ml_dtypes.float8_e4m3, BufferType.F8E3M4: ml_dtypes.float8_e3m4,
    BufferType.F8E8M0FNU: ml_dtypes.float8_e8m0fnu,
    BufferType.F4E2M1FN: ml_dtypes.float4_e2m1fn,
    BufferType.S1: ml_dtypes.int1, BufferType.U1: ml_dtypes.uint1,
    BufferType.F6E2M3FN: ml_dtypes.float6_e2m3fn,
    BufferType.F6E3M2FN: ml_dtypes.float6_e3m2fn,
}
NUMPY_DTYPES: dict[BufferType, np.dtype] = {t: np.dtype(d) for t, d in _NUMPY.items()}

# xla.PrimitiveType (xla/xla_data.proto) of each PJRT_Buffer_Type, for the protos pjrt-ref
# writes (PJRT_TopologyDescription_MakeCanonicalShapeForMemorySpace's ShapeProto). The two
# enums share names, not numbers.
XLA_PRIMITIVE_TYPES: dict[BufferType, int] = {
    BufferType.PRED: 1, BufferType.S8: 2, BufferType.S16: 3, BufferType.S32: 4, BufferType.S64: 5,
    BufferType.U8: 6, BufferType.U16: 7, BufferType.U32: 8, BufferType.U64: 9,
    BufferType.F16: 10, BufferType.F32: 11, BufferType.F64: 12, BufferType.C64: 15,
    BufferType.BF16: 16, BufferType.TOKEN: 17, BufferType.C128: 18, BufferType.F8E5M2: 19,
    BufferType.F8E4M3FN: 20, BufferType.S4: 21, BufferType.U4: 22, BufferType.F8E4M3B11FNUZ: 23,
    BufferType.F8E5M2FNUZ: 24, BufferType.F8E4M3FNUZ: 25, BufferType.S2: 26, BufferType.U2: 27,
    BufferType.F8E4M3: 28, BufferType.F8E3M4: 29, BufferType.S1: 30, BufferType.U1: 31,
    BufferType.F4E2M1FN: 32, BufferType.F8E8M0FNU: 33, BufferType.F6E3M2FN: 35,
    BufferType.F6E2M3FN: 36,
}
_FROM_NUMPY: dict[np.dtype, BufferType] = {d: t for t, d in NUMPY_DTYPES.items()}


def buffer_type(value: int) -> BufferType:
    """A caller's `PJRT_Buffer_Type` value, or INVALID_ARGUMENT naming it."""
    try:
        return BufferType(int(value))
    except ValueError:
        raise InvalidArgument(f"unknown PJRT_Buffer_Type {int(value)}") from None


def to_numpy(buffer_type: int) -> np.dtype:
    """numpy dtype for a `PJRT_Buffer_Type`, or an error naming the type."""
    try:
        return NUMPY_DTYPES[BufferType(buffer_type)]
    except ValueError:
        raise InvalidArgument(f"unknown PJRT_Buffer_Type {buffer_type}") from None
    except KeyError:
        raise Unimplemented(f"PJRT_Buffer_Type_{BufferType(buffer_type).name} has no host representation") from None


def from_numpy(dtype) -> BufferType:
    """`PJRT_Buffer_Type` for a numpy dtype."""
    try:
        return _FROM_NUMPY[np.dtype(dtype)]
    except KeyError:
        raise Unimplemented(f"numpy dtype {np.dtype(dtype)} has no PJRT_Buffer_Type") from None
