"""Bitwise ops, shifts, bit counts, convert, bitcast_convert and
reduce_precision against JAX's cpu backend (XLA)."""
from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from tests.support.oracle import compare_with_jax, run_reference_interpreter
from pjrt_ref.interpreter import load
from test_ops_elementwise import assert_bits_as_jax, float_sample, integer_sample, same_bits

INTEGER_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                  np.uint64, ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2]
# XLA CPU rejects the f6 types, so they are tested on hand-written values.
NARROW_FLOATS = [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e5m2,
                 ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                 ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3b11fnuz,
                 ml_dtypes.float8_e3m4, ml_dtypes.float8_e4m3, ml_dtypes.float4_e2m1fn,
                 ml_dtypes.float8_e8m0fnu]


def name_of(dtype) -> str:
    return np.dtype(dtype).name


# --- bitwise and shifts --------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTEGER_DTYPES + [np.bool_], ids=name_of)
def test_and_or_xor_not(dtype):
    if np.dtype(dtype) == np.bool_:
        x = np.array([False, True])
    else:
        x = integer_sample(dtype, size=6)
    lhs, rhs = np.repeat(x, len(x)), np.tile(x, len(x))
    assert_bits_as_jax(lambda a, b: (a & b, a | b, a ^ b, ~a), lhs, rhs)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=name_of)
def test_shifts_including_out_of_range_amounts(dtype):
    """Amounts >= the width (or negative) give 0, or the sign fill for the
    arithmetic shift; unsigned types shift arithmetically on their top bit."""
    dtype = np.dtype(dtype)
    width = ml_dtypes.iinfo(dtype).bits
    values = integer_sample(dtype, size=4)
    amounts = [0, 1, width - 1, width, width + 3]
    if ml_dtypes.iinfo(dtype).min < 0:
        amounts += [-1, int(ml_dtypes.iinfo(dtype).min)]
    else:
        amounts += [int(ml_dtypes.iinfo(dtype).max)]
    amounts = np.array(amounts, dtype=object).astype(dtype)
    lhs, rhs = np.repeat(values, len(amounts)), np.tile(amounts, len(values))
    assert_bits_as_jax(lambda a, b: (lax.shift_left(a, b), lax.shift_right_logical(a, b),
                                     lax.shift_right_arithmetic(a, b)), lhs, rhs)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=name_of)
def test_popcnt_and_count_leading_zeros(dtype):
    x = integer_sample(dtype)
    if np.dtype(dtype) == ml_dtypes.int4:
        # XLA CPU counts the bits of the sign-extended byte for negative
        # int4 (popcnt(-1) = 8, which wraps to -8); see the test below.
        assert_bits_as_jax(lax.clz, x)
        assert_bits_as_jax(lax.population_count, x[x >= 0])
    else:
        assert_bits_as_jax(lambda a: (lax.population_count(a), lax.clz(a)), x)


def test_popcnt_of_negative_int4_counts_four_bits():
    """Spec "popcnt": the set bits of the 4-bit value itself."""
    text = """
    func.func @main(%x: tensor<4xi4>) -> tensor<4xi4> {
      %0 = stablehlo.popcnt %x : tensor<4xi4>
      return %0 : tensor<4xi4>
    }"""
    (ours,) = load(text)(np.array([-1, -8, -2, -7], ml_dtypes.int4))
    assert ours.tolist() == [4, 1, 3, 2]


# --- convert ------------------------------------------------------------------------------

FLOAT_SOURCES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]
OUT_OF_RANGE = [np.nan, -np.nan, np.inf, -np.inf, 1e10, -1e10, 3e38, 2.0**31, -2.0**31,
                2.0**32, 2.0**63, -2.0**63, 2.0**64, 255.9, 256.0, -0.99, -1.0, 127.5,
                -128.5, 7.9, -8.9, 0.0, -0.0]


