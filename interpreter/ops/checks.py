"""Checks of StableHLO's test files: the `check` dialect and its custom calls.

Two kinds of test file use them (see `conformance/`):

* the interpreter tests of openxla/stablehlo (`stablehlo/tests/interpret`)
  use the ops of the `check` dialect, defined in `stablehlo/tests/CheckOps.td`:
  `check.expect_eq`, `check.expect_eq_const`, `check.expect_almost_eq`,
  `check.expect_almost_eq_const`, `check.expect_close` and
  `check.expect_serialized_eq`;
* the JAX-generated files (`stablehlo/testdata`) call
  `stablehlo.custom_call @check.expect_eq / @check.expect_almost_eq /
  @check.expect_close` (and older ones `@check.eq`), which upstream's
  `stablehlo-translate --interpret` maps onto the same checks with fixed
  tolerances (`tools/StablehloTranslateMain.cpp`).

The three notions of "equal", as upstream defines them:

* equal: element-wise `==` of the values, except that two NaNs (of any
  sign or payload) are equal, as they are for the other two checks; -0 ==
  +0. (Upstream compares floats with APFloat's `==`, where NaN != NaN; it
  therefore does not interpret JAX files whose expected values hold NaNs,
  e.g. `top_k_float32_5_chlo.mlir` is RUN-DISABLED there. JAX computed
  those NaNs, so a NaN result is what the test expects.)
* almost equal within `tolerance`: equal values, or both NaN, or both
  finite with |actual - expected| <= tolerance (computed in f64).
  Complex numbers: real and imaginary parts each.
* close within [min_ulp, max_ulp]: the ULP distance (the number of
  representable values between the two) lies in the range. Bitwise-equal
  values are 0 apart, two NaNs (any payload) are 0 apart, and a non-finite
  value is infinitely far from anything it is not bitwise equal to.
  Complex numbers: the larger of the parts' distances.

A check that does not hold raises `CheckFailure`, naming the first
mismatching index, both values there and how many elements differ.

Two helpers of upstream's `interpreter` test dialect live here too, because
`check.expect_serialized_eq` reads what one of them writes:
`interpreter.probe` (save a value to the probe directory) and
`interpreter.print`.
"""
from __future__ import annotations

import csv
import itertools
import os
import threading

import numpy as np

from pjrt_ref import settings
from pjrt_ref.errors import ErrorCode, PjrtRefError, Unimplemented
from pjrt_ref.interpreter.registry import register, register_custom_call
from pjrt_ref.interpreter.types import TensorType, is_bool, is_complex, is_float, is_integer

# Upstream's defaults: CheckOps.td for the dialect ops, and
# StablehloTranslateMain.cpp for the custom calls of JAX-generated files.
DEFAULT_ALMOST_EQ_TOLERANCE = 1e-4
CUSTOM_CALL_ALMOST_EQ_TOLERANCE = 1e-3
CUSTOM_CALL_CHECK_EQ_TOLERANCE = 1e-4
DEFAULT_MAX_ULP_DIFFERENCE = 1
CUSTOM_CALL_MAX_ULP_DIFFERENCE = 3

_SUB_BYTE_INTEGERS = ("int2", "int4", "uint2", "uint4")
_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_MAX_ULP = np.iinfo(np.uint64).max


class CheckFailure(PjrtRefError):
    """A check op found the actual values differ from the expected ones."""

    code = ErrorCode.INVALID_ARGUMENT


# How many checks have passed since the last reset; the conformance runner
# reports it, so a case that "passed" without checking anything shows up.
checks_passed = 0


def reset_check_count() -> None:
    global checks_passed
    checks_passed = 0


# --- element-wise comparisons: (actual, expected) -> boolean mask of "ok" ---

