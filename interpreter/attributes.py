"""MLIR attributes -> plain Python values, once, when a program is planned.

Kernels never see MLIR objects: integer and float attributes become int and
float, array attributes tuples, dense elements numpy arrays, StableHLO enum
attributes their names ("LT", "FLOAT", ...), and dimension-number attributes
a `types.SimpleNamespace` with the spec's field names.
"""
from __future__ import annotations

import re
import weakref
from types import SimpleNamespace
from typing import Any

import numpy as np

from pjrt_ref.interpreter.types import TensorType, convert_type, is_bool, is_complex, is_float

# numpy can read these element types straight from the attribute's buffer.
_BUFFER_SAFE = {"i1", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64",
                "f16", "f32", "f64"}

_ENUM_ATTRS = ("ComparisonDirectionAttr", "ComparisonTypeAttr", "PrecisionAttr",
               "FftTypeAttr", "RngAlgorithmAttr", "RngDistributionAttr",
               "TransposeAttr")

_DIMENSION_NUMBERS = {
    "DotDimensionNumbers": ("lhs_batching_dimensions", "rhs_batching_dimensions",
                            "lhs_contracting_dimensions", "rhs_contracting_dimensions"),
    "GatherDimensionNumbers": ("offset_dims", "collapsed_slice_dims", "operand_batching_dims",
                               "start_indices_batching_dims", "start_index_map",
                               "index_vector_dim"),
    "ScatterDimensionNumbers": ("update_window_dims", "inserted_window_dims",
                                "input_batching_dims", "scatter_indices_batching_dims",
                                "scattered_dims_to_operand_dims", "index_vector_dim"),
    "ConvDimensionNumbers": ("input_batch_dimension", "input_feature_dimension",
                             "input_spatial_dimensions", "kernel_input_feature_dimension",
                             "kernel_output_feature_dimension", "kernel_spatial_dimensions",
                             "output_batch_dimension", "output_feature_dimension",
                             "output_spatial_dimensions"),
    "ChannelHandle": ("handle", "channel_type"),
    "OutputOperandAlias": ("output_tuple_indices", "operand_index", "operand_tuple_indices"),
    "ResultAccuracyAttr": ("atol", "rtol", "ulps", "mode"),
    "DotAlgorithm": ("lhs_precision_type", "rhs_precision_type", "accumulation_type",
                     "lhs_component_count", "rhs_component_count",
                     "num_primitive_operations", "allow_imprecise_accumulation"),
}