@pytest.mark.parametrize("source", FLOAT_SOURCES, ids=name_of)
def test_float_to_integer_truncates_and_saturates(source):
    """NaN -> 0, out of range -> min/max, fractions truncate toward zero."""
    x = np.concatenate([np.array(OUT_OF_RANGE), float_sample(np.float64, size=8) * 50])
    with np.errstate(over="ignore"):
        x = x.astype(source)
    targets = [jnp.int8, jnp.uint8, jnp.int16, jnp.uint16, jnp.int32, jnp.uint32, jnp.int64,
               jnp.uint64, jnp.int4, jnp.uint4, jnp.bool_]
    assert_bits_as_jax(lambda a: tuple(lax.convert_element_type(a, t) for t in targets), x)


@pytest.mark.parametrize("source", INTEGER_DTYPES + [np.bool_], ids=name_of)
def test_integer_and_bool_conversions(source):
    """Integer -> integer wraps; -> float rounds (through f32 for narrow
    floats, as XLA does); -> bool is x != 0."""
    if np.dtype(source) == np.bool_:
        x = np.array([False, True])
    else:
        x = integer_sample(source)
    targets = [jnp.int8, jnp.uint8, jnp.int32, jnp.uint64, jnp.int4, jnp.bool_, jnp.float32,
               jnp.float64, jnp.float16, jnp.bfloat16, jnp.float8_e4m3fn, jnp.float8_e5m2,
               jnp.complex64]
    assert_bits_as_jax(lambda a: tuple(lax.convert_element_type(a, t) for t in targets), x)


def test_large_integers_round_through_float32_like_xla():
    x = np.array([2**24 + 2**16 + 1, 2**53 + 1, -(2**62) - 12345, 2**31 - 1], np.int64)
    assert_bits_as_jax(lambda a: (lax.convert_element_type(a, jnp.bfloat16),
                                  lax.convert_element_type(a, jnp.float32),
                                  lax.convert_element_type(a, jnp.float64)), x)


@pytest.mark.parametrize("target", NARROW_FLOATS + [np.float32, np.float64], ids=name_of)
@pytest.mark.parametrize("source", [np.float32, np.float64], ids=name_of)
def test_float_to_float_conversions(source, target):
    """Round to nearest even; overflow to inf, or NaN / saturation for the
    types without infinities; f64 -> f8 rounds once, f64 -> bf16/f16 twice.
    (No f32 subnormals: XLA CPU flushes them to zero, the spec does not.)"""
    tiny = [1 + 2**-4 + 2**-40, 1 + 2**-3 + 2**-40, 1 + 2**-2 + 2**-40, 1 + 2**-11 + 2**-40,
            1 + 2**-8 + 2**-30, 464.0, 480.0, 57344.0, 61440.0, 1e-9, 2.0**-120, 6.5, 7.0]
    x = np.concatenate([float_sample(np.float64, size=32, scale=100.0), tiny,
                        -np.array(tiny)]).astype(source)
    assert_bits_as_jax(lambda a: lax.convert_element_type(a, target), x)


@pytest.mark.parametrize("source", NARROW_FLOATS, ids=name_of)
def test_narrow_floats_to_wider_and_integers(source):
    """The narrow value is made inside the program from float32."""
    x = float_sample(np.float32, size=24)
    targets = [jnp.float32, jnp.float64, jnp.bfloat16, jnp.int32, jnp.uint8, jnp.bool_]
    if np.dtype(source) == ml_dtypes.float4_e2m1fn:
        targets = targets[:3]  # XLA CPU converts f4's 6.0 to INT_MAX; see below
    assert_bits_as_jax(lambda a: tuple(lax.convert_element_type(
        lax.convert_element_type(a, source), t) for t in targets), x)


def test_f4_to_integer_is_exact():
    text = """
    func.func @main(%x: tensor<4xf4E2M1FN>) -> tensor<4xi32> {
      %0 = stablehlo.convert %x : (tensor<4xf4E2M1FN>) -> tensor<4xi32>
      return %0 : tensor<4xi32>
    }"""
    x = np.array([6.0, -6.0, 1.5, -0.5], ml_dtypes.float4_e2m1fn)
    assert load(text)(x)[0].tolist() == [6, -6, 1, 0]


