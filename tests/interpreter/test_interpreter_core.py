"""The interpreter's front door: every input format, and errors at load time.

Numerics are checked against JAX's cpu backend (tests/support/oracle.py).
"""
from __future__ import annotations

import io

import numpy as np
import pytest

from tests.support.oracle import assert_same_as_jax  # noqa: F401  (sets JAX to cpu, x64)
from pjrt_ref.errors import InvalidArgument, Unimplemented
from pjrt_ref.interpreter import load

ADD_TEXT = """
func.func @main(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.add %a, %b : tensor<3xf32>
  return %0 : tensor<3xf32>
}
"""


def _args():
    return np.array([1, 2, 3], np.float32), np.array([10, 20, 30], np.float32)


def test_text_program_runs():
    (out,) = load(ADD_TEXT)(*_args())
    np.testing.assert_array_equal(out, np.array([11, 22, 33], np.float32))


def test_bytecode_program_runs():
    from jaxlib.mlir import ir
    from pjrt_ref.interpreter.loader import make_context

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(ADD_TEXT)
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
    (out,) = load(buffer.getvalue())(*_args())
    np.testing.assert_array_equal(out, np.array([11, 22, 33], np.float32))


def test_portable_artifact_runs():
    from jaxlib.mlir.dialects import stablehlo

    artifact = stablehlo.serialize_portable_artifact_str(
        ADD_TEXT, stablehlo.get_minimum_version())
    (out,) = load(artifact)(*_args())
    np.testing.assert_array_equal(out, np.array([11, 22, 33], np.float32))


def test_jax_lowered_program_matches_jax():
    assert_same_as_jax(lambda x, y: x + y, *_args())


@pytest.mark.parametrize("source", [b"", b"\x00\x01garbage", b"ML\xefR\x00\x00broken",
                                    "func.func @main( {", b"\xff" * 64])
def test_malformed_program_is_invalid_argument(source):
    with pytest.raises(InvalidArgument):
        load(source)


def test_unknown_op_is_unimplemented_at_load_naming_op_and_location():
    text = """
    func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "mydialect.frobnicate"(%a) : (tensor<3xf32>) -> tensor<3xf32> loc("model.py":4:10)
      return %0 : tensor<3xf32>
    }
    """
    with pytest.raises(Unimplemented) as info:
        load(text)
    message = str(info.value)
    assert "mydialect.frobnicate" in message
    assert "model.py:4" in message


def test_unknown_custom_call_target_is_rejected_at_load():
    text = """
    func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {
      %0 = stablehlo.custom_call @os.system(%a) : (tensor<3xf32>) -> tensor<3xf32>
      return %0 : tensor<3xf32>
    }
    """
    with pytest.raises(Unimplemented, match="os.system"):
        load(text)


@pytest.mark.parametrize("args, problem", [
    ((np.zeros(3, np.float32),), "takes 2 argument"),
    ((np.zeros(4, np.float32), np.zeros(3, np.float32)), "shape"),
    ((np.zeros(3, np.float64), np.zeros(3, np.float32)), "element type"),
])
def test_wrong_arguments_are_invalid_argument(args, problem):
    program = load(ADD_TEXT)
    with pytest.raises(InvalidArgument, match=problem):
        program(*args)


def test_complex_constants_are_read_exactly():
    text = """
    func.func @main() -> tensor<2xcomplex<f64>> {
      %0 = stablehlo.constant dense<[(1.5, -2.0), (0x7FF0000000000000, 3.0)]> : tensor<2xcomplex<f64>>
      return %0 : tensor<2xcomplex<f64>>
    }
    """
    (out,) = load(text)()
    assert out.dtype == np.complex128
    np.testing.assert_array_equal(out, np.array([1.5 - 2j, complex(np.inf, 3.0)]))


def _chain_of_squares(n: int, length: int) -> str:
    body = "\n".join(f"  %v{i + 1} = stablehlo.multiply %v{i}, %v{i} : tensor<{n}xf32>" for i in range(length))
    return (f"func.func @main(%v0: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n{body}\n"
            f"  return %v{length} : tensor<{n}xf32>\n}}")


