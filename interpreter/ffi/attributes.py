"""An FFI call's attributes, typed as the handler will see them.

The interpreter's usual conversion (interpreter/attributes.py) makes plain
Python values, which forget an integer's width and a float's precision. An
XLA FFI handler decodes each attribute by its exact type, so a custom call's
attribute dictionary is also read here, once, when the program is planned,
following XLA's rules (xla/ffi/attribute_map.cc, `BuildAttributesMap`):

    BoolAttr                          scalar PRED          numpy bool_
    IntegerAttr i8..i64, ui8..ui64    scalar S8..U64       numpy integer
    FloatAttr f32, f64                scalar F32, F64      numpy float32/64
    array<i8|i16|i32|i64|f32|f64: >   array                1-D numpy array
    dense<...> : tensor<..x int/f32/f64>  array (flattened)  1-D numpy array
    StringAttr                        string               bytes
    DictAttr                          dictionary           dict

Anything else (UnitAttr, ArrayAttr, f16 scalars, `array<i1: >`...) XLA
refuses; here it becomes an `Unsupported` marker, and only a call that
reaches an FFI handler fails with it (jaxlib's own targets in the
interpreter read the plain conversion instead).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pjrt_ref.interpreter.attributes import dense_elements_to_numpy

# The key under which read_attributes keeps a custom call's typed attributes.
FFI_ATTRIBUTES = "pjrt_ref.ffi_attributes"

_DENSE_ARRAYS = {"DenseI8ArrayAttr": np.int8, "DenseI16ArrayAttr": np.int16,
                 "DenseI32ArrayAttr": np.int32, "DenseI64ArrayAttr": np.int64,
                 "DenseF32ArrayAttr": np.float32, "DenseF64ArrayAttr": np.float64}
_ARRAY_ELEMENTS = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                         np.uint32, np.uint64, np.float32, np.float64)}


class Unsupported(NamedTuple):
    """An attribute XLA FFI cannot pass to a handler."""
    text: str


def custom_call_dictionary(op_attributes):
    """The attribute dictionary of a typed-FFI custom call: `backend_config`
    (api_version 4) or JAX's `mhlo.backend_config` (api_version 1); None if
    the op has neither as a dictionary (a legacy call's string config)."""
    from jaxlib.mlir import ir
    for name in ("backend_config", "mhlo.backend_config"):
        if name in op_attributes:
            attr = op_attributes[name].maybe_downcast()
            if isinstance(attr, ir.DictAttr):
                return attr
    return None


def typed_attributes(dictionary) -> dict[str, Any]:
    """`dictionary` (an MLIR DictAttr) as name -> typed value (see the module docstring)."""
    if dictionary is None:
        return {}
    return {dictionary[i].name: typed_value(dictionary[i].attr) for i in range(len(dictionary))}


def typed_value(attr) -> Any:
    """One attribute's typed value; `Unsupported` for what XLA FFI cannot pass
    (never an exception: the op may be served by a target that reads none)."""
    try:
        return _typed_value(attr)
    except (ValueError, TypeError, RuntimeError):
        return Unsupported(str(attr))


def _typed_value(attr) -> Any:
    from jaxlib.mlir import ir
    attr = attr.maybe_downcast()
    if isinstance(attr, ir.BoolAttr):
        return np.bool_(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return _integer(attr)
    if isinstance(attr, ir.FloatAttr):
        width = {"f32": np.float32, "f64": np.float64}.get(str(attr.type))
        return width(attr.value) if width else Unsupported(str(attr))
    for kind, dtype in _DENSE_ARRAYS.items():
        if isinstance(attr, getattr(ir, kind)):
            return np.array(list(attr), dtype)
    if isinstance(attr, ir.DenseElementsAttr):
        return _dense_elements(attr)
    if isinstance(attr, ir.StringAttr):
        return attr.value_bytes
    if isinstance(attr, ir.DictAttr):
        return typed_attributes(attr)
    return Unsupported(str(attr))


def _integer(attr):
    from jaxlib.mlir import ir
    integer_type = ir.IntegerType(attr.type)
    if integer_type.width not in (8, 16, 32, 64):
        return Unsupported(str(attr))
    prefix = "uint" if integer_type.is_unsigned else "int"
    return np.dtype(f"{prefix}{integer_type.width}").type(attr.value)


def _dense_elements(attr):
    if "complex" in str(attr.type):   # jaxlib's bindings abort on complex dense elements
        return Unsupported(str(attr))
    try:
        array = dense_elements_to_numpy(attr)
    except (ValueError, TypeError):
        return Unsupported(str(attr))
    if array.dtype not in _ARRAY_ELEMENTS:
        return Unsupported(str(attr))
    return np.ascontiguousarray(array.reshape(-1))
