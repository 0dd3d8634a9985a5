"""Random numbers: `rng` and `rng_bit_generator`.

Spec "rng" (docs/spec.md#rng): UNIFORM and NORMAL values are
implementation-defined; here they come from numpy's PCG64 generator, one
stream per op, seeded deterministically.

Spec "rng_bit_generator" (docs/spec.md#rng_bit_generator): the bits are
implementation-defined by the spec, but programs (JAX's
`jax.random` with the "rbg" implementations, `lax.rng_bit_generator`) expect
exactly XLA's bits, so THREE_FRY and PHILOX reproduce XLA's bit generators
(Threefry-2x32 with 20 rounds and Philox-4x32 with 10 rounds, Salmon et al.,
"Parallel random numbers: as easy as 1, 2, 3", SC 2011), including how XLA
lays the counter space out over the output shape and how it advances the
state. DEFAULT is PHILOX, as on XLA's CPU backend.
"""
from __future__ import annotations

import numpy as np

from pjrt_ref.errors import Unimplemented
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import is_bool, is_complex, is_float, is_integer

_U32 = np.uint32
_U64 = np.uint64
_LOW32 = _U64(0xFFFFFFFF)


def _split_u64(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low 32 bits, high 32 bits) of u64 values."""
    values = values.astype(_U64)
    return (values & _LOW32).astype(_U32), (values >> _U64(32)).astype(_U32)


def _join_u32(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return low.astype(_U64) | (high.astype(_U64) << _U64(32))


# ---------------------------------------------------------------------------
# Threefry-2x32, 20 rounds.

_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = _U32(0x1BD11BDA)


def _rotate_left(value: np.ndarray, distance: int) -> np.ndarray:
    return (value << _U32(distance)) | (value >> _U32(32 - distance))


def threefry2x32(x0: np.ndarray, x1: np.ndarray, key0: _U32, key1: _U32):
    """The Threefry-2x32 block function applied to counter words (x0, x1)."""
    schedule = (key0, key1, np.asarray(_THREEFRY_PARITY) ^ key0 ^ key1)
    x0, x1 = x0 + schedule[0], x1 + schedule[1]
    for block in range(5):
        for rotation in _THREEFRY_ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = _rotate_left(x1, rotation) ^ x0
        x0 = x0 + schedule[(block + 1) % 3]
        x1 = x1 + schedule[(block + 2) % 3] + np.asarray(block + 1, _U32)
    return x0, x1


def _halved_shape(shape: tuple) -> tuple[int, tuple]:
    """XLA's split of a shape for 32-bit Threefry output: the first even
    dimension (else the largest) is halved; each Threefry block then fills
    two neighbouring elements of that dimension."""
    if not shape:
        return 0, (1,)
    even = [i for i, d in enumerate(shape) if d % 2 == 0]
    split = even[0] if even else max(range(len(shape)), key=lambda i: (shape[i], -i))
    half = list(shape)
    half[split] = -(-shape[split] // 2)
    return split, tuple(half)


def _threefry_bits(key: _U64, counter: _U64, shape: tuple, width: int):
    """(bits as u32 or u64 of `shape`, new counter) of XLA's Threefry generator."""
    counter = np.asarray(counter, _U64)
    key0, key1 = _split_u64(np.asarray(key))  # 0-d arrays: wrap silently
    if width == 64:
        count = int(np.prod(shape, dtype=np.int64))
        inputs = counter + np.arange(count, dtype=_U64)
        x0, x1 = threefry2x32(*_split_u64(inputs), key0, key1)
        return _join_u32(x0, x1).reshape(shape), counter + np.asarray(count, _U64)
    split, half = _halved_shape(shape)
    count = int(np.prod(half, dtype=np.int64))
    inputs = counter + np.arange(count, dtype=_U64)
    x0, x1 = threefry2x32(*_split_u64(inputs), key0, key1)
    x0, x1 = x0.reshape(half), x1.reshape(half)
    if not shape:
        return x0.reshape(()), counter + np.asarray(count, _U64)
    pairs = np.stack([x0, x1], axis=split + 1)        # (..., half, 2, ...)
    merged_shape = list(shape)
    merged_shape[split] = 2 * half[split]
    bits = pairs.reshape(merged_shape)
    bits = bits[tuple(slice(0, d) for d in shape)]
    return np.asarray(bits, order="C"), counter + np.asarray(count, _U64)


# ---------------------------------------------------------------------------
# Philox-4x32, 10 rounds.

_PHILOX_MULTIPLIERS = (_U64(0xD2511F53), _U64(0xCD9E8D57))
_PHILOX_WEYL = (_U32(0x9E3779B9), _U32(0xBB67AE85))


def philox4x32(words: list, key0: _U32, key1: _U32) -> list:
    """The Philox-4x32 block function applied to four counter words."""
    x0, x1, x2, x3 = words
    for _ in range(10):
        product0 = x0.astype(_U64) * _PHILOX_MULTIPLIERS[0]
        product1 = x2.astype(_U64) * _PHILOX_MULTIPLIERS[1]
        high0, low0 = (product0 >> _U64(32)).astype(_U32), (product0 & _LOW32).astype(_U32)
        high1, low1 = (product1 >> _U64(32)).astype(_U32), (product1 & _LOW32).astype(_U32)
        x0, x1, x2, x3 = high1 ^ x1 ^ key0, low1, high0 ^ x3 ^ key1, low0
        key0, key1 = key0 + np.asarray(_PHILOX_WEYL[0]), key1 + np.asarray(_PHILOX_WEYL[1])
    return [x0, x1, x2, x3]


