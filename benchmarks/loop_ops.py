"""W13, ops in loops: every op family that can sit in a loop body, per element type.

Each row is `fori_loop(0, n, body, c)` over a carried vector `c` of 8
elements, where the body applies one op to `c` (and, for binary ops, to a
vector `y` passed in: the op cannot be hoisted out of the loop). The worker
times each row at two trip counts and reports the time per iteration, the
slope, so the fixed cost of a call (dispatch, compile caches) drops out. On
pjrt_ref it also reports whether the loop runs compiled (optimiser/loops.py) or
interpreted op by op: a loop whose body holds one op the loop compiler does
not translate runs interpreted as a whole.

The worker runs W13 with 64-bit types on (`jax_enable_x64`), so int64,
uint64 and float64 rows are what a user's x64 program gives.
"""
from __future__ import annotations

import numpy as np

SIZE = 8

INTEGER_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint32", "uint64")
FLOAT_TYPES = ("float32", "float64")
SMALL_FLOAT_TYPES = ("float16", "bfloat16")


def _binary(lax, jnp):
    return {
        "add": lax.add, "subtract": lax.sub, "multiply": lax.mul, "divide": lax.div,
        "remainder": lax.rem, "maximum": lax.max, "minimum": lax.min,
        "compare+select": lambda c, y: lax.select(c < y, c, y),
    }


def _integer_only(lax, jnp):
    return {
        "and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor,
        "shift_left": lax.shift_left, "shift_right_logical": lax.shift_right_logical,
        "shift_right_arithmetic": lax.shift_right_arithmetic,
    }


def _integer_unary(lax, jnp):
    return {"negate": lax.neg, "not": lax.bitwise_not, "popcnt": lax.population_count,
            "count_leading_zeros": lax.clz, "abs": lax.abs, "sign": lax.sign}


def _float_unary(lax, jnp):
    return {"negate": lax.neg, "abs": lax.abs, "floor": lax.floor, "ceil": lax.ceil,
            "round_nearest_even": lambda c: lax.round(c, lax.RoundingMethod.TO_NEAREST_EVEN),
            "round_nearest_afz": lax.round, "sign": lax.sign, "sqrt": lambda c: lax.sqrt(lax.abs(c)),
            "exponential": lambda c: lax.exp(lax.min(c, c * 0 + 1)), "log": lambda c: lax.log(lax.abs(c) + 1),
            "sine": lax.sin, "cosine": lax.cos, "tanh": lax.tanh, "logistic": lax.logistic,
            "is_finite+select": lambda c: lax.select(lax.is_finite(c), c, c * 0)}


def _mixed(lax, jnp):
    """Ops that change shape or type: converts, bitcasts, clamp, reductions, slices, dots."""
    return {
        ("convert int32->float32->int32", "int32"):
            lambda c, y: lax.convert_element_type(lax.convert_element_type(c, np.float32) * 1.5, np.int32),
        ("bitcast_convert f32<->u32", "float32"):
            lambda c, y: lax.bitcast_convert_type(lax.bitcast_convert_type(c, np.uint32) ^ np.uint32(1),
                                                  np.float32),
        ("clamp", "float32"): lambda c, y: lax.clamp(np.float32(-2), c + y, np.float32(2)),
        ("clamp", "int32"): lambda c, y: lax.clamp(np.int32(-100), c + y, np.int32(100)),
        ("reduce sum", "float32"): lambda c, y: c * 0.5 + jnp.sum(c) * y,
        ("reduce max", "int32"): lambda c, y: c - jnp.max(c) + y,
        ("dynamic_slice", "float32"): lambda c, y: c + lax.dynamic_slice(
            jnp.concatenate([c, y]), (lax.convert_element_type(c[0], np.int32) % 8,), (SIZE,)),
        ("dynamic_update_slice", "float32"): lambda c, y: lax.dynamic_update_slice(
            c, y[:2], (lax.convert_element_type(jnp.abs(c[0]), np.int32) % 6,)),
        ("iota", "int32"): lambda c, y: c + lax.iota(np.int32, SIZE) * y,
        ("dot 8x8", "float32"): lambda c, y: jnp.tanh(jnp.outer(y, y) @ c),
    }


def rows() -> list[tuple[str, object, tuple]]:
    """(label, fn(n, c, y), (c, y)) for every row of W13."""
    import jax.numpy as jnp
    from jax import lax

    found = []

    def add(label, dtype, op, binary):
        c = _start(dtype)
        y = _operand(dtype)

        def fn(n, c, y, op=op, binary=binary):
            return lax.fori_loop(0, n, (lambda i, c: op(c, y)) if binary else (lambda i, c: op(c)), c)

        found.append((f"{label} {dtype}", fn, (c, y)))

    for dtype in INTEGER_TYPES:
        for name, op in {**_binary(lax, jnp), **_integer_only(lax, jnp)}.items():
            add(name, dtype, op, True)
        for name, op in _integer_unary(lax, jnp).items():
            if name in ("abs", "sign") and dtype.startswith("u"):
                continue
            add(name, dtype, op, False)
    for dtype in FLOAT_TYPES + SMALL_FLOAT_TYPES:
        for name, op in _binary(lax, jnp).items():
            if dtype in SMALL_FLOAT_TYPES and name not in ("add", "multiply", "maximum"):
                continue
            add(name, dtype, op, True)
        for name, op in _float_unary(lax, jnp).items():
            if dtype in SMALL_FLOAT_TYPES and name not in ("negate", "exponential", "tanh"):
                continue
            add(name, dtype, op, False)
    for (name, dtype), op in _mixed(lax, jnp).items():
        add(name, dtype, op, True)
    return found


def _start(dtype: str) -> np.ndarray:
    import jax.numpy as jnp

    values = np.linspace(-3, 3, SIZE)
    if dtype.startswith("u"):
        values = np.abs(values) * 5 + 1
    elif dtype.startswith("int"):
        values = values * 5
    return np.asarray(values, dtype=jnp.dtype(dtype))


def _operand(dtype: str) -> np.ndarray:
    import jax.numpy as jnp

    values = np.arange(1, SIZE + 1) % 3 + 1          # nonzero: divisors, shift amounts 1..3
    if dtype in FLOAT_TYPES + SMALL_FLOAT_TYPES:
        values = values * 0.25 + 0.5
    return np.asarray(values, dtype=jnp.dtype(dtype))
