"""Elementwise arithmetic, math, compare/select/clamp against JAX's cpu
backend (XLA), and against StableHLO's reference interpreter where JAX cannot
emit the op (integer power, TOTALORDER compare)."""
from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from tests.support.oracle import compare_with_jax, run_reference_interpreter
from pjrt_ref.interpreter import load

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
SPECIAL_FLOATS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5,
                  1e-30, -3.75, 100.0, 0.49999997]


def float_sample(dtype, size=64, seed=0, scale=4.0):
    """Special values first, then random ones."""
    rng = np.random.default_rng(seed)
    values = np.concatenate([SPECIAL_FLOATS, rng.standard_normal(size) * scale])
    return values.astype(dtype)


def complex_sample(dtype, size=32, seed=0):
    rng = np.random.default_rng(seed)
    specials = [0j, 1 + 0j, -1 + 0j, 1j, complex(np.inf, 1), complex(np.nan, 0), 3 + 4j]
    values = rng.standard_normal(size) * 3 + 1j * rng.standard_normal(size) * 3
    return np.concatenate([specials, values]).astype(dtype)


def integer_sample(dtype, size=40, seed=0):
    """The type's edge values (min, max, 0, +-1, ...), then random ones."""
    dtype = np.dtype(dtype)
    info = ml_dtypes.iinfo(dtype)
    edges = [int(info.min), int(info.max), 0, 1, int(info.min) + 1, int(info.max) - 1]
    if info.min < 0:
        edges += [-1, -2]
    rng = np.random.default_rng(seed)
    values = [int(v) for v in rng.integers(0, 2**info.bits, size=size, dtype=np.uint64)]
    wrapped = [v - 2**info.bits if v > info.max else v for v in values]
    return np.array(edges + wrapped, dtype=object).astype(dtype)


def same_bits(ours, theirs):
    """Equal values and types; floats bit for bit (so -0.0 != +0.0), any NaN
    matches any NaN."""
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (ours.dtype, theirs.dtype)
    if ours.dtype.kind in "fc" or ours.dtype.name.startswith(("bfloat", "float")):
        parts = [(ours.real, theirs.real), (ours.imag, theirs.imag)] if ours.dtype.kind == "c" \
            else [(ours, theirs)]
        for a, b in parts:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            both_nan = np.isnan(a64) & np.isnan(b64)
            same = (a64 == b64) & (np.signbit(a64) == np.signbit(b64))
            bad = ~(both_nan | same)
            assert not bad.any(), f"{a[bad][:5]} != {b[bad][:5]}"
    else:
        np.testing.assert_array_equal(ours, theirs)


def assert_bits_as_jax(fn, *args):
    ours, theirs = compare_with_jax(fn, *args)
    for a, b in zip(ours, theirs):
        same_bits(a, b)


def assert_close_to_jax(fn, *args, ulps=4):
    """Within a few units in the last place of the result type (XLA's own
    transcendental approximations differ from correctly rounded ones)."""
    ours, theirs = compare_with_jax(fn, *args)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        eps = float(ml_dtypes.finfo(a.real.dtype).eps)
        np.testing.assert_allclose(a.astype(np.complex128), b.astype(np.complex128),
                                   rtol=ulps * eps, atol=ulps * eps, equal_nan=True)


# --- unary ------------------------------------------------------------------------

MATH_OPS = {
    "exp": lax.exp, "log": lax.log, "sin": lax.sin, "cos": lax.cos, "tan": lax.tan,
    "tanh": lax.tanh, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "expm1": lax.expm1,
    "log1p": lax.log1p, "cbrt": lax.cbrt,
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(MATH_OPS))
def test_float_math_matches_xla(name, dtype):
    x = float_sample(dtype)
    if name in ("sin", "cos", "tan"):
        x = x[np.abs(x.astype(np.float64)) < 1e3]  # XLA reduces huge arguments differently
    assert_close_to_jax(MATH_OPS[name], x)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("name", ["exp", "log", "sin", "cos", "tanh", "sqrt", "expm1", "log1p"])
def test_complex_math_matches_xla(name, dtype):
    x = complex_sample(dtype)[7:]  # finite values: XLA's complex special cases vary by op
    assert_close_to_jax(MATH_OPS[name], x, ulps=64)


def complex_special_grid(dtype):
    parts = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e30, -1e30]
    return np.array([complex(a, b) for a in parts for b in parts], dtype)


