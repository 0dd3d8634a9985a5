"""stablehlo.rng_bit_generator bit for bit against XLA CPU (THREE_FRY,
PHILOX with 2- and 3-word states, DEFAULT), and stablehlo.rng's
implementation-defined values checked for range, shape and type."""
import numpy as np
import pytest
from jax import lax

from tests.support.oracle import compare_with_jax
from tests.support.xla_oracle import assert_close, ours_and_xla
from pjrt_ref.interpreter import load

ALGORITHMS = [lax.RandomAlgorithm.RNG_THREE_FRY, lax.RandomAlgorithm.RNG_PHILOX]
KEYS = [np.array([0x12345678, 0x9ABCDEF0, 0xFFFFFFFE, 0xFFFFFFFF], np.uint32),
        np.array([0, 0, 0xFFFFFFFF, 0xFFFFFFFF], np.uint32)]


SHAPES = [(), (4, 3), (3, 1, 7), (0, 2)]
DTYPES = [np.uint8, np.uint32, np.uint64]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rng_bit_generator_matches_xla_bits(algorithm):
    """Every shape x dtype in one program per algorithm (one compilation)."""
    def fn(key):
        return [lax.rng_bit_generator(key, shape, dtype=dtype, algorithm=algorithm)
                for shape in SHAPES for dtype in DTYPES]

    for key in KEYS:
        ours, theirs = compare_with_jax(fn, key)
        assert len(ours) == len(theirs) == 2 * len(SHAPES) * len(DTYPES)
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape and a.dtype == b.dtype
            assert a.tobytes() == b.tobytes()


def test_default_algorithm_is_philox_as_on_xla_cpu():
    fn = lambda k: [lax.rng_bit_generator(k, (3, 5), dtype=np.uint32,  # noqa: E731
                                          algorithm=lax.RandomAlgorithm.RNG_DEFAULT)]
    ours, theirs = compare_with_jax(fn, KEYS[0])
    for a, b in zip(ours, theirs):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("element,dtype", [("ui32", np.uint32), ("ui64", np.uint64),
                                           ("f32", np.float32), ("i16", np.int16)])
def test_philox_with_a_three_word_state(element, dtype):
    text = f"""
func.func @main(%s: tensor<3xui64>) -> (tensor<3xui64>, tensor<3x5x{element}>) {{
  %0:2 = stablehlo.rng_bit_generator %s, algorithm = PHILOX
       : (tensor<3xui64>) -> (tensor<3xui64>, tensor<3x5x{element}>)
  return %0#0, %0#1 : tensor<3xui64>, tensor<3x5x{element}>
}}"""
    for state in ([7, 2**64 - 3, 5], [1, 2, 3]):
        ours, theirs = ours_and_xla(text, [np.array(state, np.uint64)])
        assert_close(ours[:1], theirs[:1], exact=True)
        # XLA hands float and signed outputs back as their unsigned bits.
        assert ours[1].dtype == dtype and ours[1].tobytes() == theirs[1].tobytes()


def _rng_program(distribution, element):
    return f"""
func.func @main(%a: tensor<{element}>, %b: tensor<{element}>) -> tensor<40x50x{element}> {{
  %shape = stablehlo.constant dense<[40, 50]> : tensor<2xi64>
  %0 = stablehlo.rng %a, %b, %shape, distribution = {distribution}
       : (tensor<{element}>, tensor<{element}>, tensor<2xi64>) -> tensor<40x50x{element}>
  return %0 : tensor<40x50x{element}>
}}"""


def test_rng_uniform_ranges():
    floats = load(_rng_program("UNIFORM", "f32"))(np.float32(-2.0), np.float32(3.0))[0]
    assert floats.dtype == np.float32 and floats.shape == (40, 50)
    assert floats.min() >= -2.0 and floats.max() < 3.0 and floats.std() > 1.0
    ints = load(_rng_program("UNIFORM", "i32"))(np.int32(5), np.int32(9))[0]
    assert ints.dtype == np.int32 and set(np.unique(ints)) == {5, 6, 7, 8}


def test_rng_normal_moments():
    values = load(_rng_program("NORMAL", "f64"))(np.float64(10.0), np.float64(2.0))[0]
    assert values.shape == (40, 50)
    assert abs(values.mean() - 10.0) < 0.2 and abs(values.std() - 2.0) < 0.2
