"""exp, expm1, tanh and logistic for float32 in fused numba loops, written so
that LLVM can vectorise the loop around them.

Why: the unfused kernels compute float32 transcendentals in float64 and round
once (numpy's float64 functions, see `ops/elementwise_support.widen_for_math`).
A fused loop calling libm's `exp`/`tanh` per element cannot be vectorised,
and is slower than numpy's SIMD float64 code (benchmarks/README.md, "Design
notes moved from the code"). The functions here keep the same recipe --
compute in float64, round once to float32 -- with straight-line float64
code (range reduction, a polynomial, selects instead of branches, no
calls), which LLVM turns into AVX2/AVX-512 code inside the fused loop.

Accuracy. Every function's float64 value has a relative error below about
4 ulp of float64 (2^-50): a Taylor polynomial of degree 13 on |r| <= ln(2)/2
(truncation below 2^-56), evaluated with fused multiply-adds, plus a few
roundings. Rounded to float32, the result is therefore the correctly
rounded one except when the exact value lies within 2^-50 (relative) of a
point halfway between two float32 numbers, and then it is off by one ulp
of float32. Bound: at most 1 ulp of float32 from the correctly rounded
result. Measured over all 2^32 float32 inputs against numpy's float64
function rounded to float32 (what the unfused interpreter returns): exp,
expm1 and tanh agree on every input; logistic differs on one input,
x = 9.894371e-06, by 1 ulp, and there ours is the correctly rounded value
(0.50000244, checked with mpmath at 200 bits: the exact value lies 2^-54
below the halfway point, which numpy's float64 exp does not resolve).
XLA CPU's own float32 approximations are up to 5 ulp (exp, expm1), 4 ulp
(tanh) and 2 ulp (logistic) from the correctly rounded result, measured on
every 4099th float32 bit pattern. `tests/scripts/sweep_f32_math.py` repeats the
sweep over all inputs.

Special values follow C99 Annex F as numpy's do: exp(-inf) = 0,
exp(+inf) = +inf, expm1(-inf) = -1, tanh(+-inf) = +-1, logistic(-inf) = 0,
logistic(+inf) = 1, NaN in gives NaN out, expm1(-0) = tanh(-0) = -0, and
results under- and overflow exactly as a correctly rounded float32 would
(subnormal results are kept, not flushed).

The functions are plain Python that numba compiles: `codegen` pastes their
source (`prelude_source()`) into every generated kernel file that calls
one of them (`ENTRY_POINTS`), so that a change here changes those kernels'
hashes and numba's disk cache cannot serve stale machine code. Inputs are
float64 (a float32 widened exactly); the caller rounds the result to
float32.
"""
from __future__ import annotations

import inspect
import math

import numpy as np

# ln 2 split in two (fdlibm's ln2_hi, ln2_lo): ln2_hi has 21 trailing zero
# bits, so k * LN2_HI is exact for every |k| < 2^21 used here.
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
INV_LN2 = 1.44269504088896338700e+00
# Adding 1.5 * 2^52 rounds a float64 of magnitude < 2^51 to an integer
# (to nearest even) and leaves that integer in the low bits of the sum.
ROUNDER = 6755399441055744.0
ROUNDER_BITS = 0x4338000000000000
# |x| beyond this gives +-inf, 0 or -1 in float32 for exp/expm1 (88.7 and
# -104 are the limits); clamping keeps 2^k a normal float64.
EXP_CLAMP = 120.0
# tanh(x) rounds to +-1 in float32 for |x| > 9.1 and to 1 in float64 for
# |x| > 19.1; clamping keeps expm1(2|x|) finite.
TANH_CLAMP = 20.0
# 1 / n! for n = 2..13: the Taylor coefficients of expm1 after r.
C2, C3, C4, C5 = 1 / 2, 1 / 6, 1 / 24, 1 / 120
C6, C7, C8, C9 = 1 / 720, 1 / 5040, 1 / 40320, 1 / 362880
C10, C11, C12, C13 = 1 / 3628800, 1 / 39916800, 1 / 479001600, 1 / 6227020800


def fma(typingctx, a, b, c):
    """a * b + c rounded once (LLVM's llvm.fma: a hardware FMA where there
    is one). A numba intrinsic (`prelude_source` adds the decorator): only
    the polynomials here use it, while the kernels' own arithmetic must
    round after each operation as the unfused ops do, so a blanket
    `fastmath={"contract"}` is not an option. One FMA instead of a multiply
    and an add is both faster and more accurate."""
    from numba import types

    signature = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return signature, codegen