@pytest.mark.parametrize("name", ["sin", "cos", "expm1", "sign"])
def test_complex_special_values(name):
    """Infinite and NaN parts: these ops agree with XLA CPU on the whole grid.
    (For exp, log, sqrt, tanh, tan and abs XLA departs from C99 Annex G on a
    few such inputs; pjrt-ref keeps the C99 answers there.)"""
    fn = {"sin": lax.sin, "cos": lax.cos, "expm1": lax.expm1, "sign": lax.sign}[name]
    assert_close_to_jax(fn, complex_special_grid(np.complex64), ulps=64)


def test_complex_rsqrt_of_zero_huge_and_infinite_values():
    x = complex_special_grid(np.complex128)
    no_nan = ~np.isnan(x.real) & ~np.isnan(x.imag)
    off_branch_cut = (x.imag != 0) | (x.real >= 0)  # XLA ignores the sign of 0 there
    x = x[no_nan & off_branch_cut]
    assert_close_to_jax(lax.rsqrt, x, ulps=64)


def test_logistic_is_one_op_and_saturates():
    text = """
    func.func @main(%x: tensor<5xf32>) -> tensor<5xf32> {
      %0 = stablehlo.logistic %x : tensor<5xf32>
      return %0 : tensor<5xf32>
    }"""
    x = np.array([-1000.0, -1.0, 0.0, 2.0, 1000.0], np.float32)
    (ours,) = load(text)(x)
    np.testing.assert_allclose(ours, run_reference_interpreter(text, [x])[0], rtol=1e-6)
    assert ours[0] == 0.0 and ours[-1] == 1.0


EXACT_FLOAT_OPS = {
    "abs": lax.abs, "neg": lax.neg, "sign": lax.sign, "floor": lax.floor, "ceil": lax.ceil,
    "round_afz": lambda a: lax.round(a, lax.RoundingMethod.AWAY_FROM_ZERO),
    "round_even": lambda a: lax.round(a, lax.RoundingMethod.TO_NEAREST_EVEN),
    "is_finite": lax.is_finite,
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_exact_float_unary_ops_bit_for_bit(dtype):
    """abs, neg, sign, floor, ceil, both roundings, is_finite: one program."""
    ops = tuple(EXACT_FLOAT_OPS.values())
    assert_bits_as_jax(lambda a: tuple(f(a) for f in ops), float_sample(dtype))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_integer_abs_negate_sign_wrap(dtype):
    x = integer_sample(dtype)  # abs(INT_MIN) = -INT_MIN = INT_MIN
    assert_bits_as_jax(lambda a: (lax.abs(a), lax.neg(a), lax.sign(a)), x)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_parts_abs_sign(dtype):
    x = complex_sample(dtype)
    assert_bits_as_jax(lambda a: (lax.real(a), lax.imag(a), lax.neg(a)), x)
    assert_close_to_jax(lambda a: (lax.abs(a), lax.sign(a)), x)


# --- binary -----------------------------------------------------------------------

INTEGER_BINARY = {"add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div,
                  "rem": lax.rem, "max": lax.max, "min": lax.min}
INTEGER_DTYPES = [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64,
                  ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2]


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: np.dtype(d).name)
def test_integer_arithmetic_wraps_and_divides_like_xla(dtype):
    """Overflow wraps; x / 0 = -1, x % 0 = x, INT_MIN / -1 = INT_MIN."""
    x = integer_sample(dtype)
    # Every pairing of the edge values, zero and -1 divisors included.
    lhs = np.repeat(x, len(x))
    rhs = np.tile(x, len(x))
    assert_bits_as_jax(lambda a, b: tuple(f(a, b) for f in INTEGER_BINARY.values()), lhs, rhs)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_float_arithmetic_is_correctly_rounded(dtype):
    """+ - * / and fmod are exact IEEE ops; max/min propagate NaN and order
    -0 < +0."""
    x = float_sample(dtype, size=16)
    lhs, rhs = np.repeat(x, len(x)), np.tile(x, len(x))
    ops = (lax.add, lax.sub, lax.mul, lax.div, lax.rem, lax.max, lax.min)
    assert_bits_as_jax(lambda a, b: tuple(f(a, b) for f in ops), lhs, rhs)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_float_pow_and_atan2(dtype):
    x = float_sample(dtype, size=12)
    lhs, rhs = np.repeat(x, len(x)), np.tile(x, len(x))
    assert_close_to_jax(lambda a, b: (lax.pow(a, b), lax.atan2(a, b)), lhs, rhs)


