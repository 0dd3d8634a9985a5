"""Float products in compiled loops, by the BLAS call numpy itself makes.

A float dot_general's bits are those of the BLAS kernel that sums it, and
the kernel depends on the CPU, so a compiled loop cannot sum the products
itself (tensor_ops.py). Until this module such an op was handed back to
the interpreter (hand_back.py): about 20 µs of object mode and numpy calls
per iteration for an 8x8 product that XLA does in 0.1 µs (W13 in
benchmarks/README.md).

But the interpreter's kernel for a small product (ops/dot.py's
matrix_product; one block in native/blocks.py) is one np.matmul call, and
numpy's matmul makes one BLAS call chosen from the shapes and strides
alone. `numpy_call` says which, for the operands as a compiled loop holds
them (flat, row-major, as hand_back.py gives them to the kernel); the loop
then makes that call through a pointer to numpy's own OpenBLAS
(openblas.py), passed to the numba kernel as an argument, so the kernel
stays cacheable. numpy's choice for (M, K) @ (K, N) into a fresh
row-major result (numpy/_core/src/umath/matmul.c.src, numpy 2.x):

    M = N = 1            a dot product: ?dot
    N = 1, K > 1         matrix @ vector: ?gemv, transposed, on the matrix
                         read column-major if its rows are contiguous
    M = 1, K > 1         vector @ matrix: the same with the operands swapped
    M, K, N > 1          ?gemm, each operand transposed or not by its strides

Nothing else is mirrored (K = 1, strides BLAS cannot read, which numpy
copies or loops over itself, and a matrix times its own transpose, where
numpy calls ?syrk): such a product is still handed back.

`agrees(call)` runs a call through ctypes against the interpreter's own
kernel on random operands, once per call shape in a process, before a
loop may use it (Translator.verified): a numpy or BLAS that chooses
otherwise fails the probe, and the op is handed back as before.
"""
from __future__ import annotations

import ctypes
import functools
import math
from dataclasses import dataclass

import numpy as np

from pjrt_ref.interpreter import registry
from pjrt_ref.interpreter.native import hand_back, openblas

ROW_MAJOR, COLUMN_MAJOR = 101, 102          # CBLAS_ORDER
NO_TRANSPOSE, TRANSPOSE = 111, 112          # CBLAS_TRANSPOSE
PREFIXES = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}
SCALARS = {np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double}


@dataclass(frozen=True)
class Call:
    """One BLAS call computing a product: the routine ("gemv", "gemm",
    "dot"), its integer and flag arguments in cblas order, and which
    operand goes first (`swapped`: the rhs, as numpy passes vector @ matrix)."""

    routine: str
    dtype: np.dtype
    arguments: tuple
    swapped: bool = False

    @property
    def name(self) -> str:
        return f"cblas_{PREFIXES[self.dtype]}{self.routine}"


def _blasable(row_step: int, column_step: int, rows: int, columns: int, itemsize: int) -> bool:
    """numpy's is_blasable2d (byte steps): columns contiguous, rows a whole
    number of elements apart and at least a row's length."""
    return column_step == itemsize and row_step % itemsize == 0 and row_step // itemsize >= columns


def _either_order(steps, rows: int, columns: int, itemsize: int) -> bool:
    """Whether BLAS reads a (rows, columns) matrix of these byte `steps`
    as it is or transposed."""
    row_step, column_step = steps
    return (_blasable(row_step, column_step, rows, columns, itemsize)
            or _blasable(column_step, row_step, columns, rows, itemsize))


