"""The oracle of the CHLO tests: XLA CPU itself, fed StableHLO/CHLO text.

JAX emits only some CHLO ops (tan, conj, is_inf, constant_like and the
broadcast_* ops are never in its output), so the CHLO tests also write
programs by hand. `run_on_xla(text, *args)` compiles such text with the cpu
PJRT client JAX uses and runs it: the same compiler and runtime as
`jax.jit`, minus the tracing. `assert_matches_xla` runs the text on both
pjrt-ref and XLA and compares; `assert_close` is the comparison: exact for
integers and booleans; for floats equal up to `max_ulp` units in the last
place (NaNs equal to NaNs, infinities only to themselves) or `atol`.

XLA CPU runs with denormals flushed to zero; pjrt-ref computes with IEEE
subnormals. `assert_close` therefore reads subnormal results of both sides
as zero (of the same sign) before comparing.

This module also tests those helpers, so a broken oracle cannot make the
other CHLO tests pass vacuously.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from tests.support.oracle import compare_with_jax  # noqa: F401  (sets up JAX: cpu, x64)
import jax  # noqa: E402
from jax._src import compiler  # noqa: E402
from jax._src.lib import xla_client  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
ELEMENT_TYPE_NAMES = {
    np.dtype(np.float16): "f16", BF16: "bf16", np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64", np.dtype(np.complex64): "complex<f32>",
    np.dtype(np.complex128): "complex<f64>", np.dtype(np.bool_): "i1",
    np.dtype(np.int8): "i8", np.dtype(np.int16): "i16", np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64", np.dtype(np.uint8): "ui8", np.dtype(np.uint16): "ui16",
    np.dtype(np.uint32): "ui32", np.dtype(np.uint64): "ui64",
    np.dtype(ml_dtypes.float8_e4m3fn): "f8E4M3FN",
}


def tensor_type(shape, dtype) -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{ELEMENT_TYPE_NAMES[np.dtype(dtype)]}>"


def run_on_xla(text: str, *args) -> list[np.ndarray]:
    """Compile StableHLO/CHLO `text` with XLA CPU and run it on `args`."""
    device = jax.devices("cpu")[0]
    options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
    executable = device.client.compile_and_load(
        text, xla_client.DeviceList((device,)), options)
    outputs = executable.execute([jax.device_put(np.asarray(a), device) for a in args])
    return [np.asarray(o) for o in outputs]


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Representable values between a and b (0 for two NaNs; inf when only
    one is NaN or when a non-finite value meets a different one)."""
    if a.dtype.kind == "c":
        return np.maximum(ulp_distance(a.real, b.real), ulp_distance(a.imag, b.imag))
    signed = np.dtype(f"i{a.dtype.itemsize}")

    def ordinal(x):
        bits = np.ascontiguousarray(x).view(signed).astype(np.int64)
        return np.where(bits < 0, np.int64(np.iinfo(signed).min) - bits, bits)

    distance = np.abs(ordinal(a) - ordinal(b)).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    distance = np.where(nan_a & nan_b, 0.0, distance)
    distance = np.where(nan_a ^ nan_b, np.inf, distance)
    not_finite = ~np.isfinite(a64) | ~np.isfinite(b64)
    distance = np.where(not_finite & ~(nan_a & nan_b) & (a64 != b64), np.inf, distance)
    return distance


def flush_subnormals(x: np.ndarray) -> np.ndarray:
    """`x` with subnormal values replaced by zeros of the same sign."""
    if x.dtype.kind == "c":
        flushed = np.empty_like(x)
        flushed.real, flushed.imag = flush_subnormals(x.real), flush_subnormals(x.imag)
        return flushed
    tiny = float(ml_dtypes.finfo(x.dtype).tiny)
    wide = x.astype(np.float64)
    return np.where(np.abs(wide) < tiny, np.copysign(0.0, wide), wide).astype(x.dtype)