def equal_elements(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Exact equality (floats: -0 == +0, and NaN == NaN)."""
    dtype = actual.dtype
    if is_complex(dtype):
        return (_equal_floats(actual.real, expected.real)
                & _equal_floats(actual.imag, expected.imag))
    if is_float(dtype):
        return _equal_floats(actual, expected)
    if dtype.name in _SUB_BYTE_INTEGERS:
        return actual.astype(np.int64) == expected.astype(np.int64)
    return actual == expected


def _equal_floats(actual, expected) -> np.ndarray:
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    return (a == e) | (np.isnan(a) & np.isnan(e))


def almost_equal_elements(actual: np.ndarray, expected: np.ndarray,
                          tolerance: float) -> np.ndarray:
    """Equal, both NaN, or finite and at most `tolerance` apart."""
    if is_complex(actual.dtype):
        return (_almost_equal_floats(actual.real, expected.real, tolerance)
                & _almost_equal_floats(actual.imag, expected.imag, tolerance))
    return _almost_equal_floats(actual, expected, tolerance)


def _almost_equal_floats(actual, expected, tolerance: float) -> np.ndarray:
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        near = np.isfinite(a) & np.isfinite(e) & (np.abs(a - e) <= tolerance)
    return (a == e) | (np.isnan(a) & np.isnan(e)) | near


def ulp_difference(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """ULP distance per element, as uint64 (see the module docstring)."""
    if is_complex(actual.dtype):
        return np.maximum(_ulp_difference_floats(actual.real, expected.real),
                          _ulp_difference_floats(actual.imag, expected.imag))
    return _ulp_difference_floats(actual, expected)


def _ulp_difference_floats(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    bits = _UINT_OF_SIZE[actual.dtype.itemsize]
    # For every float format the bits of |x|, read as an unsigned integer,
    # count the representable values between 0 and |x|.
    a = np.abs(actual).view(bits).astype(np.uint64)
    e = np.abs(expected).view(bits).astype(np.uint64)
    same_side = np.maximum(a, e) - np.minimum(a, e)
    distance = np.where(np.signbit(actual) == np.signbit(expected), same_side, a + e)
    finite = np.isfinite(actual) & np.isfinite(expected)
    both_nan = np.isnan(actual) & np.isnan(expected)
    distance = np.where(finite, distance, np.uint64(_MAX_ULP))
    bitwise_equal = actual.view(bits) == expected.view(bits)
    return np.where(bitwise_equal | both_nan, np.uint64(0), distance).astype(np.uint64)


# --- reporting ---

def _value_text(value) -> str:
    if isinstance(value, (np.bool_, bool)):
        return "true" if value else "false"
    dtype = np.asarray(value).dtype
    if is_complex(dtype):
        return f"({float(value.real)!r}, {float(value.imag)!r})"
    if is_float(dtype):
        return repr(float(value))
    return str(int(value))


def _fail(op, check: str, actual, expected, ok: np.ndarray, how: str,
          detail=None) -> None:
    """Raise CheckFailure describing the first element where `ok` is False."""
    bad = np.argwhere(~ok)
    index = tuple(int(i) for i in bad[0])
    extra = f" ({detail(index)})" if detail else ""
    raise CheckFailure(
        f"{check} failed: {len(bad)} of {ok.size} element(s) not {how}; first at index "
        f"{list(index)}: actual {_value_text(actual[index])} vs expected "
        f"{_value_text(expected[index])}{extra}",
        op=_op_name(op), location=op.location)


def _op_name(op) -> str:
    target = op.attrs.get("call_target_name") if op.name == "stablehlo.custom_call" else None
    return f"stablehlo.custom_call @{target}" if target else op.name


def _same_shape(op, check: str, actual: np.ndarray, expected: np.ndarray) -> None:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise CheckFailure(
            f"{check} failed: actual is {actual.dtype}{list(actual.shape)}, expected is "
            f"{expected.dtype}{list(expected.shape)}", op=_op_name(op), location=op.location)


def check_equal(op, actual, expected, check: str = "expect_eq") -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    _same_shape(op, check, actual, expected)
    ok = equal_elements(actual, expected)
    if not ok.all():
        _fail(op, check, actual, expected, ok, "equal")
    _count_pass()


def check_almost_equal(op, actual, expected, tolerance: float,
                       check: str = "expect_almost_eq") -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    _same_shape(op, check, actual, expected)
    ok = almost_equal_elements(actual, expected, tolerance)
    if not ok.all():
        _fail(op, check, actual, expected, ok, f"equal within tolerance {tolerance:g}")
    _count_pass()


def check_close(op, actual, expected, min_ulp: int, max_ulp: int,
                check: str = "expect_close") -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    _same_shape(op, check, actual, expected)
    distance = ulp_difference(actual, expected)
    ok = (distance >= np.uint64(min_ulp)) & (distance <= np.uint64(max_ulp))
    if not ok.all():
        _fail(op, check, actual, expected, ok,
              f"within {min_ulp}..{max_ulp} ULP",
              detail=lambda index: f"ULP difference {_ulp_text(distance[index])}")
    _count_pass()


def _ulp_text(distance) -> str:
    return "infinite" if int(distance) == _MAX_ULP else str(int(distance))


def _count_pass() -> None:
    global checks_passed
    checks_passed += 1


# --- validation (load time) ---

def _require_float_or_complex(op, check: str) -> None:
    for ttype in op.operand_types:
        if isinstance(ttype, TensorType) and not (is_float(ttype.dtype) or is_complex(ttype.dtype)):
            raise op.error(f"{check} needs floating-point or complex tensors, got {ttype}")


def _require_same_types(op, check: str) -> None:
    types = op.operand_types
    if len(types) != 2:
        raise op.error(f"{check} takes 2 operands, got {len(types)}")
    if any(not isinstance(t, TensorType) for t in types):
        raise op.error(f"{check} compares tensors, got {', '.join(map(str, types))}")
    if types[0].shape != types[1].shape or types[0].dtype != types[1].dtype:
        raise op.error(f"{check} operands differ in type: {types[0]} vs {types[1]}")


def _validate_pair(op) -> None:
    _require_same_types(op, op.name)


def _validate_float_pair(op) -> None:
    _require_same_types(op, op.name)
    _require_float_or_complex(op, op.name)


def _validate_float(op) -> None:
    _require_float_or_complex(op, op.name)


# --- the check dialect (interpreter-test files) ---

@register("check.expect_eq", validate=_validate_pair)
def expect_eq(op, actual, expected):
    """CheckOps.td "expect_eq": the operands are exactly equal."""
    check_equal(op, actual, expected, "check.expect_eq")
    return ()


@register("check.expect_eq_const")
def expect_eq_const(op, actual):
    """CheckOps.td "expect_eq_const": the operand equals the `value` attribute."""
    check_equal(op, actual, op.attrs["value"], "check.expect_eq_const")
    return ()


@register("check.expect_almost_eq", validate=_validate_float_pair)
def expect_almost_eq(op, actual, expected):
    """CheckOps.td "expect_almost_eq": equal within `tolerance` (default 1e-4)."""
    tolerance = op.attrs.get("tolerance", DEFAULT_ALMOST_EQ_TOLERANCE)
    check_almost_equal(op, actual, expected, tolerance, "check.expect_almost_eq")
    return ()


@register("check.expect_almost_eq_const", validate=_validate_float)
def expect_almost_eq_const(op, actual):
    """CheckOps.td "expect_almost_eq_const": `value` within `tolerance` (1e-4)."""
    tolerance = op.attrs.get("tolerance", DEFAULT_ALMOST_EQ_TOLERANCE)
    check_almost_equal(op, actual, op.attrs["value"], tolerance, "check.expect_almost_eq_const")
    return ()


@register("check.expect_close", validate=_validate_float_pair)
def expect_close(op, actual, expected):
    """CheckOps.td "expect_close": min_ulp_difference <= ULP distance <=
    max_ulp_difference (defaults 0 and 1)."""
    check_close(op, actual, expected,
                op.attrs.get("min_ulp_difference", 0),
                op.attrs.get("max_ulp_difference", DEFAULT_MAX_ULP_DIFFERENCE),
                "check.expect_close")
    return ()


@register("check.expect_serialized_eq")
def expect_serialized_eq(op, actual):
    """CheckOps.td "expect_serialized_eq": the operand equals the tensor that
    `interpreter.probe` serialized under `probe_id` at iteration `iteration`
    (the iteration-th probe of that id; default 0), with the same type."""
    probe_id = op.attrs["probe_id"]
    iteration = op.attrs.get("iteration", 0)
    mlir_type, path = _probe_record(op, _probe_directory(op), probe_id, iteration)
    ttype = op.operand_types[0]
    if mlir_type != str(ttype):
        raise CheckFailure(f"serialized type {mlir_type} differs from {ttype} for probe "
                           f"{probe_id}", op=op.name, location=op.location)
    check_equal(op, actual, _load_probe(path, ttype), "check.expect_serialized_eq")
    return ()


# --- the interpreter dialect's test helpers (InterpreterOps.td) ---

_probe_lock = threading.Lock()
_probe_files = itertools.count()
probe_directory: str | None = None  # set by the conformance runner per case


@register("interpreter.probe")
def probe(op, operand):
    """InterpreterOps.td "probe": save the operand as `probe<n>.npy` in the
    probe directory, append `probe_id,type,path` to its `index.csv`, and
    return the operand unchanged."""
    directory = _probe_directory(op)
    with _probe_lock:
        path = os.path.join(directory, f"probe{next(_probe_files)}.npy")
        np.save(path, _savable(operand), allow_pickle=False)
        with open(os.path.join(directory, "index.csv"), "a", newline="") as index_file:
            csv.writer(index_file).writerow([op.attrs["probe_id"], str(op.operand_types[0]), path])
    return operand


@register("interpreter.print")
def print_value(op, operand):
    """InterpreterOps.td "print": print the operand's type and value."""
    with _probe_lock:
        print(f"{op.operand_types[0]} {np.array2string(np.asarray(operand), separator=', ')}",
              flush=True)
    return ()


def _probe_directory(op) -> str:
    # Where `check.expect_serialized_eq` finds the tensors `interpreter.probe`
    # wrote (upstream: stablehlo-translate's --probe-output-dir).
    directory = probe_directory or settings.get("PJRT_REF_PROBE_DIR")
    if not directory:
        raise op.error("needs a probe output directory (set PJRT_REF_PROBE_DIR)",
                       cls=Unimplemented)
    return directory


def _savable(array: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays are saved as their bits (plain .npy has no bf16)."""
    array = np.asarray(array)
    if array.dtype.kind in "biufc":  # ml_dtypes' types are kind "V"
        return array
    return array.view(_UINT_OF_SIZE[array.dtype.itemsize])


def _load_probe(path: str, ttype: TensorType) -> np.ndarray:
    loaded = np.load(path, allow_pickle=False)
    if loaded.dtype != ttype.dtype:
        loaded = loaded.view(ttype.dtype)
    return loaded.reshape(ttype.shape)


def _probe_record(op, directory: str, probe_id: str, iteration: int) -> tuple[str, str]:
    try:
        with open(os.path.join(directory, "index.csv"), newline="") as index_file:
            matches = [row for row in csv.reader(index_file)
                       if len(row) == 3 and row[0] == probe_id]
    except OSError as error:
        raise op.error(f"cannot read the probe index: {error}") from None
    if iteration >= len(matches):
        raise op.error(f"no serialized data for probe {probe_id} at iteration {iteration}")
    return matches[iteration][1], matches[iteration][2]


# --- custom calls (JAX-generated files) ---

def _validate_custom_pair(op) -> None:
    _require_same_types(op, f"@{op.attrs.get('call_target_name')}")


def _validate_custom_float_pair(op) -> None:
    _require_same_types(op, f"@{op.attrs.get('call_target_name')}")
    _require_float_or_complex(op, f"@{op.attrs.get('call_target_name')}")


@register_custom_call("check.expect_eq", validate=_validate_custom_pair)
def custom_call_expect_eq(op, actual, expected):
    """`@check.expect_eq`: as the dialect op `check.expect_eq`."""
    check_equal(op, actual, expected, "check.expect_eq")
    return ()


@register_custom_call("check.expect_almost_eq", validate=_validate_custom_float_pair)
def custom_call_expect_almost_eq(op, actual, expected):
    """`@check.expect_almost_eq`: almost equal with upstream's tolerance 1e-3."""
    check_almost_equal(op, actual, expected, CUSTOM_CALL_ALMOST_EQ_TOLERANCE,
                       "check.expect_almost_eq")
    return ()


@register_custom_call("check.expect_close", validate=_validate_custom_float_pair)
def custom_call_expect_close(op, actual, expected):
    """`@check.expect_close`: at most 3 ULP apart (upstream's fixed limit)."""
    check_close(op, actual, expected, 0, CUSTOM_CALL_MAX_ULP_DIFFERENCE, "check.expect_close")
    return ()


@register_custom_call("check.eq", validate=_validate_custom_pair)
def custom_call_check_eq(op, actual, expected):
    """`@check.eq` (older generated files): equal for integer and boolean
    tensors, almost equal (1e-4) otherwise; returns a true i1 tensor."""
    dtype = np.asarray(actual).dtype
    if is_integer(dtype) or is_bool(dtype):
        check_equal(op, actual, expected, "check.eq")
    else:
        check_almost_equal(op, actual, expected, CUSTOM_CALL_CHECK_EQ_TOLERANCE, "check.eq")
    if not op.result_types:
        return ()
    return np.ones(op.result_types[0].shape, dtype=np.bool_)