def test_f6_conversions_round_to_even_and_saturate():
    """f6E2M3FN (max 7.5) and f6E3M2FN (max 28) have no inf or NaN: out of
    range values saturate; ties go to the even neighbour."""
    text = """
    func.func @main(%x: tensor<8xf32>) -> (tensor<8xf6E2M3FN>, tensor<8xf6E3M2FN>, tensor<8xf32>) {
      %0 = stablehlo.convert %x : (tensor<8xf32>) -> tensor<8xf6E2M3FN>
      %1 = stablehlo.convert %x : (tensor<8xf32>) -> tensor<8xf6E3M2FN>
      %2 = stablehlo.convert %0 : (tensor<8xf6E2M3FN>) -> tensor<8xf32>
      return %0, %1, %2 : tensor<8xf6E2M3FN>, tensor<8xf6E3M2FN>, tensor<8xf32>
    }"""
    x = np.array([1.0625, 1.1875, 7.5, 7.75, 100.0, -100.0, np.inf, 0.03125], np.float32)
    e2m3, e3m2, back = load(text)(x)
    assert back.tolist() == [1.0, 1.25, 7.5, 7.5, 7.5, -7.5, 7.5, 0.0]
    assert e3m2.astype(np.float32).tolist() == [1.0, 1.25, 8.0, 8.0, 28.0, -28.0, 28.0, 0.0]


@pytest.mark.filterwarnings("ignore:Casting complex values to real")  # JAX's own warning
def test_complex_conversions_keep_the_real_part():
    x = np.array([1 + 2j, 2j, 0j, complex(np.nan, 1), -3.7 - 1j, 1e40 + 0j], np.complex128)
    targets = [jnp.complex64, jnp.float32, jnp.float64, jnp.int32, jnp.bool_, jnp.bfloat16]
    with np.errstate(over="ignore"):
        assert_bits_as_jax(lambda a: tuple(lax.convert_element_type(a, t) for t in targets), x)
    y = np.array([1.5, -np.inf, np.nan], np.float32)
    assert_bits_as_jax(lambda a: (lax.convert_element_type(a, jnp.complex64),
                                  lax.convert_element_type(a, jnp.complex128)), y)


# --- bitcast_convert ------------------------------------------------------------------

@pytest.mark.parametrize("source,target", [
    (np.float32, jnp.uint32), (np.float32, jnp.int32), (np.float64, jnp.int64),
    (ml_dtypes.bfloat16, jnp.int16), (np.float16, jnp.uint16), (np.int8, jnp.uint8),
    (np.float32, jnp.uint8), (np.float32, jnp.bfloat16), (np.float64, jnp.float32),
    (np.int64, jnp.int16), (np.uint8, jnp.float8_e4m3fn),
], ids=lambda v: name_of(v))
def test_bitcast_convert_same_and_narrower(source, target):
    """Narrower results get a new last dimension, least significant part first."""
    x = float_sample(np.float64, size=10).astype(source) if np.dtype(source).kind in "fcV" \
        else integer_sample(source, size=10)
    assert_bits_as_jax(lambda a: lax.bitcast_convert_type(a, target), x.reshape(2, -1))


@pytest.mark.parametrize("source,target", [
    (np.uint8, jnp.float32), (np.int16, jnp.float64), (np.uint32, jnp.uint64),
    (np.int8, jnp.bfloat16),
], ids=lambda v: name_of(v))
def test_bitcast_convert_wider_joins_the_last_dimension(source, target):
    ratio = np.dtype(target).itemsize // np.dtype(source).itemsize
    x = integer_sample(np.uint8, size=6 * ratio * np.dtype(source).itemsize - 8)
    x = np.resize(x, 6 * ratio * np.dtype(source).itemsize).view(source).reshape(2, 3, ratio)
    assert_bits_as_jax(lambda a: lax.bitcast_convert_type(a, target), x)