def _complex_operands(dtype):
    x = complex_special_grid(dtype)
    lhs, rhs = np.repeat(x, len(x)), np.tile(x, len(x))
    rng = np.random.default_rng(3)
    lhs = np.concatenate([lhs, (rng.standard_normal(500) * 100 + 1j * rng.standard_normal(500))])
    rhs = np.concatenate([rhs, (rng.standard_normal(500) + 1j * rng.standard_normal(500) * 1e3)])
    return lhs.astype(dtype), rhs.astype(dtype)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_arithmetic_bit_for_bit(dtype):
    """Add, subtract, divide (Smith's division, C99 recovery of infinities),
    max and min give XLA's bits, special values included."""
    lhs, rhs = _complex_operands(dtype)
    ops = (lax.add, lax.sub, lax.div, lax.max, lax.min)
    assert_bits_as_jax(lambda a, b: tuple(f(a, b) for f in ops), lhs, rhs)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_multiply_as_xla_up_to_which_product_is_fused(dtype):
    """(a + bi)(c + di) = (ac - bd) + (ad + bc)i with one product of each
    part in a fused multiply-add. Which one XLA fuses changed between
    versions (0.10 and 0.12), so a part may differ from XLA's by the
    rounding error of one product; and where a part overflows, infinities
    are recovered as C99 Annex G says (XLA 0.12 leaves a NaN beside the
    infinity): both are complex infinities (C99 G.3: a value with an
    infinite part is an infinity, whatever its other part)."""
    lhs, rhs = _complex_operands(dtype)
    (ours,), (theirs,) = compare_with_jax(lax.mul, lhs, rhs)
    assert ours.dtype == theirs.dtype == dtype

    def infinite(z):
        return np.isinf(z.real) | np.isinf(z.imag)

    np.testing.assert_array_equal(infinite(ours), infinite(theirs))
    finite = ~infinite(ours)
    np.testing.assert_array_equal(np.isnan(ours.real[finite]), np.isnan(theirs.real[finite]))
    np.testing.assert_array_equal(np.isnan(ours.imag[finite]), np.isnan(theirs.imag[finite]))
    real = np.finfo(ours.real.dtype)
    a, b, c, d = (v.astype(np.float64) for v in (lhs.real, lhs.imag, rhs.real, rhs.imag))
    with np.errstate(all="ignore"):
        for part, products in ((ours.real - theirs.real, (a * c, b * d)),
                               (ours.imag - theirs.imag, (a * d, b * c))):
            one_rounding = np.maximum(*(np.abs(p) for p in products)) * real.eps
            compared = finite & ~np.isnan(part)
            assert np.all(np.abs(part[compared]) <= one_rounding[compared] + real.smallest_subnormal)


def test_complex_atan2_matches_reference_interpreter():
    """JAX has no complex atan2; the reference interpreter computes
    -i log((x + iy) / sqrt(x^2 + y^2)) (NaN where x^2 + y^2 = 0)."""
    text = """
    func.func @main() -> (tensor<4xf64>, tensor<4xf64>) {
      %a = stablehlo.constant dense<[(1.0, 2.0), (-1.0, 0.5), (0.0, 1.0), (3.0, -4.0)]> : tensor<4xcomplex<f64>>
      %b = stablehlo.constant dense<[(2.0, -1.0), (0.5, 0.5), (1.0, 0.0), (-2.0, 1.0)]> : tensor<4xcomplex<f64>>
      %0 = stablehlo.atan2 %a, %b : tensor<4xcomplex<f64>>
      %1 = stablehlo.real %0 : (tensor<4xcomplex<f64>>) -> tensor<4xf64>
      %2 = stablehlo.imag %0 : (tensor<4xcomplex<f64>>) -> tensor<4xf64>
      return %1, %2 : tensor<4xf64>, tensor<4xf64>
    }"""
    for ours, theirs in zip(load(text)(), run_reference_interpreter(text, [])):
        np.testing.assert_allclose(ours, theirs, rtol=1e-15, equal_nan=True)


