"""Transcendental functions in float64 for compiled loops, where libm gives numpy's bits.

The interpreter computes exp, log, sine, ... with numpy's float64 functions
(ops/elementwise_unary.py, MATH_UNARY_OPS). Compiled numba code calls the C
library's (`math.exp` becomes a call to libm's `exp`). Where numpy has no
SIMD version of a function for the CPU it runs on, it calls that same libm
function and the bits agree; where it has one (numpy's AVX-512 exp and log,
for instance), they may differ in the last bit now and then. So whether a
float64 transcendental may be compiled is a property of the machine, and it
is measured there (`libm_agrees`): the compiled function and numpy's are run
on 2^20 inputs (random bit patterns over every finite float64, uniform
values in each function's working range, and the special values), and
compiled code is used only if every result has the same bits. Two
different implementations of one function, each within an ulp of the exact
value, part on a few in a thousand such inputs; the same function never.

Half-precision loops (half_precision.py) compute their transcendentals with
the same expressions and sweep all 65,536 inputs of their type instead.
"""
from __future__ import annotations

import functools

import numpy as np

from pjrt_ref.interpreter import registry
from pjrt_ref.interpreter.steps import OpInfo
from pjrt_ref.interpreter.types import TensorType

F64 = np.dtype(np.float64)

# op -> float64 expression over its operand {0}: numpy's float64 function in
# the interpreter, libm's here (logistic as the interpreter writes it).
MATH_F64 = {
    "stablehlo.exponential": "math.exp(float64({0}))",
    "stablehlo.exponential_minus_one": "math.expm1(float64({0}))",
    "stablehlo.log": "math.log(float64({0}))",
    "stablehlo.log_plus_one": "math.log1p(float64({0}))",
    "stablehlo.sine": "math.sin(float64({0}))",
    "stablehlo.cosine": "math.cos(float64({0}))",
    "stablehlo.tanh": "math.tanh(float64({0}))",
    "stablehlo.logistic": "1.0 / (1.0 + math.exp(-float64({0})))",
}

SAMPLES = 1 << 20


def probe_inputs() -> np.ndarray:
    """The inputs `libm_agrees` compares on (float64)."""
    rng = np.random.default_rng(64)
    patterns = rng.integers(0, 1 << 64, SAMPLES // 2, dtype=np.uint64, endpoint=False).view(np.float64)
    quarter = SAMPLES // 8
    ranges = [rng.uniform(-1, 1, quarter), rng.uniform(-50, 50, quarter),
              rng.uniform(-800, 800, quarter), rng.uniform(0, 1e6, quarter)]
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 709.78, -745.2, 1e-310, -1e-310,
                         np.pi, np.pi / 2, 1e22, 5e-324])
    return np.concatenate([patterns[np.isfinite(patterns)], *ranges, specials])


@functools.cache
def libm_agrees(op_name: str) -> bool:
    """Whether the compiled float64 `op_name` gives the interpreter's bits
    on this machine (see the module docstring). NaNs compare as NaNs."""
    return compiled_matches_interpreter(op_name, probe_inputs(), MATH_F64[op_name], F64, "f64")


def compiled_matches_interpreter(op_name: str, inputs: np.ndarray, template: str, held, element_type: str) -> bool:
    """Whether `template` (over {0}), compiled in a numba loop that holds
    values as dtype `held`, gives the interpreter's kernel's bits for
    `op_name` on every one of `inputs`; NaNs compare as NaNs (their
    payloads are the jit's named exception). The probe behind libm_agrees
    and half_precision.math_agrees."""
    from pjrt_ref.interpreter.native import codegen

    ttype = TensorType(shape=inputs.shape, dtype=inputs.dtype, element_type=element_type)
    op = OpInfo(name=op_name, location="float64_math.compiled_matches_interpreter", attrs={},
                operand_types=(ttype,), result_types=(ttype,))
    with np.errstate(all="ignore"):
        expected = np.asarray(registry.lookup(op_name).fn(op, inputs))
    source = codegen.fused_loop_source([("x", True, held)], [("v", template.format("x"), held)], [("v", held)])
    kernel = codegen.compile_safely(codegen.compile_fused, source, [(held, True)], [held])
    if kernel is None:
        return False
    compiled = np.empty(inputs.shape, held)
    kernel(inputs.size, inputs.astype(held), compiled)
    compiled = compiled.astype(inputs.dtype)
    bits = f"u{inputs.dtype.itemsize}"
    same = compiled.view(bits) == expected.view(bits)
    nan = np.isnan(compiled.astype(np.float64)) & np.isnan(expected.astype(np.float64))
    return bool(np.all(same | nan))