def convert_attribute(attr) -> Any:
    """Convert one MLIR attribute to a Python value (see module docstring)."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    attr = attr.maybe_downcast() if type(attr) is ir.Attribute else attr

    if isinstance(attr, ir.BoolAttr):
        return attr.value
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    if isinstance(attr, ir.FloatAttr):
        return attr.value
    if isinstance(attr, ir.StringAttr):
        return string_value(attr)
    if isinstance(attr, ir.FlatSymbolRefAttr):
        return attr.value
    if isinstance(attr, ir.UnitAttr):
        return True
    for array_kind in ("DenseI64ArrayAttr", "DenseI32ArrayAttr", "DenseI16ArrayAttr",
                       "DenseI8ArrayAttr", "DenseBoolArrayAttr", "DenseF32ArrayAttr",
                       "DenseF64ArrayAttr"):
        if isinstance(attr, getattr(ir, array_kind)):
            return tuple(attr)
    if isinstance(attr, ir.DenseElementsAttr):
        return dense_elements_to_numpy(attr)
    if isinstance(attr, ir.ArrayAttr):
        return [convert_attribute(a) for a in attr]
    if isinstance(attr, ir.DictAttr):
        return {attr[i].name: convert_attribute(attr[i].attr) for i in range(len(attr))}
    if isinstance(attr, ir.TypeAttr):
        try:
            return convert_type(attr.value)
        except ValueError:  # function types and other non-value types
            return str(attr.value)
    for enum_kind in _ENUM_ATTRS:
        cls = getattr(stablehlo, enum_kind)
        if cls.isinstance(attr):
            return cls(attr).value
    for kind, fields in _DIMENSION_NUMBERS.items():
        cls = getattr(stablehlo, kind)
        if cls.isinstance(attr):
            typed = cls(attr)
            values = {}
            for name in fields:
                value = getattr(typed, name)
                if isinstance(value, list):
                    value = tuple(value)
                elif isinstance(value, ir.Type):    # a dot algorithm's element types: "bf16", "tf32"
                    value = str(value)
                values[name] = value
            return SimpleNamespace(kind=kind, **values)
    # Anything else (sharding strings, frontend attributes, ...) stays text.
    return str(attr)


def string_value(attr) -> str:
    """A StringAttr's text. Its bytes need not be UTF-8 (a custom call's
    backend_config may be binary, and so may a damaged program's names):
    jaxlib 0.12 raises on those, so they are decoded with their odd bytes
    kept as lone surrogates, which encode back to the same bytes."""
    try:
        return attr.value
    except (RuntimeError, UnicodeDecodeError):
        return attr.value_bytes.decode("utf-8", errors="surrogateescape")


def dense_elements_to_numpy(attr) -> np.ndarray:
    """Read a DenseElementsAttr into a numpy array of the right dtype and shape."""
    from jaxlib.mlir import ir

    if isinstance(attr.type.element_type, ir.IndexType):   # e.g. XLA's `result_layout` hints
        return np.array([int(v) for v in ir.DenseIntElementsAttr(attr)], np.int64).reshape(attr.type.shape)
    ttype = convert_type(attr.type)
    assert isinstance(ttype, TensorType)
    shape = tuple(ttype.shape)
    if ttype.element_type in _BUFFER_SAFE and not attr.is_splat:
        array = np.array(attr, copy=True)
        return array.astype(ttype.dtype, copy=False).reshape(shape)
    return parse_dense_text(str(attr), ttype)


# The arrays splat_array made and that are still alive, by id: a checker
# process (bytecode_checker.py) sends each as its one value and shape. JAX's
# compile path folds broadcasts of constants into splats of the full shape,
# and a PRNG program's twenty 10^7-element splats made a 900 MB answer.
_SPLATS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def splat_array(value, shape: tuple) -> np.ndarray:
    """A constant of `shape` whose elements all equal `value` (a numpy
    scalar), held as that one value broadcast: a read-only view that costs
    no memory. Plans read it as a scalar where they can (the optimiser's
    `splat_constants`); a kernel that needs the elements calls `filled`."""
    array = np.broadcast_to(np.asarray(value), tuple(shape))
    _SPLATS[id(array)] = array
    return array


def filled(array: np.ndarray) -> np.ndarray:
    """`array` as a plain row-major array with memory of its own: a splat
    written out in full (what kernels and the host expect of a constant:
    they may hand its memory to C), any other array as it is."""
    if _SPLATS.get(id(array)) is not array:
        return array
    return np.array(array, order="C")


def splat_parts(array) -> tuple | None:
    """(value, shape) if `array` was made by splat_array, else None."""
    if _SPLATS.get(id(array)) is not array or array.size == 0:
        return None
    return array.reshape(-1)[0], array.shape


_DENSE_RE = re.compile(r"^dense<(.*)>\s*:\s*(.*)$", re.S)


def parse_dense_text(text: str, ttype: TensorType) -> np.ndarray:
    """Parse the printed form `dense<...> : tensor<...>` of a constant.

    MLIR prints large constants as one hex blob of little-endian element
    bytes and small ones as (nested) literal lists; a splat is one literal.
    """
    match = _DENSE_RE.match(text.strip())
    if not match:
        raise ValueError(f"cannot read constant {text[:80]}")
    body = match.group(1).strip()
    dtype = ttype.dtype
    shape = tuple(ttype.shape)
    if body.startswith('"0x'):
        raw = bytes.fromhex(body[3:-1])
        return _from_hex_blob(raw, dtype, shape)
    literals = _flatten_literals(body)
    values = [_parse_literal(tok, dtype) for tok in literals]
    array = np.array(values, dtype=object)
    if array.ndim > 1 and is_complex(dtype):
        array = np.array([complex(*v) for v in values], dtype=object)
    out = np.empty(len(literals), dtype=dtype)
    for i, v in enumerate(values):
        out[i] = v
    if len(literals) == 1:
        return splat_array(out[0], shape)
    return out.reshape(shape)


def _from_hex_blob(raw: bytes, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape))
    if is_bool(dtype):
        flat = np.frombuffer(raw, dtype=np.uint8).astype(bool)
    elif dtype.itemsize * 8 > 0 and dtype.name in ("int2", "int4", "uint2", "uint4",
                                                   "float4_e2m1fn", "float6_e2m3fn",
                                                   "float6_e3m2fn"):
        # Sub-byte types are stored one element per byte in MLIR's blobs.
        flat = np.frombuffer(raw, dtype=np.uint8).view(np.uint8).astype(np.uint8)
        flat = flat.view(dtype) if dtype.itemsize == 1 else flat.astype(dtype)
    else:
        flat = np.frombuffer(raw, dtype=dtype)
    if flat.size == 1 and count != 1:
        return splat_array(flat[0], shape)
    return flat[:count].copy().reshape(shape)


def _flatten_literals(body: str) -> list[str]:
    """Split a nested literal list into element tokens (complex as 'a,b')."""
    tokens: list[str] = []
    depth_paren = 0
    current = []
    for ch in body:
        if ch == "(":
            depth_paren += 1
            current.append(ch)
        elif ch == ")":
            depth_paren -= 1
            current.append(ch)
        elif ch in "[]" and depth_paren == 0:
            if "".join(current).strip():
                tokens.append("".join(current).strip())
            current = []
        elif ch == "," and depth_paren == 0:
            if "".join(current).strip():
                tokens.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        tokens.append("".join(current).strip())
    return tokens


def _parse_literal(token: str, dtype: np.dtype):
    if token.startswith("("):
        real, imag = token.strip("()").split(",")
        part = np.float32 if dtype == np.complex64 else np.float64
        return complex(_parse_literal(real.strip(), np.dtype(part)),
                       _parse_literal(imag.strip(), np.dtype(part)))
    if token in ("true", "false"):
        return token == "true"
    if token.startswith(("0x", "0X")) and is_float(dtype):
        # Floats that do not round-trip in decimal (NaN payloads, inf) print
        # as their bit pattern.
        bits = int(token, 16)
        width = dtype.itemsize
        int_dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
        return np.array(bits, dtype=int_dtype).view(dtype)[()]
    if is_float(dtype) or is_complex(dtype):
        return float(token)
    return int(token, 0)


def read_attributes(op, value_types: tuple) -> dict[str, Any]:
    """All attributes of an operation as Python values; `value_types` are its
    operands' and results' types, converted (types.py).

    jaxlib's bindings abort the process when they are handed a dense
    attribute of complex elements, so those are read from the op's printed
    (generic) form instead of through the bindings.
    """
    names = list(op.attributes)
    generic_text = None
    values: dict[str, Any] = {}
    for name in names:
        if generic_text is None and _may_hold_complex_elements(op, value_types):
            generic_text = op.get_asm(print_generic_op_form=True, enable_debug_info=False)
        text = _complex_dense_text(generic_text, name) if generic_text else None
        if text is not None:
            values[name] = _parse_dense_with_type(text, op.context)
        else:
            values[name] = convert_attribute(op.attributes[name])
    if op.name == "stablehlo.custom_call":   # typed as an XLA FFI handler sees them (ffi/attributes.py)
        from pjrt_ref.interpreter.ffi.attributes import FFI_ATTRIBUTES, custom_call_dictionary, typed_attributes
        values[FFI_ATTRIBUTES] = typed_attributes(custom_call_dictionary(op.attributes))
    return values


def _may_hold_complex_elements(op, value_types: tuple) -> bool:
    return op.name.endswith("constant_like") or any(
        t.element_type.startswith("complex<") if isinstance(t, TensorType) else "complex<" in str(t)
        for t in value_types)


def _complex_dense_text(generic_text: str, name: str) -> str | None:
    """The `dense<...> : tensor<...complex...>` text of attribute `name`, if so."""
    key = f"{name} = dense<"
    start = generic_text.find(key)
    if start < 0:
        return None
    start += len(name) + 3
    end = _matching_angle(generic_text, start + len("dense"))
    type_start = end + 1
    if not generic_text.startswith(" : ", type_start):
        return None
    type_end = _matching_angle(generic_text, generic_text.index("<", type_start))
    text = generic_text[start:type_end + 1]
    return text if "complex<" in text[end - start:] else None


def _matching_angle(text: str, open_index: int) -> int:
    depth = 0
    in_string = False
    for i in range(open_index, len(text)):
        ch = text[i]
        if ch == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced '<' in attribute text")


def _parse_dense_with_type(text: str, context) -> np.ndarray:
    from jaxlib.mlir import ir

    type_text = text[text.rindex(" : ") + 3:]
    ttype = convert_type(ir.Type.parse(type_text, context=context))
    return parse_dense_text(text, ttype)