def test_complex_pow_special_cases_and_values():
    base = np.array([0, 0, 0, 0, 1j, -1, 2 + 1j, np.nan], np.complex64)
    exponent = np.array([0, 2, -1, 1 + 1j, 2, 0.5, 1.5 - 0.5j, 0], np.complex64)
    assert_close_to_jax(lax.pow, base, exponent, ulps=16)


def test_complex_from_parts_keeps_infinities():
    re = np.array([1.0, np.inf, 0.0, np.nan], np.float32)
    im = np.array([np.inf, -2.0, -0.0, 1.0], np.float32)
    assert_bits_as_jax(lax.complex, re, im)


def test_boolean_add_multiply_max_min():
    lhs = np.array([False, False, True, True])
    rhs = np.array([False, True, False, True])
    assert_bits_as_jax(lambda a, b: (lax.max(a, b), lax.min(a, b), a | b, a & b), lhs, rhs)
    text = """
    func.func @main(%a: tensor<4xi1>, %b: tensor<4xi1>) -> (tensor<4xi1>, tensor<4xi1>) {
      %0 = stablehlo.add %a, %b : tensor<4xi1>
      %1 = stablehlo.multiply %a, %b : tensor<4xi1>
      return %0, %1 : tensor<4xi1>, tensor<4xi1>
    }"""
    ours = load(text)(lhs, rhs)
    for a, b in zip(ours, run_reference_interpreter(text, [lhs, rhs])):
        same_bits(a, b)


def test_integer_power_matches_reference_interpreter():
    """Negative exponents give 0 unless |base| = 1; overflow wraps."""
    text = """
    func.func @main(%a: tensor<12xi32>, %b: tensor<12xi32>) -> tensor<12xi32> {
      %0 = stablehlo.power %a, %b : tensor<12xi32>
      return %0 : tensor<12xi32>
    }"""
    base = np.array([2, -1, -1, 1, 2, 0, 3, -2, 7, 0, 5, -3], np.int32)
    exponent = np.array([-1, -3, -2, -5, 40, -1, 3, 31, 0, 0, 13, -2147483648], np.int32)
    (ours,) = load(text)(base, exponent)
    np.testing.assert_array_equal(ours, run_reference_interpreter(text, [base, exponent])[0])


def test_results_are_arrays_of_the_result_type_for_scalars():
    for fn, arg in [(lax.add, np.float32(1.5)), (lax.add, np.int8(100)),
                    (lax.max, ml_dtypes.bfloat16(2))]:
        ours, theirs = compare_with_jax(lambda a: fn(a, a), np.asarray(arg))
        assert isinstance(ours[0], np.ndarray) and ours[0].shape == ()
        same_bits(ours[0], theirs[0])


# --- compare / select / clamp ------------------------------------------------------

COMPARISONS = (lax.eq, lax.ne, lax.lt, lax.le, lax.gt, lax.ge)


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int8, np.uint32, np.int64, np.uint64,
                                   np.bool_], ids=lambda d: np.dtype(d).name)