@pytest.mark.parametrize("optimize", ["0", "1"])
def test_a_large_value_is_released_after_its_last_reader(monkeypatch, optimize):
    # 40 squares of an 8 MB vector: holding every intermediate would peak at
    # 320 MB; released after their last reader, a few are alive at a time.
    import tracemalloc
    monkeypatch.setenv("PJRT_REF_OPTIMIZE", optimize)
    n = 2_000_000
    program = load(_chain_of_squares(n, 40))
    x = np.full(n, 1.0001, np.float32)
    tracemalloc.start()
    try:
        (out,) = program(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5 * x.nbytes
    np.testing.assert_array_equal(out[:3], np.float32(1.0001) ** (2 ** 40) * np.ones(3, np.float32))


def test_releasing_every_value_keeps_captures_results_and_arguments(monkeypatch):
    # With every value released after its last reader: a while body that reads
    # a value of the enclosing block, which is read again after the loop, and
    # the function's argument, read after the loop too, are still there.
    from pjrt_ref.interpreter import steps
    monkeypatch.setattr(steps, "RELEASE_BYTES", 0)
    program = load("""
    func.func @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
      %c = stablehlo.add %x, %x : tensor<3xf32>
      %zero = stablehlo.constant dense<0> : tensor<i32>
      %done:2 = stablehlo.while(%i = %zero, %acc = %x) : tensor<i32>, tensor<3xf32>
        cond {
          %three = stablehlo.constant dense<3> : tensor<i32>
          %more = stablehlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
          stablehlo.return %more : tensor<i1>
        } do {
          %one = stablehlo.constant dense<1> : tensor<i32>
          %next = stablehlo.add %i, %one : tensor<i32>
          %sum = stablehlo.add %acc, %c : tensor<3xf32>
          stablehlo.return %next, %sum : tensor<i32>, tensor<3xf32>
        }
      %after = stablehlo.multiply %c, %x : tensor<3xf32>
      return %done#1, %after : tensor<3xf32>, tensor<3xf32>
    }""")
    x = np.array([1, 2, 3], np.float32)
    for _ in range(2):                       # a second run starts from a fresh frame
        looped, after = program(x)
        np.testing.assert_array_equal(looped, x + 3 * (2 * x))
        np.testing.assert_array_equal(after, 2 * x * x)


CALL_AND_LOOP_TEXT = """
func.func private @twice(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = stablehlo.add %x, %x : tensor<3xf32>
  return %0 : tensor<3xf32>
}
func.func @main(%a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %three = stablehlo.constant dense<3> : tensor<i32>
  %r:2 = stablehlo.while(%i = %zero, %v = %a) : tensor<i32>, tensor<3xf32>
  cond {
    %c = stablehlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %n = stablehlo.add %i, %one : tensor<i32>
    %w = func.call @twice(%v) : (tensor<3xf32>) -> tensor<3xf32>
    %s = stablehlo.add %w, %b : tensor<3xf32>
    stablehlo.return %n, %s : tensor<i32>, tensor<3xf32>
  }
  return %r#1 : tensor<3xf32>
}
"""


def test_a_dropped_program_is_freed_by_reference_counting():
    """Each op's plan names its module (OpInfo.module), which holds the
    plans: once the program goes, ModulePlan.release breaks that cycle, so
    the plans are freed at once, not at the cyclic collector's next full
    collection (JAX's core_test counts such garbage)."""
    import gc
    import weakref

    program = load(CALL_AND_LOOP_TEXT)
    (out,) = program(*_args())
    np.testing.assert_array_equal(out, np.array([78, 156, 234], np.float32))  # ((a*2+b)*2+b)*2+b
    module_plan, entry = weakref.ref(program.module_plan), weakref.ref(program.function)
    gc.collect()
    gc.disable()
    try:
        del program
        assert module_plan() is None and entry() is None
    finally:
        gc.enable()


def test_control_dependencies_run_as_the_program_asks():
    """`jax.experimental.control_deps` (a `control_dep` custom call with no
    results, XLA's scheduling edge) changes no value: the program runs and
    gives JAX cpu's results."""
    import jax
    import jax.numpy as jnp

    schedule = pytest.importorskip("jax.experimental.control_deps",
                                   reason="this JAX has no control_deps").schedule

    from tests.support.oracle import lower_to_text

    def f(x):
        a, b = jnp.sin(x @ x), jnp.cos(x * 2)
        schedule([b, a])
        return a + b

    x = np.arange(9, dtype=np.float32).reshape(3, 3) / 10
    text = lower_to_text(f, x)
    assert "control_dep" in text
    (out,) = load(text)(x)
    np.testing.assert_allclose(out, np.asarray(jax.jit(f)(x)), rtol=1e-6, atol=1e-6)