def _add_u128(low: _U64, high: _U64, amount: np.ndarray):
    """(low, high) + amount, with the carry, for u128 counters."""
    low, high = np.asarray(low, _U64), np.asarray(high, _U64)
    new_low = low + amount
    new_high = np.where(new_low < low, high + np.asarray(1, _U64), high).astype(_U64)
    return new_low, new_high


def _philox_bits(key: _U64, low: _U64, high: _U64, shape: tuple, width: int):
    """(bits as u32 or u64 of `shape`, new counter low, high) of XLA's Philox."""
    key0, key1 = _split_u64(np.asarray(key))  # 0-d arrays: wrap silently
    count = int(np.prod(shape, dtype=np.int64))
    words_needed = count * (2 if width == 64 else 1)
    blocks = -(-words_needed // 4)
    block_low, block_high = _add_u128(low, high, np.arange(blocks, dtype=_U64))
    words = philox4x32([*_split_u64(block_low), *_split_u64(block_high)], key0, key1)
    if width == 64:
        words = [_join_u32(words[0], words[1]), _join_u32(words[2], words[3])]
    # Block i supplies elements len(words)*i .. len(words)*i + len(words) - 1.
    bits = np.stack(words, axis=1).reshape(-1)[:count].reshape(shape)
    new_low, new_high = _add_u128(low, high, np.asarray(blocks, dtype=_U64))
    return bits, new_low[()], new_high[()]


# ---------------------------------------------------------------------------
# The op.

def _element_width(dtype: np.dtype) -> int:
    return dtype.itemsize * 8


def _validate_rng_bit_generator(op) -> None:
    algorithm = op.attrs.get("rng_algorithm", "DEFAULT")
    if algorithm not in ("DEFAULT", "THREE_FRY", "PHILOX"):
        raise op.error(f"unknown rng_algorithm {algorithm}", cls=Unimplemented)
    output = op.result_types[1]
    if (is_bool(output.dtype) or is_complex(output.dtype)
            or _element_width(output.dtype) not in (8, 16, 32, 64)):
        raise op.error(f"rng_bit_generator cannot produce {output.element_type}",
                       cls=Unimplemented)
    state_size = op.operand_types[0].shape[0]
    if state_size is None or state_size < 2 or (algorithm != "THREE_FRY" and state_size > 3):
        raise op.error(f"initial_state of size {state_size} does not suit {algorithm}")


@register("stablehlo.rng_bit_generator", validate=_validate_rng_bit_generator)
def rng_bit_generator(op, initial_state):
    """Spec "rng_bit_generator": (output_state, output) with XLA CPU's bits.

    The state is u64[2] for THREE_FRY ([key, counter]) and u64[2] or u64[3]
    for PHILOX ([key, counter] or [key, counter_low, counter_high]; with two
    words XLA uses the key as the counter's high word). Outputs narrower than
    32 bits keep the low bits of 32-bit words; float outputs are the raw bits.
    """
    state = initial_state.astype(_U64)
    state_type, output_type = op.result_types
    shape = tuple(output_type.shape)
    width = 64 if _element_width(output_type.dtype) == 64 else 32
    algorithm = op.attrs.get("rng_algorithm", "DEFAULT")
    key = state[0]
    new_state = state.copy()
    if algorithm == "THREE_FRY":
        bits, new_state[1] = _threefry_bits(key, state[1], shape, width)
    else:
        high = state[2] if state.shape[0] >= 3 else state[0]
        bits, low, high = _philox_bits(key, state[1], high, shape, width)
        new_state[1] = low
        if state.shape[0] >= 3:
            new_state[2] = high
    out_bits = _element_width(output_type.dtype)
    unsigned = np.dtype(f"u{out_bits // 8}")
    bits = bits.astype(unsigned)  # narrow outputs keep the low bits
    return (new_state.astype(state_type.dtype),
            np.asarray(bits.view(output_type.dtype).reshape(shape), order="C"))


def _validate_rng(op) -> None:
    distribution = op.attrs.get("rng_distribution")
    dtype = op.result_type.dtype
    if distribution == "NORMAL" and not is_float(dtype):
        raise op.error("rng NORMAL needs a floating-point result", cls=Unimplemented)
    if distribution not in ("UNIFORM", "NORMAL"):
        raise op.error(f"unknown rng_distribution {distribution}", cls=Unimplemented)
    if not (is_float(dtype) or is_integer(dtype) or is_bool(dtype)):
        raise op.error(f"rng cannot produce {op.result_type.element_type}", cls=Unimplemented)


@register("stablehlo.rng", validate=_validate_rng)
def rng(op, a, b, shape):
    """Spec "rng": UNIFORM in [a, b) (integers and floats; a >= b gives a),
    NORMAL with mean a and standard deviation b. The values are
    implementation-defined: a PCG64 stream per op, seeded with 0."""
    generator = op.cache.setdefault("generator", np.random.default_rng(0))
    result_type = op.result_type
    out_shape = tuple(int(d) for d in np.asarray(shape).reshape(-1)) if np.size(shape) else ()
    dtype = result_type.dtype
    if op.attrs["rng_distribution"] == "NORMAL":
        values = generator.normal(float(a), float(b), size=out_shape)
    elif is_float(dtype):
        low, high = float(a), float(b)
        values = low + (high - low) * generator.random(size=out_shape)
        values = np.where(values >= high, low, values) if high > low else np.full(out_shape, low)
    else:
        low, high = int(a), int(b)
        values = (generator.integers(low, high, size=out_shape, endpoint=False)
                  if high > low else np.full(out_shape, low))
    return np.asarray(values).astype(dtype)