def test_compare_all_directions(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        x = np.array([False, True])
    elif dtype.kind in "iu":
        x = integer_sample(dtype, size=4)
    else:
        x = float_sample(dtype, size=4)
    lhs, rhs = np.repeat(x, len(x)), np.tile(x, len(x))
    assert_bits_as_jax(lambda a, b: tuple(f(a, b) for f in COMPARISONS), lhs, rhs)


def test_compare_complex():
    """EQ/NE against XLA. JAX refuses to order complex numbers and the
    reference interpreter aborts on it, so the spec's lexicographic order
    on (real, imag) is checked on hand-written cases."""
    x = np.array([0, 1 + 1j, 1 - 1j, 1j, complex(np.nan, 0), 2 + 0j], np.complex64)
    lhs, rhs = np.repeat(x, len(x)), np.tile(x, len(x))
    assert_bits_as_jax(lambda a, b: (lax.eq(a, b), lax.ne(a, b)), lhs, rhs)
    text = """
    func.func @main(%a: tensor<4xcomplex<f32>>, %b: tensor<4xcomplex<f32>>)
        -> (tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>) {
      %0 = stablehlo.compare LT, %a, %b, FLOAT : (tensor<4xcomplex<f32>>, tensor<4xcomplex<f32>>) -> tensor<4xi1>
      %1 = stablehlo.compare LE, %a, %b, FLOAT : (tensor<4xcomplex<f32>>, tensor<4xcomplex<f32>>) -> tensor<4xi1>
      %2 = stablehlo.compare GT, %a, %b, FLOAT : (tensor<4xcomplex<f32>>, tensor<4xcomplex<f32>>) -> tensor<4xi1>
      %3 = stablehlo.compare GE, %a, %b, FLOAT : (tensor<4xcomplex<f32>>, tensor<4xcomplex<f32>>) -> tensor<4xi1>
      return %0, %1, %2, %3 : tensor<4xi1>, tensor<4xi1>, tensor<4xi1>, tensor<4xi1>
    }"""
    a = np.array([1 + 1j, 1 + 2j, 0 + 9j, 2 + 0j], np.complex64)
    b = np.array([1 + 2j, 1 + 2j, 1 + 0j, 1 + 5j], np.complex64)
    lt, le, gt, ge = load(text)(a, b)
    assert lt.tolist() == [True, False, True, False]
    assert le.tolist() == [True, True, True, False]
    assert gt.tolist() == [False, False, False, True]
    assert ge.tolist() == [False, True, False, True]


@pytest.mark.parametrize("element", ["f32", "f64", "bf16", "f16"])
def test_compare_totalorder(element):
    """-NaN < -inf < -1 < -0 < +0 < tiny < inf < +NaN, -0 != +0, NaN == NaN.

    JAX emits TOTALORDER EQ, LT and LE (its sort uses them); NE, GT and GE
    are checked as the negation / mirror image of XLA's EQ, LT and LE."""
    from jax._src.lax.lax import eq_to_p, le_to_p, lt_to_p

    dtype = {"f32": np.float32, "f64": np.float64, "bf16": BF16, "f16": np.float16}[element]
    x = np.array([-np.nan, -np.inf, -1.0, -0.0, 0.0, 1e-6, np.inf, np.nan], dtype)
    lhs, rhs = np.repeat(x, 8), np.tile(x, 8)
    directions = ["EQ", "NE", "LT", "LE", "GT", "GE"]
    tensor = f"tensor<64x{element}>"
    lines = [f"%r{i} = stablehlo.compare {d}, %a, %b, TOTALORDER : ({tensor}, {tensor}) -> "
             "tensor<64xi1>" for i, d in enumerate(directions)]
    types = ", ".join(["tensor<64xi1>"] * 6)
    results = ", ".join(f"%r{i}" for i in range(6))
    text = (f"func.func @main(%a: {tensor}, %b: {tensor}) -> ({types}) {{\n"
            + "\n".join(lines) + f"\nreturn {results} : {types}\n}}")
    eq, ne, lt, le, gt, ge = load(text)(lhs, rhs)
    xla = jax.jit(lambda a, b: (eq_to_p.bind(a, b), lt_to_p.bind(a, b), le_to_p.bind(a, b),
                                lt_to_p.bind(b, a), le_to_p.bind(b, a)))
    xla_eq, xla_lt, xla_le, xla_gt, xla_ge = (np.asarray(r) for r in xla(lhs, rhs))
    for ours, theirs in [(eq, xla_eq), (ne, ~xla_eq), (lt, xla_lt), (le, xla_le),
                         (gt, xla_gt), (ge, xla_ge)]:
        same_bits(ours, theirs)
    assert np.array_equal(lt.reshape(8, 8), np.triu(np.ones((8, 8), bool), 1))


def test_select_with_scalar_and_tensor_predicates():
    pred = np.array([True, False, True, False])
    a = np.arange(4, dtype=np.float32)
    b = -a
    assert_bits_as_jax(lambda p, x, y: (lax.select(p, x, y), lax.select(p[0], x, y),
                                        lax.select(p[1], x, y)), pred, a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.int16, BF16], ids=lambda d: np.dtype(d).name)
def test_clamp_with_scalar_and_tensor_bounds(dtype):
    x = np.array([-5, -1, 0, 3, 9, 100], dtype)
    low = np.array([-2, 0, 1, 1, 10, 0], dtype)
    high = np.array([2, 0, 2, 5, 8, 50], dtype)  # low > high: the result is high
    assert_bits_as_jax(lambda l, v, h: (lax.clamp(l, v, h), lax.clamp(l[0], v, h[0])),
                       low, x, high)


