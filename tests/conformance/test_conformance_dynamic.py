"""Dynamic cases of `pjrt-ref conformance`: shape-polymorphic `@main`s without
checks (conformance/dynamic.py, conformance/oracle.py).

The runner runs the hand-written files in tests/data/conformance/dynamic;
their expected statuses follow from how they were written. The oracle is
StableHLO's C++ reference interpreter, which the runner itself calls.
"""
from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np
import pytest

from pjrt_ref.conformance import dynamic, oracle
from pjrt_ref.conformance.runner import main
from pjrt_ref.interpreter import load
from pjrt_ref.interpreter.types import TensorType
from tests.support.repo_paths import DATA

DYNAMIC = str(DATA / "conformance" / "dynamic")

EXPECTED_STATUSES = {
    "two_dimension_variables.mlir": "pass",
    "round_trip_fails_chlo.mlir": "fail",
    "oracle_cannot_run_rng_bit_generator.mlir": "unsupported",
    "shape_assertion_fails.mlir": "error",
}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """Run the runner once over the dynamic test files: file name -> case."""
    path = tmp_path_factory.mktemp("dynamic") / "report.json"
    main([DYNAMIC, "--jobs", "2", "--json", str(path)])
    with open(path) as handle:
        return {os.path.basename(c["file"]): c for c in json.load(handle)["cases"]}


def test_every_dynamic_case_has_its_expected_status(cases):
    assert {name: c["status"] for name, c in cases.items()} == EXPECTED_STATUSES


def test_a_passing_case_says_what_was_checked(cases):
    message = cases["two_dimension_variables.mlir"]["message"]
    assert "round trip at version" in message
    assert "2 dimension argument(s)" in message and "7 argument(s)" in message
    assert "6 result(s) match the StableHLO reference interpreter" in message


def test_a_module_that_cannot_be_serialized_fails_the_round_trip(cases):
    assert "serialization round trip" in cases["round_trip_fails_chlo.mlir"]["message"]


def test_unsupported_says_why_the_oracle_could_not_run(cases):
    message = cases["oracle_cannot_run_rng_bit_generator.mlir"]["message"]
    assert "the oracle could not" in message and "reference interpreter died" in message


def test_a_broken_shape_assertion_is_our_error_with_its_message(cases):
    message = cases["shape_assertion_fails.mlir"]["message"]
    assert "pjrt-ref raised on the synthesized arguments" in message
    assert "shape_assertion_fails.mlir:14" in message
    assert "remainder 1 when computing the value of 'b' from 3 = 2*b. {placeholder} stays" \
        in message


# --- the pieces ---

def _types(*specs):
    return [TensorType(shape, np.dtype(dtype), name) for shape, dtype, name in specs]


def test_dimension_arguments_are_the_leading_integer_scalars():
    types = _types(((), np.int64, "i64"), ((), np.int64, "i64"), ((None, 4), np.float32, "f32"),
                   ((), np.int32, "i32"))
    assert dynamic.dimension_argument_count(types) == 2
    # Without any '?' there are no dimension variables.
    assert dynamic.dimension_argument_count(_types(((), np.int64, "i64"),
                                                   ((2,), np.float32, "f32"))) == 0


def test_synthesized_arguments_bind_every_dimension_consistently():
    types = _types(((), np.int64, "i64"), ((None, 4, None), np.float32, "f32"),
                   ((None,), np.int32, "i32"), ((None,), np.bool_, "i1"),
                   ((2,), ml_dtypes.bfloat16, "bf16"), ((None,), np.complex64, "complex<f32>"))
    args = dynamic.synthesize(types)
    size = dynamic.DIMENSION_SIZE
    assert args[0].shape == () and args[0] == size and args[0].dtype == np.int64
    assert [a.shape for a in args[1:]] == [(size, 4, size), (size,), (size,), (2,), (size,)]
    assert [a.dtype for a in args] == [t.dtype for t in types]
    assert 0 <= args[2].min() and args[2].max() <= 2  # index-safe integers
    for floats in (args[1], args[4].astype(np.float32), args[5].real, args[5].imag):
        assert np.all(np.abs(floats) <= 2) and np.all(floats * 4 == np.round(floats * 4))
    again = dynamic.synthesize(types)
    assert all(np.array_equal(a, b) for a, b in zip(args, again))  # seeded


def test_static_module_pins_shapes_and_drops_shape_assertions():
    with open(os.path.join(DYNAMIC, "two_dimension_variables.mlir")) as handle:
        text = handle.read()
    program = load(text)
    args = dynamic.synthesize(program.input_types)
    static = oracle.static_module(text, args, dynamic.dimension_argument_count(program.input_types))
    assert "?" not in static and "shape_assertion" not in static
    assert "tensor<3x3xf32>" in static and "dynamic_broadcast_in_dim" not in static


def test_compare_accepts_equal_and_nearly_equal_results():
    f32 = np.array([1.0, np.nan, -0.0, 3.0], np.float32)
    nearby = np.nextafter(np.nextafter(f32, np.float32(np.inf)), np.float32(np.inf))
    nearby[1:3] = [np.nan, 0.0]
    dynamic.compare([f32, np.array([1, 2], np.uint64)], [nearby, np.array([1, 2], np.uint64)])


def test_compare_names_the_first_mismatch_and_both_values():
    ours = [np.array([1, 2, 3], np.int32), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)]
    theirs = [ours[0].copy(), np.array([[1.0, 2.0], [3.5, 4.5]], np.float32)]
    with pytest.raises(dynamic.ResultMismatch) as raised:
        dynamic.compare(ours, theirs)
    message = str(raised.value)
    assert message.startswith("result 1: 2 of 4 element(s) differ; first at index [1, 0]")
    assert "3.0" in message and "3.5" in message
    with pytest.raises(dynamic.ResultMismatch, match="1 of 1 element"):
        dynamic.compare([np.array(5, np.int64)], [np.array(6, np.int64)])  # exact integers
    with pytest.raises(dynamic.ResultMismatch, match="int32\\[3\\].*int64\\[3\\]"):
        dynamic.compare([ours[0]], [ours[0].astype(np.int64)])
    with pytest.raises(dynamic.ResultMismatch, match="returned 2 result"):
        dynamic.compare(ours, theirs[:1])


def test_cases_with_checks_are_not_dynamic_cases():
    assert dynamic.has_checks('stablehlo.custom_call @check.expect_eq(%0, %1)')
    assert dynamic.has_checks('check.expect_almost_eq %0, %1 : tensor<2xf32>')
    assert not dynamic.has_checks('stablehlo.custom_call @shape_assertion(%0)')


def test_a_function_with_arguments_and_checks_stays_unsupported(tmp_path):
    source = tmp_path / "checks_with_arguments.mlir"
    source.write_text(
        "func.func @main(%arg0: tensor<1xi32>) {\n"
        "  check.expect_eq_const %arg0, dense<[1]> : tensor<1xi32>\n"
        "  func.return\n}\n")
    report = tmp_path / "report.json"
    assert main([str(source), "--jobs", "1", "--json", str(report)]) == 0
    (case,) = json.loads(report.read_text())["cases"]
    assert case["status"] == "unsupported"
    assert "only an @main without checks runs on synthesized arguments" in case["message"]
