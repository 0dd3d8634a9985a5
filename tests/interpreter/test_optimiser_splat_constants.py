"""Big splat constants (interpreter/optimiser/splat_constants.py): a fused run reads
one as its scalar, so the plan never writes it out; a constant something
else reads is written out once, as an ordinary array. Issue 32: JAX folds
broadcasts of constants into full-shape splats, and a PRNG program on 10^7
elements held 900 MB of them."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.jit_support import assert_same_values, entry_steps, load_with

N = 1 << 15                      # 128 KB of f32: over the size from which a splat is split
T = f"tensor<{N}xf32>"


def _program(body: str, arguments: str, results: str) -> str:
    return f"func.func @main({arguments}) -> ({results}) {{\n{body}\n}}"


def _big_arrays_held(program) -> list:
    """The arrays of N elements or more the plan holds: preset in its frame or
    filled in by a constant's kernel."""
    frame = program.function.initial_frame or ()
    held = [value for value in frame if isinstance(value, np.ndarray) and value.size >= N]
    for step in entry_steps(program):
        filled = step.op.cache.get("filled")
        if isinstance(filled, np.ndarray) and filled.size >= N:
            held.append(filled)
    return held


# x * 2.5 + 1: both constants read only by one fused run.
ONLY_FUSED = _program(f"""
  %c = stablehlo.constant dense<2.5> : {T}
  %one = stablehlo.constant dense<1.0> : {T}
  %m = stablehlo.multiply %x, %c : {T}
  %r = stablehlo.add %m, %one : {T}
  return %r : {T}""", f"%x: {T}", T)


def test_a_splat_read_only_by_a_fused_run_is_never_written_out(monkeypatch):
    program = load_with(ONLY_FUSED, monkeypatch)
    x = np.linspace(-3, 3, N, dtype=np.float32)
    (result,) = program(x)
    np.testing.assert_array_equal(result, x * np.float32(2.5) + np.float32(1.0))
    assert _big_arrays_held(program) == []
    assert [s.op.name for s in program.function.body.steps] == ["pjrt_ref.fused"]
    assert_same_values(result, load_with(ONLY_FUSED, monkeypatch, optimize=False)(x)[0])


# The constant is read by a fused run and by a reduction, and returned.
SHARED = _program(f"""
  %c = stablehlo.constant dense<3.0> : {T}
  %m = stablehlo.multiply %x, %c : {T}
  %r = stablehlo.subtract %m, %x : {T}
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%c init: %zero) applies stablehlo.add across dimensions = [0]
       : ({T}, tensor<f32>) -> tensor<f32>
  return %r, %s, %c : {T}, tensor<f32>, {T}""", f"%x: {T}", f"{T}, tensor<f32>, {T}")


@pytest.mark.parametrize("optimize", [True, False])
def test_a_splat_other_steps_read_is_an_ordinary_array(optimize, monkeypatch):
    """The reduction and the caller get a plain row-major array of their own
    memory (kernels and the host may hand it to C), written out once."""
    program = load_with(SHARED, monkeypatch, optimize=optimize)
    x = np.arange(N, dtype=np.float32)
    for _ in range(2):
        r, s, c = program(x)
        np.testing.assert_array_equal(r, x * np.float32(3) - x)
        assert float(s) == 3.0 * N
        np.testing.assert_array_equal(c, np.full(N, 3.0, np.float32))
        c = np.asarray(c)
        assert c.flags.c_contiguous and c.flags.owndata and c.strides == (4,)
    assert len(_big_arrays_held(program)) == 1


# uint32 hash-like bit mixing with splat constants: a compiled (numba) run.
U = f"tensor<{N}xui32>"
INTEGERS = _program(f"""
  %k = stablehlo.constant dense<2654435769> : {U}
  %s = stablehlo.constant dense<13> : {U}
  %a = stablehlo.add %x, %k : {U}
  %b = stablehlo.shift_left %a, %s : {U}
  %c = stablehlo.xor %a, %b : {U}
  return %c : {U}""", f"%x: {U}", U)


def test_a_compiled_run_reads_integer_splats_as_scalars(monkeypatch):
    monkeypatch.setenv("PJRT_REF_JIT_BACKGROUND", "0")
    program = load_with(INTEGERS, monkeypatch)
    x = np.arange(N, dtype=np.uint32) * np.uint32(40503)
    (result,) = program(x)
    a = x + np.uint32(2654435769)
    np.testing.assert_array_equal(result, a ^ (a << np.uint32(13)))
    assert _big_arrays_held(program) == []


# A splat constant in a while body, read by the body's arithmetic.
IN_A_LOOP = _program(f"""
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %w:2 = stablehlo.while(%i = %zero, %v = %x) : tensor<i32>, {T}
    cond {{
      %three = stablehlo.constant dense<3> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %three, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }} do {{
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %one : tensor<i32>
      %h = stablehlo.constant dense<0.5> : {T}
      %m = stablehlo.multiply %v, %h : {T}
      %y = stablehlo.add %m, %h : {T}
      stablehlo.return %n, %y : tensor<i32>, {T}
    }}
  return %w#1 : {T}""", f"%x: {T}", T)


@pytest.mark.parametrize("jit", [True, False])
def test_a_splat_in_a_loop_body(jit, monkeypatch):
    program = load_with(IN_A_LOOP, monkeypatch, jit=jit)
    x = np.linspace(0, 8, N, dtype=np.float32)
    expected = x.copy()
    for _ in range(3):
        expected = expected * np.float32(0.5) + np.float32(0.5)
    np.testing.assert_array_equal(program(x)[0], expected)
