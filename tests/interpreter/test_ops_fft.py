"""stablehlo.fft against JAX's CPU backend: FFT, IFFT, RFFT, IRFFT over one
to three trailing dimensions, single and double precision, odd lengths."""
import numpy as np
import pytest
import jax.numpy as jnp

from tests.support.oracle import assert_same_as_jax

RNG = np.random.default_rng(5)


def _complex(shape, dtype):
    return (RNG.normal(size=shape) + 1j * RNG.normal(size=shape)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("axes", [(-1,), (-2, -1), (-3, -2, -1)])
def test_complex_transforms(dtype, axes):
    x = _complex((3, 5, 6, 7), dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.complex64 else dict(rtol=1e-12, atol=1e-12)
    assert_same_as_jax(lambda v: jnp.fft.fftn(v, axes=axes), x, **tol)
    assert_same_as_jax(lambda v: jnp.fft.ifftn(v, axes=axes), x, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_real_transforms(dtype):
    x = RNG.normal(size=(4, 9, 10)).astype(dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    assert_same_as_jax(lambda v: jnp.fft.rfft(v), x, **tol)
    assert_same_as_jax(lambda v: jnp.fft.rfftn(v, axes=(-2, -1)), x, **tol)
    spectrum = jnp.fft.rfftn(x, axes=(-2, -1))
    cdtype = np.complex64 if dtype == np.float32 else np.complex128
    spectrum = np.asarray(spectrum).astype(cdtype)
    assert_same_as_jax(lambda v: jnp.fft.irfftn(v, s=(9, 10), axes=(-2, -1)), spectrum, **tol)
    assert_same_as_jax(lambda v: jnp.fft.irfft(v, n=17), spectrum, **tol)


def test_single_precision_is_within_an_ulp_or_two():
    """Single-precision transforms are computed in single precision, as
    XLA's are (scipy's pocketfft, XLA's DUCC): each element is within 2
    float32 ulp of its row's largest magnitude from the exact (double)
    transform, and within 4 of XLA's (the two round differently from XLA
    0.12 on; they agreed bit for bit with 0.10)."""
    from tests.support.oracle import compare_with_jax

    x = RNG.normal(size=(6, 16, 17)).astype(np.float32)
    (ours,), (theirs,) = compare_with_jax(lambda v: jnp.fft.rfft(v), x)
    exact = np.fft.rfft(x.astype(np.float64))
    ulp = np.finfo(np.float32).eps * np.abs(exact).max(axis=-1, keepdims=True)
    assert ours.dtype == theirs.dtype == np.complex64
    assert np.all(np.abs(ours - exact) <= 2 * ulp)
    assert np.all(np.abs(ours - theirs) <= 4 * ulp)
