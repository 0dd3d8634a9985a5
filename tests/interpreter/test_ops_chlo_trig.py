"""CHLO trigonometric and hyperbolic ops against XLA CPU, each op written
as a program by hand (JAX emits stablehlo.tan, and from 0.12 decomposes
asin itself, so its lowering need not contain the op).

Tolerances, measured against XLA: real results within 2 ulp (f16/bf16,
rounded after every step as XLA does, within 1), except sinh for |x| < 1
(XLA's expm1 is a few ulp off). Complex results within 2 ulp, infinite and
NaN parts included, except cosh/sinh where XLA's
exp(z + log 1/2) +- exp(log 1/2 - z) cancels (many ulp of a small part,
hence an absolute tolerance). Inputs on the branch cuts include signed
zeros, where XLA's side of the cut differs from C99's.
"""
from __future__ import annotations

import numpy as np
import pytest

from test_ops_chlo_oracle import (BF16, assert_chlo_matches_xla, assert_matches_xla,
                                  unary_program)

REAL_OPS = ["acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh"]
FLOATS = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
# XLA 0.10 computed f64 atanh as (log1p(x) - log1p(-x)) / 2, up to 113 ulp
# from the exact value; XLA 0.12 and pjrt-ref are within an ulp of it
# (test_f64_atanh_is_accurate).
REAL_ULP = {("sinh", "float32"): 8, ("sinh", "float64"): 8, ("atanh", "float64"): 128}
# (max_ulp, atol) for complex64 and complex128
COMPLEX_TOLERANCE = {"cosh": (32, 1e-6, 1e-15), "sinh": (32, 1e-6, 1e-15)}


def real_inputs(dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.uniform(-5, 5, 250), rng.uniform(-1, 1, 250),
        10.0 ** rng.uniform(-30, 30, 150) * rng.choice([-1, 1], 150),
        [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, np.inf, -np.inf, np.nan, 88.0, -88.0, 710.0]])
    with np.errstate(over="ignore"):
        return values.astype(dtype)


SPECIAL_PARTS = (0.0, -0.0, 1.0, -1.0, 2.0, -2.0, np.inf, -np.inf, np.nan, 1e300, 1e-300)


def complex_inputs(dtype) -> np.ndarray:
    rng = np.random.default_rng(1)
    cut = rng.uniform(-3, 3, 40)
    values = np.concatenate([
        rng.uniform(-5, 5, 250) + 1j * rng.uniform(-5, 5, 250),
        10.0 ** rng.uniform(-12, 12, 150) * np.exp(1j * rng.uniform(0, 7, 150)),
        # both sides of every branch cut, signed zeros included
        cut + 0j, np.conj(cut + 0j), 1j * cut, np.conj(1j * cut),
        [complex(a, b) for a in SPECIAL_PARTS for b in SPECIAL_PARTS]])
    with np.errstate(over="ignore"):  # 1e300 overflows complex64 to inf: fine
        return values.astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", REAL_OPS)
def test_real_matches_xla(name, dtype):
    max_ulp = REAL_ULP.get((name, dtype.name), 2 if dtype.itemsize >= 4 else 1)
    assert_chlo_matches_xla(f"chlo.{name}", real_inputs(dtype), max_ulp=max_ulp)


@pytest.mark.parametrize("dtype", [np.dtype(np.complex64), np.dtype(np.complex128)], ids=str)
@pytest.mark.parametrize("name", REAL_OPS)
def test_complex_matches_xla(name, dtype):
    max_ulp, atol64, atol128 = COMPLEX_TOLERANCE.get(name, (2, 0.0, 0.0))
    atol = atol64 if dtype == np.complex64 else atol128
    assert_chlo_matches_xla(f"chlo.{name}", complex_inputs(dtype), max_ulp=max_ulp, atol=atol)


@pytest.mark.parametrize("dtype", FLOATS + [np.dtype(np.complex64), np.dtype(np.complex128)],
                         ids=str)
def test_chlo_tan_matches_xla(dtype):
    """JAX lowers tan to stablehlo.tan, so chlo.tan is written by hand."""
    x = complex_inputs(dtype) if dtype.kind == "c" else real_inputs(dtype)
    assert_matches_xla(unary_program("chlo.tan", x), x, max_ulp=3 if dtype.kind == "f" else 8)


def test_f64_atanh_is_accurate():
    """Within an ulp of atanh in x87 extended precision (64-bit significand)."""
    from pjrt_ref.interpreter import load

    from test_ops_chlo_oracle import ulp_distance

    x = real_inputs(np.dtype(np.float64))
    (ours,) = load(unary_program("chlo.atanh", x))(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        exact = np.arctanh(x.astype(np.longdouble)).astype(np.float64)
    assert ulp_distance(ours, exact).max() <= 1


def test_domain_edges_exactly():
    """NaN outside the real domain, +-inf at the poles, exact zeros."""
    x = np.array([2.0, -2.0, 1.0, -1.0, 0.5, 0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    for name in REAL_OPS:
        assert_chlo_matches_xla(f"chlo.{name}", x, max_ulp=2)


def test_non_float_operand_is_rejected_at_load_time():
    from pjrt_ref.errors import PjrtRefError
    from pjrt_ref.interpreter import load

    text = """func.func @main(%x: tensor<2xi32>) -> tensor<2xi32> {
      %0 = chlo.cosh %x : tensor<2xi32> -> tensor<2xi32>
      return %0 : tensor<2xi32>
    }"""
    with pytest.raises(PjrtRefError):
        load(text)


@pytest.mark.parametrize("dtype", [np.dtype(np.complex64), np.dtype(np.complex128)], ids=str)
def test_asin_acos_kernel_matches_xla(dtype):
    """The internal op the complex asin/acos expansions are built on."""
    z = complex_inputs(dtype)
    assert_matches_xla(unary_program("chlo._asin_acos_kernel", z), z, max_ulp=1)