def test_bitcast_convert_sub_byte_types():
    """int4 <-> int8: two nibbles per byte, the first one in the low bits."""
    x = np.array([[1, -2], [7, -8], [0, -1]], ml_dtypes.int4)
    assert_bits_as_jax(lambda a: lax.bitcast_convert_type(a, jnp.int8), x)
    y = np.array([-31, 0, 127, -128], np.int8)
    assert_bits_as_jax(lambda a: lax.bitcast_convert_type(a, jnp.uint4), y)
    z = np.array([1, 9, 15], ml_dtypes.uint4)
    assert_bits_as_jax(lambda a: lax.bitcast_convert_type(a, jnp.int4), z)


def test_bitcast_convert_between_complex_types():
    """JAX refuses complex bitcasts; the spec allows complex <-> complex.
    1.0 as f64 is 0x3FF00000_00000000: low word 0.0, high word 1.875 as f32."""
    text = """
    func.func @main(%x: tensor<1xcomplex<f64>>) -> (tensor<1x2xcomplex<f32>>, tensor<1xcomplex<f64>>) {
      %0 = stablehlo.bitcast_convert %x : (tensor<1xcomplex<f64>>) -> tensor<1x2xcomplex<f32>>
      %1 = stablehlo.bitcast_convert %0 : (tensor<1x2xcomplex<f32>>) -> tensor<1xcomplex<f64>>
      return %0, %1 : tensor<1x2xcomplex<f32>>, tensor<1xcomplex<f64>>
    }"""
    x = np.array([1 + 2j], np.complex128)
    narrow, back = load(text)(x)
    assert narrow.tolist() == [[1.875j, 2j]]
    same_bits(back, x)


def test_bitcast_convert_scalar_to_vector():
    assert_bits_as_jax(lambda a: lax.bitcast_convert_type(a, jnp.uint16),
                       np.array(1.5, np.float32))


# --- reduce_precision --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16],
                         ids=name_of)
def test_reduce_precision(dtype):
    """Ties to even, overflow to inf, flush below the new normal range, NaN
    kept (formats with no mantissa bits: next test)."""
    formats = [(5, 10), (8, 7), (4, 3), (5, 2), (11, 52)]
    rounding = [1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-4, 65504.0,
                65520.0, 1e5, 6e-5, 6.1e-5, 3e-8, 240.0, 248.0, 2.0**-14, 2.0**-15]
    x = np.concatenate([float_sample(np.float64, size=40), rounding, -np.array(rounding)])
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    assert_bits_as_jax(lambda a: tuple(lax.reduce_precision(a, e, m) for e, m in formats), x)


def test_reduce_precision_without_mantissa_bits_as_the_reference_interpreter():
    """A format with no mantissa bits has no NaN: NaN (of either sign)
    becomes +inf, as in the spec's reference interpreter; everything else
    rounds as on XLA."""
    formats = [(2, 0), (8, 0)]
    x = np.concatenate([float_sample(np.float32, size=40), [np.nan, -np.nan, 1.5, 2.5, 3.5]])
    x = x.astype(np.float32)
    for e, m in formats:
        text = f"""
        func.func @main(%x: tensor<{x.size}xf32>) -> tensor<{x.size}xf32> {{
          %0 = stablehlo.reduce_precision %x, format = e{e}m{m} : tensor<{x.size}xf32>
          return %0 : tensor<{x.size}xf32>
        }}"""
        (ours,) = load(text)(x)
        same_bits(ours, run_reference_interpreter(text, [x])[0])
        assert np.all(ours[np.isnan(x)] == np.inf)
        keep = ~np.isnan(x)
        (xla,) = compare_with_jax(lambda a: lax.reduce_precision(a, e, m), x[keep])[1]
        same_bits(ours[keep], xla)


def test_reduce_precision_of_f8_operands_via_the_reference_interpreter():
    text = """
    func.func @main(%x: tensor<6xf32>) -> tensor<6xf32> {
      %0 = stablehlo.reduce_precision %x, format = e2m1 : tensor<6xf32>
      return %0 : tensor<6xf32>
    }"""
    x = np.array([1.3, 1.25, 1.75, 3.9, 0.3, -0.6], np.float32)
    (ours,) = load(text)(x)
    same_bits(ours, run_reference_interpreter(text, [x])[0])