def assert_close(ours, theirs, max_ulp: float = 0, atol: float = 0.0) -> None:
    """`ours` equals `theirs` in dtype and shape, and in value up to
    `max_ulp` ulp or `atol` (floats; other types exactly)."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    if ours.dtype.kind not in "fcV" or ours.dtype == np.bool_:
        np.testing.assert_array_equal(ours, theirs)
        return
    distance = ulp_distance(flush_subnormals(ours), flush_subnormals(theirs))
    if atol:
        wide = np.complex128 if ours.dtype.kind == "c" else np.float64
        with np.errstate(invalid="ignore"):
            near = np.abs(ours.astype(wide) - theirs.astype(wide)) <= atol
        distance = np.where(near, 0.0, distance)
    bad = distance > max_ulp
    if bad.any():
        index = np.argwhere(bad)[0]
        raise AssertionError(
            f"{bad.sum()} of {bad.size} elements differ by more than {max_ulp} ulp "
            f"(atol {atol}); first at {tuple(index)}: ours {ours[tuple(index)]!r}, "
            f"XLA {theirs[tuple(index)]!r}, {distance[tuple(index)]} ulp")


def assert_matches_xla(text: str, *args, max_ulp: float = 0, atol: float = 0.0):
    """Run `text` on pjrt-ref and on XLA CPU and compare every result."""
    theirs = run_on_xla(text, *args)
    ours = load(text)(*[np.asarray(a) for a in args])
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert_close(a, b, max_ulp=max_ulp, atol=atol)
    return ours


def assert_chlo_matches_xla(op: str, *args, max_ulp: float = 0, atol: float = 0.0):
    """The CHLO op `op` on `args` (arrays of one shape and dtype), written as
    a program by hand, on pjrt-ref and on XLA CPU: XLA lowers it with its
    own CHLO decomposition, whether or not JAX's lowering of the matching
    jax.lax function still emits that op (JAX 0.12 decomposes lgamma and
    asin itself)."""
    return assert_matches_xla(chlo_program(op, *args), *args, max_ulp=max_ulp, atol=atol)


def chlo_program(op: str, *args) -> str:
    """`op` applied elementwise to the arguments, in CHLO's generic form."""
    arg_type = tensor_type(args[0].shape, args[0].dtype)
    names = ", ".join(f"%a{i}" for i in range(len(args)))
    params = ", ".join(f"%a{i}: {arg_type}" for i in range(len(args)))
    types = ", ".join([arg_type] * len(args))
    return (f"func.func @main({params}) -> {arg_type} {{\n"
            f'  %0 = "{op}"({names}) : ({types}) -> {arg_type}\n'
            f"  return %0 : {arg_type}\n}}\n")


def assert_jax_matches(fn, *args, op: str, max_ulp: float = 0, atol: float = 0.0):
    """Lower `fn` with JAX (checking the program really contains `op`), run it
    on pjrt-ref and on XLA CPU, and compare."""
    from tests.support.oracle import lower_to_text

    text = lower_to_text(fn, *args)
    assert op in text, f"JAX did not emit {op}:\n{text}"
    ours, theirs = compare_with_jax(fn, *args)
    for a, b in zip(ours, theirs):
        assert_close(a, b, max_ulp=max_ulp, atol=atol)
    return ours


def unary_program(op: str, x: np.ndarray, result_dtype=None) -> str:
    operand = tensor_type(x.shape, x.dtype)
    result = tensor_type(x.shape, result_dtype or x.dtype)
    return (f"func.func @main(%x: {operand}) -> {result} {{\n"
            f"  %0 = {op} %x : {operand} -> {result}\n"
            f"  return %0 : {result}\n}}\n")


# --- the helpers' own tests ----------------------------------------------------

def test_ulp_distance_counts_representable_values():
    one = np.float32(1)
    after = np.nextafter(one, np.float32(2))
    values = np.array([one, -0.0, np.inf, np.nan, 1e-45], np.float32)
    others = np.array([after, 0.0, np.inf, np.nan, -1e-45], np.float32)
    assert list(ulp_distance(values, others)) == [1, 0, 0, 0, 2]
    assert ulp_distance(np.array([np.inf], np.float32), np.array([3e38], np.float32))[0] == np.inf
    assert ulp_distance(np.array([np.nan], np.float32), np.array([1], np.float32))[0] == np.inf


def test_assert_close_rejects_differences():
    a = np.array([1.0, 2.0], np.float32)
    b = np.nextafter(a, np.float32(3))
    assert_close(a, b, max_ulp=1)
    for wrong in (b.astype(np.float64), b[:1], np.nextafter(b, np.float32(3))):
        try:
            assert_close(a, wrong, max_ulp=1)
        except AssertionError:
            continue
        raise RuntimeError("assert_close accepted a mismatch")


def test_run_on_xla_runs_chlo_text():
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    text = unary_program("chlo.square", x)
    np.testing.assert_array_equal(run_on_xla(text, x)[0], x * x)
