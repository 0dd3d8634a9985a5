"""exp, expm1, tanh, logistic, sine and cosine for float32 in fused numba
loops, written so that LLVM can vectorise the loop around them.

Why: the unfused kernels compute float32 transcendentals in float64 and round
once (numpy's float64 functions, see `ops/elementwise_support.widen_for_math`).
A fused loop calling libm's `exp`/`tanh` per element cannot be vectorised,
and is slower than numpy's SIMD float64 code (docs/performance-design.md,
"Design notes moved from the code"). The functions here keep the same recipe --
compute in float64, round once to float32 -- with straight-line float64
code (range reduction, a polynomial, selects instead of branches, no
calls), which LLVM turns into AVX2/AVX-512 code inside the fused loop.

Sine and cosine reduce x to r = x - k pi/2 (|r| <= pi/4 + a little) in
one of two ways. For |x| < 2^40 (SMALL_ANGLE), k pi/2 is subtracted in
three pieces (Cody and Waite); the first subtraction is exact and the
others lose no more than a rounding of r itself. For larger |x| (a float32
that large is an integer multiple of 2^17 or more), x 2/pi is summed
modulo 4 from products of x with 28-bit pieces of 2/pi, each exact, and
each reduced modulo 4 exactly before the sum (Payne and Hanek's idea):
pieces whose products are multiples of 4 drop out by themselves, so no
table lookup by exponent is needed. Either way r carries a relative error
below 2^-51. In a vectorised loop both ways are computed for every element
and one is selected, and the large one costs three times the rest; so a
loop over many elements runs the small one only and starts again with
both if an element was large (`sin_small_f32`, codegen.element_loop).

Accuracy. Every function's float64 value has a relative error below about
4 ulp of float64 (2^-50): a Taylor polynomial of degree 13 on |r| <= ln(2)/2
(truncation below 2^-56; for sine and cosine, degree 17 and 18 on
|r| <= 0.8, below 2^-60), evaluated with fused multiply-adds, plus a few
roundings. Rounded to float32, the result is therefore the correctly
rounded one except when the exact value lies within 2^-50 (relative) of a
point halfway between two float32 numbers, and then it is off by one ulp
of float32. Bound: at most 1 ulp of float32 from the correctly rounded
result. Measured over all 2^32 float32 inputs against numpy's float64
function rounded to float32 (what the unfused interpreter returns): exp,
expm1, tanh, sine and cosine agree on every input; logistic differs on one input,
x = 9.894371e-06, by 1 ulp, and there ours is the correctly rounded value
(0.50000244, checked with mpmath at 200 bits: the exact value lies 2^-54
below the halfway point, which numpy's float64 exp does not resolve).
XLA CPU's own float32 approximations are up to 5 ulp (exp, expm1), 4 ulp
(tanh), 2 ulp (logistic) and 1 ulp (sine, cosine) from the correctly
rounded result, measured on every 4099th float32 bit pattern. `tests/scripts/sweep_f32_math.py` repeats the
sweep over all inputs.

Special values follow C99 Annex F as numpy's do: exp(-inf) = 0,
exp(+inf) = +inf, expm1(-inf) = -1, tanh(+-inf) = +-1, logistic(-inf) = 0,
logistic(+inf) = 1, sin(+-inf) = cos(+-inf) = NaN, NaN in gives NaN out,
expm1(-0) = tanh(-0) = sin(-0) = -0, and
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

import functools
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
# pi/2 in three float64 pieces (P1 + P2 + P3 to 161 bits), and 2/pi.
PIO2_1 = 1.5707963267948966
PIO2_2 = 6.123233995736766e-17
PIO2_3 = -1.4973849048591698e-33
TWO_OVER_PI = 0.6366197723675814
# Below this |x|, k = round(x 2/pi) < 2^39 and k * PIO2_1 is exact.
SMALL_ANGLE = 2.0 ** 40
# 2/pi's first 224 bits in eight pieces of 28: x (24 significant bits) times
# a piece is exact in float64. Written in hex so the bits can be read.
TWO_OVER_PI_PIECES = tuple(float.fromhex(h) for h in (
    "0x1.45f306cp-1", "0x1.c9c882ap-29", "0x1.4fe13a8p-59", "0x1.f47d4d0p-86",
    "0x1.bb81b6cp-113", "0x1.4acc9e0p-143", "0x1.0e4107cp-170", "0x1.ca2c756p-197"))
# Taylor coefficients of sin after r (r^3 ... r^17) and of cos after 1
# (r^2 ... r^18): on |r| <= 0.8 both truncate below 2^-60 (relative).
S3, S5, S7, S9 = -1 / 6, 1 / 120, -1 / 5040, 1 / 362880
S11, S13, S15, S17 = -1 / 39916800, 1 / 6227020800, -1 / 1307674368000, 1 / 355687428096000
K2, K4, K6, K8 = -1 / 2, 1 / 24, -1 / 720, 1 / 40320
K10, K12, K14, K16 = -1 / 3628800, 1 / 479001600, -1 / 87178291200, 1 / 20922789888000
K18 = -1 / 6402373705728000


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


def two_sum(a, b):
    """(s, e) with s = a + b rounded and s + e = a + b exactly (Knuth)."""
    s = a + b
    b_part = s - a
    return s, (a - (s - b_part)) + (b - b_part)


def quarter_turns_small(x):
    """(k + ROUNDER, r) with x = k pi/2 + r for |x| < SMALL_ANGLE, k rounded
    as in split_ln2 (the sum's low bits are k's, whose low two give the
    quadrant). x - k PIO2_1 is exact: k PIO2_1 and x (a float32 of at least
    pi/4 when k != 0) are multiples of 2^-52 less than 1 apart."""
    shifted = fma(x, TWO_OVER_PI, ROUNDER)
    k = shifted - ROUNDER
    r = fma(k, -PIO2_3, fma(k, -PIO2_2, fma(k, -PIO2_1, x)))
    return shifted, r


def quarter_turns_large(x):
    """(k + ROUNDER, r) as quarter_turns_small gives them, for any float32 x: the sum
    of x * piece modulo 4 over TWO_OVER_PI_PIECES, kept as a float64 pair,
    then times pi/2. Each product p is exact, and so is p - 4 round(p / 4),
    a multiple of p's last bit no larger than 2; the pieces whose products
    are multiples of 4 give 0."""
    total, error = 0.0, 0.0
    for piece in TWO_OVER_PI_PIECES:
        product = x * piece
        total, new_error = two_sum(total, product - 4.0 * np.rint(product * 0.25))
        error += new_error
    shifted = total + ROUNDER
    turns, low = two_sum(total - (shifted - ROUNDER), error)
    head = turns * PIO2_1
    tail = fma(turns, PIO2_1, -head) + (turns * PIO2_2 + low * PIO2_1)
    return shifted, head + tail


def sin_cos_reduced(r, quadrant):
    """sin(r + quadrant pi/2) for |r| <= 0.8: one of sin(r), cos(r), with
    its sign, chosen by the quadrant's low two bits."""
    r2 = r * r
    q = fma(S17, r2, S15)
    q = fma(q, r2, S13)
    q = fma(q, r2, S11)
    q = fma(q, r2, S9)
    q = fma(q, r2, S7)
    q = fma(q, r2, S5)
    q = fma(q, r2, S3)
    sine = fma(r * r2, q, r)
    c = fma(K18, r2, K16)
    c = fma(c, r2, K14)
    c = fma(c, r2, K12)
    c = fma(c, r2, K10)
    c = fma(c, r2, K8)
    c = fma(c, r2, K6)
    c = fma(c, r2, K4)
    c = fma(c, r2, K2)
    cosine = fma(r2, c, 1.0)
    value = cosine if quadrant & 1 else sine
    return -value if quadrant & 2 else value


