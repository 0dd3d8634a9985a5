"""CHLO special functions (erf, erfc, erf_inv, lgamma, digamma, bessel_i1e,
polygamma, zeta) against XLA CPU on random and edge-case inputs, each op
written as a program by hand (JAX >= 0.12 decomposes some of them itself,
so its lowering need not contain the op).

XLA CPU fuses each multiply feeding an add into a fused multiply-add; the
kernels do the same (see chlo_special.fma), which keeps the polynomial
approximations (erf, erfc, bessel_i1e, zeta) within 1-3 ulp of XLA.
XLA's own log1p is reproduced too (chlo_special.log1p). Tolerances: f32
results are within a few ulp of XLA's (XLA's f32 log/sin/cos are its own
approximations); f16/bf16 are computed in f32 by both and rounded, so they
agree to 1 ulp. Near the zeros of lgamma (x = 1, 2) and digamma
(x = 1.46...) an absolute tolerance applies, since a few ulp of the terms
being cancelled are many ulp of a result close to 0.

XLA's numbers moved between versions, and these tests hold for each JAX
the README lists: XLA 0.12 evaluates f64 erf_inv with other polynomials
(up to 19 ulp from ours; both are within 29 ulp of the exact value near
|x| = 1, checked with mpmath at 200 bits), and gives digamma(+-0) = -inf
where XLA 0.10 gave NaN (pjrt-ref gives -inf: test_digamma_at_zero).
"""
from __future__ import annotations

import numpy as np
import pytest

from test_ops_chlo_oracle import BF16, assert_chlo_matches_xla

FLOATS = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
EDGES = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1e-30, -1e-30, 10.0,
         -10.5, 30.0, 100.0, 1e10, -1e10, np.inf, -np.inf, np.nan]


def sample(dtype, low, high, n=1500, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.uniform(low, high, n), EDGES])
    with np.errstate(over="ignore"):  # 1e10 overflows f16 to inf: fine
        return values.astype(dtype)


# op, input range, {dtype: (max_ulp, atol)}
CASES = {
    "erf": ((-6, 6), {"float32": (1, 0), "float64": (4, 0)}),
    "erfc": ((-6, 12), {"float32": (3, 0), "float64": (3, 0)}),
    "erf_inv": ((-1, 1), {"float32": (3, 0), "float64": (20, 0)}),
    "lgamma": ((-10, 20), {"float32": (8, 2e-6), "float64": (4, 1e-15),
                                       "float16": (1, 2e-6), "bfloat16": (1, 2e-6)}),
    "digamma": ((-10, 20), {"float32": (8, 2e-6), "float64": (2, 1e-15),
                                         "float16": (1, 2e-6), "bfloat16": (1, 2e-6)}),
    "bessel_i1e": ((-30, 30), {"float32": (2, 0), "float64": (2, 0)}),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", CASES)
def test_unary_special_function_matches_xla(name, dtype):
    (low, high), tolerances = CASES[name]
    max_ulp, atol = tolerances.get(dtype.name, (1, 0))
    x = sample(dtype, low, high)
    if name == "digamma":   # XLA's value at the pole moved: test_digamma_at_zero
        x = x[x != 0]
    assert_chlo_matches_xla(f"chlo.{name}", x, max_ulp=max_ulp, atol=atol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_edge_values_exactly(dtype):
    """The values XLA pins down: poles, +-1, infinities, NaN."""
    inf, nan = np.inf, np.nan
    cases = [
        ("lgamma", [0.0, -0.0, -1.0, -2.0, -3.0, inf, -inf, nan, 1.0, 2.0]),
        ("digamma", [-1.0, -2.0, -7.0, inf, nan]),
        ("erf_inv", [1.0, -1.0, 0.0, -0.0, 1.5, -2.0, nan]),
        ("erf", [inf, -inf, nan, 0.0, -0.0, 5.0, -5.0]),
        ("erfc", [inf, -inf, nan, 0.0, 30.0, -30.0]),
        ("bessel_i1e", [inf, -inf, nan, 0.0, -0.0]),
    ]
    for name, values in cases:
        x = np.array(values).astype(dtype)
        assert_chlo_matches_xla(f"chlo.{name}", x, max_ulp=0, atol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_digamma_at_zero(dtype):
    """The pole at 0: -inf on both sides, as XLA >= 0.12 gives (XLA 0.10
    gave NaN; scipy gives -inf at +0 and +inf at -0)."""
    from pjrt_ref.interpreter import load

    from test_ops_chlo_oracle import unary_program

    x = np.array([0.0, -0.0]).astype(dtype)
    (ours,) = load(unary_program("chlo.digamma", x))(x)
    assert ours.dtype == x.dtype and np.all(np.isneginf(ours.astype(np.float64)))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_zeta_matches_xla(dtype):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(1, 12, 800), [1, 2, 3, 0.5, 2, 2, 3, np.nan, 4, 4, 2]])
    q = np.concatenate([rng.uniform(-5, 10, 800), [1, 0, -1, 1, -2.5, -2, -3, 1, 0.001, np.inf, 1e-3]])
    max_ulp = {"float32": 2, "float64": 3}.get(dtype.name, 1)
    assert_chlo_matches_xla("chlo.zeta", x.astype(dtype), q.astype(dtype), max_ulp=max_ulp)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_polygamma_matches_xla(dtype):
    """polygamma(n, x): n = 0 is digamma; n must be a natural number (NaN
    otherwise)."""
    rng = np.random.default_rng(2)
    n = np.concatenate([rng.integers(0, 5, 800).astype(float), [0, 1, -1, 1.5, 2, 3, np.nan]])
    x = np.concatenate([rng.uniform(-4, 10, 800), [1, 0, 1, 1, -2, 2.5, 1]])
    max_ulp = {"float32": 8, "float64": 8}.get(dtype.name, 1)
    assert_chlo_matches_xla("chlo.polygamma", n.astype(dtype), x.astype(dtype),
                            max_ulp=max_ulp, atol=1e-5 if dtype == np.float32 else 1e-12)


def test_narrow_float_types_compute_in_f32():
    """f8 operands (which JAX cannot lower lgamma for) compute in f32 and
    round once, like the f16/bf16 cases checked against XLA above."""
    import ml_dtypes
    from pjrt_ref.interpreter import load

    from test_ops_chlo_oracle import run_on_xla, unary_program

    x = np.array([0.5, 1.5, 3.0, -2.5, 7.0], dtype=ml_dtypes.float8_e4m3fn)
    ours = load(unary_program("chlo.lgamma", x))(x)[0]
    wide = x.astype(np.float32)
    expected = run_on_xla(unary_program("chlo.lgamma", wide), wide)[0]
    np.testing.assert_array_equal(ours, expected.astype(x.dtype))