def clamp_keep_nan(x, limit):
    """x clamped to [-limit, limit]; NaN stays NaN (both tests are false)."""
    x = limit if x > limit else x
    return -limit if x < -limit else x


def expm1_reduced(r):
    """e^r - 1 for |r| <= ln(2)/2: Taylor polynomial to r^13, Horner form,
    with r added last so that small r keep full relative accuracy."""
    q = fma(C13, r, C12)
    q = fma(q, r, C11)
    q = fma(q, r, C10)
    q = fma(q, r, C9)
    q = fma(q, r, C8)
    q = fma(q, r, C7)
    q = fma(q, r, C6)
    q = fma(q, r, C5)
    q = fma(q, r, C4)
    q = fma(q, r, C3)
    q = fma(q, r, C2)
    return fma(r * r, q, r)


def split_ln2(x):
    """(k, r, 2^k) with x = k ln 2 + r, |r| <= ln(2)/2, for |x| <= 2^20.

    k is rounded with ROUNDER instead of a float-to-int conversion, which
    is undefined for NaN in LLVM; a NaN x gives a NaN r and any k."""
    shifted = fma(x, INV_LN2, ROUNDER)
    k = shifted - ROUNDER
    r = fma(-k, LN2_LO, fma(-k, LN2_HI, x))
    k_bits = np.float64(shifted).view(np.int64) - ROUNDER_BITS
    scale = np.int64((k_bits + 1023) << 52).view(np.float64)
    return k, r, scale


def exp_f64(x):
    """e^x for a float64 x; valid for |x| <= EXP_CLAMP (callers clamp)."""
    _, r, scale = split_ln2(x)
    return fma(scale, expm1_reduced(r), scale)


def expm1_f64(x):
    """e^x - 1 for a float64 x, |x| <= EXP_CLAMP: 2^k (e^r - 1) + (2^k - 1),
    where 2^k - 1 is exact, so no cancellation loses more than a bit.
    expm1(-0) is +0 here (callers that care fix the sign)."""
    _, r, scale = split_ln2(x)
    return fma(scale, expm1_reduced(r), scale - 1.0)


def exp_f32(x):
    """float32 exp, computed in float64 (the caller rounds). A NaN x gives
    a NaN r, and the final fused multiply-add returns NaN whatever 2^k is."""
    return exp_f64(clamp_keep_nan(x, EXP_CLAMP))


def expm1_f32(x):
    """float32 expm1, computed in float64 (the caller rounds); NaN as in
    exp_f32, and expm1(+-0) = +-0."""
    y = expm1_f64(clamp_keep_nan(x, EXP_CLAMP))
    return x if x == 0.0 else y


def tanh_f32(x):
    """float32 tanh, computed in float64 as e / (e + 2) with e = expm1(2|x|)
    (no cancellation near 0), sign restored afterwards (tanh(-0) = -0)."""
    e = expm1_f64(2.0 * clamp_keep_nan(abs(x), TANH_CLAMP))
    return math.copysign(e / (e + 2.0), x)


def logistic_f32(x):
    """float32 logistic 1 / (1 + e^-x), computed in float64 (the caller
    rounds); for x < -EXP_CLAMP the exact result is below float32's
    smallest subnormal, for x > EXP_CLAMP it rounds to 1."""
    return 1.0 / (1.0 + exp_f64(-clamp_keep_nan(x, EXP_CLAMP)))


# In dependency order: each function is defined before its first caller.
FUNCTIONS = (clamp_keep_nan, expm1_reduced, split_ln2, exp_f64, expm1_f64,
             exp_f32, expm1_f32, tanh_f32, logistic_f32)
# What generated code calls (codegen adds this module's source to a kernel
# only when it calls one of them).
ENTRY_POINTS = ("exp_f32", "expm1_f32", "tanh_f32", "logistic_f32")
CONSTANTS = ("LN2_HI", "LN2_LO", "INV_LN2", "ROUNDER", "ROUNDER_BITS", "EXP_CLAMP",
             "TANH_CLAMP", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "C11",
             "C12", "C13")


def prelude_source() -> str:
    """The constants and functions above as source for a generated kernel
    file: `fma` becomes a numba intrinsic, the others inlined numba
    functions."""
    lines = ["from numba.extending import intrinsic", ""]
    lines += [f"{name} = {globals()[name]!r}" for name in CONSTANTS]
    lines += ["", "", "@intrinsic", inspect.getsource(fma).rstrip()]
    for function in FUNCTIONS:
        lines += ["", "", '@njit(cache=True, error_model="numpy", inline="always")',
                  inspect.getsource(function).rstrip()]
    return "\n".join(lines) + "\n"
