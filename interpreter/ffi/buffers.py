"""The arrays an FFI call hands a handler: operands, results, their element types.

What XLA's CPU runtime gives a handler, and so what pjrt-ref gives it:
- each operand and result is dense row-major memory of its static shape
  (a view is copied first). A call that asks for other layouts
  (`operand_layouts`/`result_layouts`, ffi_call's input/output_layouts) is
  refused when the program is planned: XLA would hand the handler memory in
  that order, and a handler reading row-major memory would read other
  numbers;
- a result aliased to an operand (`output_operand_aliases`, jax.ffi.ffi_call's
  `input_output_aliases`) is one buffer: the handler sees the same pointer as
  that operand and as that result, holding the operand's values. The
  interpreter's values are immutable, so that buffer is a copy of the operand;
- other results are fresh, uninitialised memory (np.empty), as in XLA: a
  handler must write every element it returns;
- a token is a buffer of type TOKEN with no data.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.types import TOKEN, TensorType, TokenType

# numpy/ml_dtypes name -> XLA_FFI_DataType member (c_api.h), for the element
# types that are a whole number of bytes, as XLA lays them out too.
_DATA_TYPES = {
    "bool": "PRED", "int8": "S8", "int16": "S16", "int32": "S32", "int64": "S64",
    "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64",
    "float16": "F16", "bfloat16": "BF16", "float32": "F32", "float64": "F64",
    "complex64": "C64", "complex128": "C128",
    "float8_e5m2": "F8E5M2", "float8_e4m3fn": "F8E4M3FN", "float8_e4m3b11fnuz": "F8E4M3B11FNUZ",
    "float8_e5m2fnuz": "F8E5M2FNUZ", "float8_e4m3fnuz": "F8E4M3FNUZ", "float8_e3m4": "F8E3M4",
    "float8_e4m3": "F8E4M3", "float8_e8m0fnu": "F8E8M0FNU",
}


def data_type(lib, dtype: np.dtype) -> int:
    """The XLA_FFI_DataType of `dtype` (jaxlib's header's value)."""
    return getattr(lib, "XLA_FFI_DataType_" + _DATA_TYPES[np.dtype(dtype).name])


def check_types(op) -> None:
    """Refuse, when the program is planned, what no handler could be handed."""
    for role, types in (("operand", op.operand_types), ("result", op.result_types)):
        for index, value_type in enumerate(types):
            if isinstance(value_type, TokenType):
                continue
            if not isinstance(value_type, TensorType) or not value_type.is_static:
                raise op.error(f"FFI call: {role} {index} is {value_type}; XLA FFI passes tensors of "
                               "static shape and tokens", cls=Unimplemented)
            if value_type.quant is not None or np.dtype(value_type.dtype).name not in _DATA_TYPES:
                raise op.error(f"FFI call: {role} {index} has element type {value_type.element_type}, "
                               "which pjrt-ref cannot hand to a handler (sub-byte types are packed "
                               "in XLA and one per byte here)", cls=Unimplemented)


def check_layouts(op) -> None:
    """Refuse layouts other than row-major (the descending minor-to-major order)."""
    for name, types in (("operand_layouts", op.operand_types), ("result_layouts", op.result_types)):
        for index, (layout, value_type) in enumerate(zip(op.attrs.get(name, ()), types)):
            rank = len(getattr(value_type, "shape", ()))
            if [int(d) for d in layout] != list(range(rank - 1, -1, -1)):
                raise op.error(f"FFI call: {name}[{index}] is {[int(d) for d in layout]}; pjrt-ref "
                               "hands handlers row-major buffers only (the default layout, "
                               f"{list(range(rank - 1, -1, -1))})", cls=Unimplemented)


def aliases(op) -> dict[int, int]:
    """result index -> operand index, from `output_operand_aliases`."""
    return {alias.output_tuple_indices[0] if alias.output_tuple_indices else 0: alias.operand_index
            for alias in op.attrs.get("output_operand_aliases", ())}


def call_arrays(op, operands, aliased: dict[int, int]) -> tuple[list, list]:
    """(arguments, results) for one call: row-major arrays (or TOKEN), an
    aliased result being the very array of its operand (see the docstring)."""
    arguments = [value if value is TOKEN else np.ascontiguousarray(value) for value in operands]
    results = []
    for index, value_type in enumerate(op.result_types):
        if index in aliased:
            operand = aliased[index]
            arguments[operand] = np.array(arguments[operand], copy=True, order="C")
            results.append(arguments[operand])
        elif isinstance(value_type, TokenType):
            results.append(TOKEN)
        else:
            results.append(np.empty(value_type.shape, value_type.dtype))
    return arguments, results


def address(ffi, array) -> object:
    """`void*` to an array's first element; NULL for a token."""
    return ffi.NULL if array is TOKEN else ffi.cast("void*", array.ctypes.data)
