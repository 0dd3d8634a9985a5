"""Float64 transcendentals in compiled loops, by numpy's own inner loop.

The interpreter computes exp, log, sine, tanh, ... with numpy's float64
functions, and where numpy has SIMD versions of its own for the CPU, libm's
differ from them in the last bit now and then (float64_math.py): a compiled
loop cannot call libm for them. Until this module such an op was handed
back to the interpreter in object mode (hand_back.py), about 6 µs per
iteration for a tanh of 8 elements that XLA does in 0.06 µs (W13).

But the interpreter's function is itself one C function: the inner loop
numpy's ufunc keeps for float64 (`PyUFuncObject.functions`, the public
struct of numpy/ufuncobject.h), already chosen for this CPU when numpy was
imported. The compiled loop calls that function through its address,
passed to the numba kernel as an argument (so the kernel stays cacheable),
on the whole operand once per iteration: the interpreter's bits by
construction. `agrees` still runs it through ctypes against the
interpreter's kernel on float64_math's 2^20 probe inputs before a loop may
use it, so a numpy whose struct or loops differ hands the op back as before.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from pjrt_ref.interpreter import registry
from pjrt_ref.interpreter.native.float64_math import F64, probe_inputs
from pjrt_ref.interpreter.steps import OpInfo
from pjrt_ref.interpreter.types import TensorType

# ops whose interpreter kernel is this numpy ufunc on float64 (ops/elementwise_unary.py)
UFUNCS = {
    "stablehlo.exponential": np.exp,
    "stablehlo.exponential_minus_one": np.expm1,
    "stablehlo.log": np.log,
    "stablehlo.log_plus_one": np.log1p,
    "stablehlo.sine": np.sin,
    "stablehlo.cosine": np.cos,
    "stablehlo.tanh": np.tanh,
}

# PyUFuncObject (numpy/ufuncobject.h): after PyObject_HEAD, int nin, nout,
# nargs, identity; then the loops, their data, int ntypes, int reserved1,
# the name and the type numbers of each loop's arguments.
_HEAD = object.__basicsize__            # PyObject_HEAD, larger in free-threaded builds
_POINTER = ctypes.sizeof(ctypes.c_void_p)
_INT = ctypes.sizeof(ctypes.c_int)
_NARGS = _HEAD + 2 * _INT
_FUNCTIONS = _HEAD + 4 * _INT
_DATA = _FUNCTIONS + _POINTER
_NTYPES = _DATA + _POINTER
_NAME = _NTYPES + 2 * _INT
_TYPES = _NAME + _POINTER

# void loop(char **args, npy_intp const *dimensions, npy_intp const *steps, void *data)
LOOP = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


@functools.cache
def loop_function(op_name: str):
    """numpy's float64 -> float64 inner loop for `op_name`, as a ctypes
    function, or None (no such op, no such loop, or one that needs its
    data pointer)."""
    ufunc = UFUNCS.get(op_name)
    if ufunc is None or ufunc.nin != 1 or ufunc.nout != 1:
        return None
    base = id(ufunc)
    nargs = ctypes.c_int.from_address(base + _NARGS).value
    ntypes = ctypes.c_int.from_address(base + _NTYPES).value
    if nargs != 2 or not 0 < ntypes < 256 or not _named(base, ufunc.__name__):
        return None             # not the struct this module reads
    types = ctypes.string_at(ctypes.c_void_p.from_address(base + _TYPES).value, ntypes * nargs)
    wanted = bytes([F64.num, F64.num])
    for index in range(ntypes):
        if types[index * nargs:(index + 1) * nargs] == wanted:
            functions = ctypes.c_void_p.from_address(base + _FUNCTIONS).value
            data = ctypes.c_void_p.from_address(base + _DATA).value
            if data and ctypes.c_void_p.from_address(data + index * _POINTER).value:
                return None
            address = ctypes.c_void_p.from_address(functions + index * _POINTER).value
            return LOOP(address) if address else None
    return None


def _named(base: int, name: str) -> bool:
    """Whether the struct at `base` holds the ufunc's own name where the
    layout says: the layout is numpy's, and the pointers after it can be read."""
    pointer = ctypes.c_void_p.from_address(base + _NAME).value
    return bool(pointer) and ctypes.string_at(pointer, len(name) + 1) == name.encode() + b"\0"


def run(function, values: np.ndarray) -> np.ndarray:
    """`function` on contiguous float64 `values` through ctypes, as the
    compiled line calls it."""
    values = np.ascontiguousarray(values, F64)
    out = np.empty_like(values)
    pointers = (ctypes.c_void_p * 2)(values.ctypes.data, out.ctypes.data)
    sizes = (ctypes.c_ssize_t * 1)(values.size)
    steps = (ctypes.c_ssize_t * 2)(F64.itemsize, F64.itemsize)
    function(pointers, sizes, steps, None)
    return out


@functools.cache
def agrees(op_name: str) -> bool:
    """Whether numpy's loop, called by address, gives the interpreter's
    float64 bits for `op_name` on float64_math's probe inputs (NaNs as NaNs)."""
    function = loop_function(op_name)
    if function is None:
        return False
    inputs = probe_inputs()
    ttype = TensorType(shape=inputs.shape, dtype=F64, element_type="f64")
    op = OpInfo(name=op_name, location="numpy_loops.agrees", attrs={}, operand_types=(ttype,),
                result_types=(ttype,))
    with np.errstate(all="ignore"):
        expected = np.asarray(registry.lookup(op_name).fn(op, inputs))
        got = run(function, inputs)
    same = got.view(np.uint64) == expected.view(np.uint64)
    return bool(np.all(same | (np.isnan(got) & np.isnan(expected))))


def translate(t, step, operands, key) -> bool:
    """Compute float64 `step` in a compiled loop (Translator `t`) by
    numpy's own loop on the whole operand, into a new array each iteration
    (or a scalar); False if it does not apply here (then it is handed back)."""
    from pjrt_ref.interpreter.native.translator import SCALAR

    op = step.op
    if op.name not in UFUNCS or len(operands) != 1:
        return False
    if not (op.operand_types[0].dtype == op.result_types[0].dtype == F64) or not agrees(op.name):
        return False
    parameter = t.external(f"numpy_{op.name.rsplit('.', 1)[1]}_f64", loop_function(op.name))
    (operand,) = operands
    name, kind = t.value(operand, op.operand_types[0])
    size = int(np.prod(op.result_types[0].shape, dtype=np.int64))
    arguments, extents, steps = t.scratch(2, np.dtype(np.int64)), t.scratch(1, np.dtype(np.int64)), \
        t.scratch(2, np.dtype(np.int64))
    if kind is SCALAR:
        result = t.fresh("v")
        source, target = t.scratch(1, F64), t.scratch(1, F64)
        lines = [f"{source}[0] = {name}"]
        reads = []
    else:
        source = t.array(operand, op.operand_types[0])
        target = result = t.refillable(size, F64)
        lines = []
        reads = [source]
    lines += [f"{arguments}[0] = {source}.ctypes.data", f"{arguments}[1] = {target}.ctypes.data",
              f"{extents}[0] = {size}", f"{steps}[0] = 8", f"{steps}[1] = 8",
              f"{parameter}({arguments}.ctypes.data, {extents}.ctypes.data, {steps}.ctypes.data, 0)"]
    if kind is SCALAR:
        lines.append(f"{result} = {target}[0]")
    t.statement(lines, reads)
    t.define(key, result, t.kind_of(op.result_types[0].shape), F64)
    return True