def sin_cos_f32(x, shift, any_size):
    """sin(x + shift pi/2) for a float32 x in float64 (shift 0: sine, 1:
    cosine); a NaN x comes back as itself, +-inf gives NaN. With
    `any_size` False (a constant at each call site), only for
    |x| < SMALL_ANGLE: the large reduction is left out of the code."""
    shifted, r = quarter_turns_small(x)
    if any_size and not abs(x) < SMALL_ANGLE:
        shifted, r = quarter_turns_large(x)
    quadrant = np.float64(shifted).view(np.int64) - ROUNDER_BITS + shift
    value = sin_cos_reduced(r, quadrant)
    return x if x != x else value


def sin_f32(x):
    """float32 sine, computed in float64 (the caller rounds); sin(+-0) = +-0
    (the polynomial's sum would give +0 for -0)."""
    y = sin_cos_f32(x, 0, True)
    return x if x == 0.0 else y


def cos_f32(x):
    """float32 cosine, computed in float64 (the caller rounds)."""
    return sin_cos_f32(x, 1, True)


def sin_small_f32(x):
    """sin_f32 for |x| < SMALL_ANGLE only (codegen.element_loop)."""
    y = sin_cos_f32(x, 0, False)
    return x if x == 0.0 else y


def cos_small_f32(x):
    """cos_f32 for |x| < SMALL_ANGLE only (codegen.element_loop)."""
    return sin_cos_f32(x, 1, False)


# In dependency order: each function is defined before its first caller.
FUNCTIONS = (clamp_keep_nan, expm1_reduced, split_ln2, exp_f64, expm1_f64,
             exp_f32, expm1_f32, tanh_f32, logistic_f32, two_sum, quarter_turns_small,
             quarter_turns_large, sin_cos_reduced, sin_cos_f32, sin_f32, cos_f32, sin_small_f32,
             cos_small_f32)
# What generated code calls (codegen adds this module's source to a kernel
# only when it calls one of them).
ENTRY_POINTS = ("exp_f32", "expm1_f32", "tanh_f32", "logistic_f32", "sin_f32", "cos_f32",
                "sin_small_f32", "cos_small_f32")
CONSTANTS = ("LN2_HI", "LN2_LO", "INV_LN2", "ROUNDER", "ROUNDER_BITS", "EXP_CLAMP",
             "TANH_CLAMP", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "C11",
             "C12", "C13", "PIO2_1", "PIO2_2", "PIO2_3", "TWO_OVER_PI", "SMALL_ANGLE",
             "TWO_OVER_PI_PIECES", "S3", "S5", "S7", "S9", "S11", "S13", "S15", "S17",
             "K2", "K4", "K6", "K8", "K10", "K12", "K14", "K16", "K18")


@functools.cache
def prelude_source() -> str:
    """The constants and functions above as source for a generated kernel
    file: `fma` becomes a numba intrinsic, the others inlined numba
    functions. Made on first use: reading the source takes milliseconds,
    which a program without these functions need not pay."""
    lines = ["from numba.extending import intrinsic", ""]
    lines += [f"{name} = {globals()[name]!r}" for name in CONSTANTS]
    lines += ["", "", "@intrinsic", inspect.getsource(fma).rstrip()]
    for function in FUNCTIONS:
        lines += ["", "", '@njit(cache=True, error_model="numpy", inline="always")',
                  inspect.getsource(function).rstrip()]
    return "\n".join(lines) + "\n"