def _gemv(matrix_steps, vector_step: int, rows: int, inner: int, itemsize: int) -> tuple:
    """numpy's ?gemv arguments for a (rows, inner) matrix times a vector:
    (order, trans, N, M, lda, incx, incy)."""
    row_step, column_step = matrix_steps
    if _blasable(row_step, column_step, rows, inner, itemsize):
        order, lda = COLUMN_MAJOR, row_step // itemsize
    else:
        order, lda = ROW_MAJOR, column_step // itemsize
    return (order, TRANSPOSE, inner, rows, lda, vector_step // itemsize, 1)


def _gemm_operand(steps, rows: int, columns: int, itemsize: int) -> tuple:
    """(trans, leading dimension) of one ?gemm operand, as numpy picks them."""
    row_step, column_step = steps
    if _blasable(row_step, column_step, rows, columns, itemsize):
        return NO_TRANSPOSE, row_step // itemsize
    return TRANSPOSE, column_step // itemsize


def numpy_call(a_steps, b_steps, rows: int, inner: int, columns: int, dtype) -> Call | None:
    """The BLAS call numpy's matmul makes for a (rows, inner) matrix of
    byte steps `a_steps` (its strides) times an (inner, columns) one of
    `b_steps`, into a fresh row-major result; None where numpy does not
    make exactly one such call (the module docstring)."""
    dtype = np.dtype(dtype)
    size = dtype.itemsize
    if dtype not in PREFIXES or 0 in (rows, inner, columns):
        return None
    a_row_step, a_column_step = a_steps
    b_row_step, b_column_step = b_steps
    if rows == 1 and columns == 1:                       # row @ column: ?dot
        if min(a_column_step, b_row_step) <= 0 or a_column_step % size or b_row_step % size:
            return None
        return Call("dot", dtype, (inner, a_column_step // size, b_row_step // size))
    if inner == 1:                                       # numpy's own loop
        return None
    if rows == 1:                                        # vector @ matrix: ?gemv on b
        if not (_either_order(b_steps, inner, columns, size) and _blasable(a_column_step, size, inner, 1, size)):
            return None
        return Call("gemv", dtype, _gemv((b_column_step, b_row_step), a_column_step, columns, inner, size),
                    swapped=True)
    if columns == 1:                                     # matrix @ vector: ?gemv on a
        if not (_either_order(a_steps, rows, inner, size) and _blasable(b_row_step, size, inner, 1, size)):
            return None
        return Call("gemv", dtype, _gemv(a_steps, b_row_step, rows, inner, size))
    if not (_either_order(a_steps, rows, inner, size) and _either_order(b_steps, inner, columns, size)):
        return None                                      # numpy copies first
    trans_a, lda = _gemm_operand(a_steps, rows, inner, size)
    trans_b, ldb = _gemm_operand(b_steps, inner, columns, size)
    return Call("gemm", dtype, (ROW_MAJOR, trans_a, trans_b, rows, columns, inner, lda, ldb, columns))


def operand_layout(lhs_shape, rhs_shape, numbers, dtype) -> tuple | None:
    """((a strides, b strides), (M, K, N)) of the matrices ops/dot.py's
    matrix_product multiplies (blas.matrix_operands) for row-major operands of these shapes, if
    both are views of the operands (no copy) with no batch dimensions; else None."""
    from pjrt_ref.interpreter.native.blas import matrix_operands

    if numbers.lhs_batching_dimensions or numbers.rhs_batching_dimensions:
        return None
    lhs, rhs = np.empty(lhs_shape, dtype), np.empty(rhs_shape, dtype)
    lhs_contract, rhs_contract = numbers.lhs_contracting_dimensions, numbers.rhs_contracting_dimensions
    lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract]
    rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contract]
    a, b, _ = matrix_operands(lhs, rhs, lhs_free, rhs_free, lhs_contract, rhs_contract)
    if not (_same_memory(a, lhs) and _same_memory(b, rhs)):
        return None
    return (a.strides, b.strides), (a.shape[0], a.shape[1], b.shape[1])


def _same_memory(view: np.ndarray, array: np.ndarray) -> bool:
    return view.__array_interface__["data"][0] == array.__array_interface__["data"][0] and \
        np.shares_memory(view, array)


def plan(op) -> Call | None:
    """The call computing dot_general `op` in a compiled loop, or None
    (handed back, or interpreted if big): f32 or f64 operands and result of
    one type, no bigger than hand_back.MAX_PRODUCT_OPERAND, a product the
    interpreter makes as one np.matmul call (one block, native/blocks.py),
    laid out as numpy would give it to BLAS directly."""
    from pjrt_ref.interpreter.native import blas

    numbers = op.attrs.get("dot_dimension_numbers")
    lhs_type, rhs_type = op.operand_types
    dtype = op.result_types[0].dtype
    if numbers is None or not (lhs_type.dtype == rhs_type.dtype == dtype) or dtype not in PREFIXES:
        return None
    if any(math.prod(t.shape) > hand_back.MAX_PRODUCT_OPERAND for t in op.operand_types):
        return None     # the interpreted loop's rewrites pay off there (hand_back.py)
    layout = operand_layout(lhs_type.shape, rhs_type.shape, numbers, dtype)
    if layout is None:
        return None
    (a_strides, b_strides), (rows, inner, columns) = layout
    if blas.product_blocks(rows, inner, columns).count != 1:
        return None
    return numpy_call(a_strides, b_strides, rows, inner, columns, dtype)


@functools.cache
def function(name: str, dtype) -> object | None:
    """numpy's OpenBLAS function `name` as a typed ctypes function, or None."""
    found = openblas.find()
    entry = None if found is None else found.cblas(name)
    if entry is None:
        return None
    address, integer = ctypes.cast(entry[0], ctypes.c_void_p).value, entry[1]
    scalar, pointer = SCALARS[np.dtype(dtype)], ctypes.c_void_p
    prototypes = {
        "gemv": (None, ctypes.c_int, ctypes.c_int, integer, integer, scalar, pointer, integer, pointer,
                 integer, scalar, pointer, integer),
        "gemm": (None, ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, scalar,
                 pointer, integer, pointer, integer, scalar, pointer, integer),
        "dot": (scalar, integer, pointer, integer, pointer, integer),
    }
    routine = name[len("cblas_") + 1:]
    return ctypes.CFUNCTYPE(*prototypes[routine])(address)


def _arguments(call: Call, first, second, out, one, zero) -> list:
    """`call`'s arguments in cblas order, given its operands, output, 1 and
    0 (values for ctypes, or source text for numba); ?dot has no output."""
    if call.routine == "dot":
        count, first_step, second_step = call.arguments
        return [count, first, first_step, second, second_step]
    if call.routine == "gemv":
        order, trans, n, m, lda, incx, incy = call.arguments
        return [order, trans, n, m, one, first, lda, second, incx, zero, out, incy]
    order, trans_a, trans_b, m, n, k, lda, ldb, ldc = call.arguments
    return [order, trans_a, trans_b, m, n, k, one, first, lda, second, ldb, zero, out, ldc]


def _operands(call: Call, lhs, rhs) -> tuple:
    """(first, second) as the routine takes them (vector @ matrix: swapped)."""
    return (rhs, lhs) if call.swapped else (lhs, rhs)


def call_source(call: Call, function_name: str, lhs: str, rhs: str, out: str) -> str:
    """A line of numba source making `call` on flat arrays `lhs` and `rhs`
    into `out` (for "dot", `out` is a scalar assigned the result)."""
    cast = "float32" if call.dtype == np.float32 else "float64"
    first, second = _operands(call, lhs, rhs)
    arguments = _arguments(call, f"{first}.ctypes.data", f"{second}.ctypes.data", f"{out}.ctypes.data",
                           f"{cast}(1)", f"{cast}(0)")
    line = f"{function_name}({', '.join(map(str, arguments))})"
    return f"{out} = {line}" if call.routine == "dot" else line


def run(call: Call, lhs: np.ndarray, rhs: np.ndarray, out_size: int) -> np.ndarray:
    """`call` on flat contiguous operands through ctypes: what the compiled
    line computes, for the probe."""
    first, second = _operands(call, lhs, rhs)
    out = np.zeros(out_size, call.dtype)
    result = function(call.name, call.dtype)(*_arguments(call, first.ctypes.data, second.ctypes.data,
                                                         out.ctypes.data, 1, 0))
    if call.routine == "dot":
        out[0] = result
    return out


# Random operands per probe; each must give the interpreter's bits.
PROBE_DRAWS = 8


def probe_key(op, call: Call) -> tuple:
    """What a probe's verdict holds for: the call and the op's shapes and
    contracting dimensions (also the key a failed product is handed back by)."""
    numbers = op.attrs["dot_dimension_numbers"]
    return ("product", call, tuple(t.shape for t in op.operand_types),
            tuple(numbers.lhs_contracting_dimensions), tuple(numbers.rhs_contracting_dimensions))


def agrees(op, call: Call) -> bool:
    """Whether `call` gives the interpreter's dot_general bits for `op`'s
    shapes on this machine: PROBE_DRAWS random operands of mixed signs and
    magnitudes (sums that cancel), compared bit for bit. Cached per
    probe_key."""
    return _agrees(probe_key(op, call), op)


_VERDICTS: dict = {}


def _agrees(key, op) -> bool:
    if key in _VERDICTS:
        return _VERDICTS[key]
    call = key[1]
    verdict = function(call.name, call.dtype) is not None
    lhs_type, rhs_type = op.operand_types
    out_size = math.prod(op.result_types[0].shape)
    generator = np.random.default_rng(0)
    for _ in range(PROBE_DRAWS if verdict else 0):
        lhs, rhs = (generator.standard_normal(t.shape) * 2.0 ** generator.integers(-20, 20, t.shape)
                    for t in (lhs_type, rhs_type))
        lhs, rhs = lhs.astype(call.dtype), rhs.astype(call.dtype)
        expected = np.asarray(registry.lookup(op.name).fn(op, lhs, rhs)).reshape(-1)   # ops/dot.py
        got = run(call, lhs.reshape(-1), rhs.reshape(-1), out_size)
        if not np.array_equal(expected.view(f"u{call.dtype.itemsize}"), got.view(f"u{call.dtype.itemsize}")):
            verdict = False
    _VERDICTS[key] = verdict
    return verdict


def translate(t, step, operands, key) -> None:
    """Compute float dot_general `step` in a compiled loop (a Translator
    `t`) by the BLAS call numpy makes for it, into an array refilled each
    iteration (Translator.refilled). NotCompilable
    (the op is handed back) where numpy makes another call, the operands
    are one value (numpy may then call ?syrk), no OpenBLAS is found, or the
    probe failed here (`t.handed_back`)."""
    from pjrt_ref.interpreter.native.translator import SCALAR, NotCompilable

    op = step.op
    call = plan(op)
    if call is None or operands[0] == operands[1]:
        raise NotCompilable("a float product numpy makes otherwise than by one BLAS call")
    if probe_key(op, call) in t.handed_back:
        raise NotCompilable("its BLAS call differs from numpy's product here")
    blas_function = function(call.name, call.dtype)
    if blas_function is None:
        raise NotCompilable("no OpenBLAS of numpy's to call")
    lhs, rhs = (t.array(k, ttype) for k, ttype in zip(operands, op.operand_types))
    result = op.result_types[0]
    kind = t.kind_of(result.shape)
    parameter = t.external(call.name, blas_function)
    if kind is SCALAR:
        name = t.fresh("v")
        lines = [call_source(call, parameter, lhs, rhs, name)]
    else:
        name = t.refillable(math.prod(result.shape), result.dtype)
        target = f"{name}[0]" if call.routine == "dot" else name
        lines = [call_source(call, parameter, lhs, rhs, target)]
    t.statement(lines, [lhs, rhs])
    t.product_checks.append((op, call))
    t.define(key, name, kind, result.dtype)