def test_clamp_propagates_nan():
    x = np.array([np.nan, 1.0, 2.0], np.float32)
    low = np.array([0.0, np.nan, 0.0], np.float32)
    high = np.array([1.0, 1.0, np.nan], np.float32)
    assert_bits_as_jax(lax.clamp, low, x, high)


@pytest.mark.parametrize("width", [32, 64])
def test_cbrt_of_complex_is_the_principal_root_as_the_reference_interpreter(width):
    """Spec "cbrt" takes complex operands (JAX's lax.cbrt does not, so the
    oracle is StableHLO's reference interpreter). The values are constants
    of the program: the oracle's harness passes no complex arguments."""
    values = [-8 + 0j, 1j, -1 - 1j, 0j, complex(-0.0, 0.0), 3 + 4j, 1e30 + 1e-30j, -2.5 - 0j,
              complex(np.inf, 1), complex(-np.inf, np.inf), complex(np.nan, 1)]
    n, f = len(values), f"f{width}"
    def literal(x):
        return "0x7FF8000000000000" if np.isnan(x) else f"{x:.17e}" if np.isfinite(x) \
            else ("0x7FF0000000000000" if x > 0 else "0xFFF0000000000000")
    consts = ", ".join(f"({literal(v.real)}, {literal(v.imag)})" for v in values)
    text = f"""
    func.func @main() -> (tensor<{n}x{f}>, tensor<{n}x{f}>) {{
      %c = stablehlo.constant dense<[{consts}]> : tensor<{n}xcomplex<f64>>
      %z = stablehlo.convert %c : (tensor<{n}xcomplex<f64>>) -> tensor<{n}xcomplex<{f}>>
      %r = stablehlo.cbrt %z : tensor<{n}xcomplex<{f}>>
      %re = stablehlo.real %r : (tensor<{n}xcomplex<{f}>>) -> tensor<{n}x{f}>
      %im = stablehlo.imag %r : (tensor<{n}xcomplex<{f}>>) -> tensor<{n}x{f}>
      return %re, %im : tensor<{n}x{f}>, tensor<{n}x{f}>
    }}"""
    ours = load(text)()
    theirs = run_reference_interpreter(text, [])
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=4 * np.finfo(a.dtype).eps, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_tan_special_values_as_xla(dtype):
    """tan(+-inf + 0i) and tan(NaN + 0i) are NaN + NaN i on XLA CPU and in
    JAX's accuracy tests (C99 keeps the zero imaginary part); elsewhere on
    the plane of special values the parts agree with XLA where it gives NaN,
    and within a few ULP otherwise."""
    parts = [-np.inf, -3.0, -0.0, 0.0, 3.0, np.inf, np.nan]
    z = np.array([complex(a, b) for a in parts for b in parts], dtype)
    ours, theirs = compare_with_jax(lax.tan, z)
    for part in ("real", "imag"):
        a, b = getattr(ours[0], part), getattr(theirs[0], part)
        assert np.array_equal(np.isnan(a), np.isnan(b)), (z[np.isnan(a) != np.isnan(b)])
        np.testing.assert_allclose(a, b, rtol=8 * np.finfo(a.dtype).eps, atol=0)


@pytest.mark.parametrize("function", [lax.exp, lax.cosh, lax.sinh], ids=["exp", "cosh", "sinh"])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_exp_special_values_as_xla(function, dtype):
    """e^(a + bi) is e^a cos(b) + i e^a sin(b) as on XLA CPU, so that
    e^(-inf + inf i) is NaN + NaN i (C99: 0 + 0i), and cosh/sinh, which JAX
    sends to plugins decomposed into exponentials, give XLA's NaNs and
    infinities (cosh(-inf + inf i): NaN + NaN i, not C99's inf + NaN i), as
    JAX's accuracy tests expect."""
    parts = [-np.inf, -3.0, -0.0, 0.0, 3.0, np.inf, np.nan]
    z = np.array([complex(a, b) for a in parts for b in parts], dtype)
    ours, theirs = compare_with_jax(function, z)
    for part in ("real", "imag"):
        a, b = getattr(ours[0], part), getattr(theirs[0], part)
        assert np.array_equal(np.isnan(a), np.isnan(b)), z[np.isnan(a) != np.isnan(b)]
        np.testing.assert_allclose(a, b, rtol=8 * np.finfo(a.dtype).eps, atol=0)
