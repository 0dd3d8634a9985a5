"""Reading test files: chunks, cases, and the check ops' custom syntax.

The custom forms below are the assembly formats of upstream's
stablehlo/tests/CheckOps.td; jaxlib parses unregistered ops only in generic
form, so `generic_form` rewrites them. Each rewrite is checked by parsing it
with the interpreter and running the check.
"""
from __future__ import annotations

import pytest

from pjrt_ref.conformance.generic_form import to_generic_form
from pjrt_ref.conformance.testfile import cases_in_file, split_chunks
from pjrt_ref.interpreter import load
from pjrt_ref.interpreter.ops.checks import CheckFailure

JAX_STYLE = """// RUN: stablehlo-translate --interpret
module @jit_main {
  func.func public @main() -> tensor<2xf32> {
    %0 = call @inputs() : () -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
  func.func private @inputs() -> (tensor<2xf32> {mhlo.layout_mode = "default"}) {
    %cst = stablehlo.constant dense<1.0> : tensor<2xf32>
    return %cst : tensor<2xf32>
  }
}
"""

INTERPRET_STYLE = """// RUN: stablehlo-translate --interpret -split-input-file %s
func.func @first() {
  func.return
}
func.func @second() {
  func.return
}
func.func @helper(%x: tensor<i32>) -> tensor<i32> {
  func.return %x : tensor<i32>
}

// -----

module @m {
  func.func @helper(%x: tensor<i32>) -> tensor<i32> {
    func.return %x : tensor<i32>
  }
  func.func @main() {
    func.return
  }
}
// -----
"""


def test_jax_style_file_is_one_case_main(tmp_path):
    path = tmp_path / "f.mlir"
    path.write_text(JAX_STYLE)
    (case,) = cases_in_file(str(path))
    assert (case.function, case.name, case.chunk) == ("main", "main", 0)


def test_interpreter_style_cases_are_argument_free_functions_or_main(tmp_path):
    path = tmp_path / "f.mlir"
    path.write_text(INTERPRET_STYLE)
    cases = cases_in_file(str(path))
    assert [(c.chunk, c.function, c.line) for c in cases] == [
        (0, "first", 2), (0, "second", 5), (1, "main", 18)]
    assert cases[0].name == "first:2" and cases[0].id == f"{path}::first:2"


def test_chunks_keep_file_line_numbers():
    chunks = split_chunks(INTERPRET_STYLE)
    assert len(chunks) == 2  # the empty chunk after the last marker is dropped
    padded = chunks[1].padded_text().split("\n")
    assert padded[15 - 1].strip().startswith("func.func @helper")


CUSTOM_FORMS = [
    # (custom syntax, operand type) -- every check here holds for %x = [1.0, 2.0]
    ("check.expect_eq %x, %x : tensor<2xf32>", "f32"),
    ("check.expect_eq_const %x, dense<[1.0, 2.0]> : tensor<2xf32>", "f32"),
    ("check.expect_almost_eq %x, %x : tensor<2xf32>", "f32"),
    ("check.expect_almost_eq %x, %x, tolerance = 0.1 : tensor<2xf32>", "f32"),
    ("check.expect_almost_eq_const %x, dense<[1.05, 2.0]> : tensor<2xf32>, tolerance = 0.1", "f32"),
    ("check.expect_almost_eq_const %x, dense<[1.05, 2.0]> : tensor<2xf32> {tolerance = 0.1 : f64}",
     "f32"),
    ("check.expect_almost_eq_const %x,\n      dense<[1.0,\n             2.0]> : tensor<2xf32>", "f32"),
    ("check.expect_close %x, %x, max_ulp_difference = 3 : tensor<2xf32>, tensor<2xf32>", "f32"),
    ("check.expect_close %x, %x, max_ulp_difference = 3, min_ulp_difference = 0 :"
     " tensor<2xf32>, tensor<2xf32>", "f32"),
    ('"check.expect_eq_const"(%x) <{value = dense<[1.0, 2.0]> : tensor<2xf32>}>'
     " : (tensor<2xf32>) -> ()", "f32"),
    ("check.expect_almost_eq_const %x, dense<[(1.0, 0.0), (2.0, 0.0)]> : tensor<2xcomplex<f32>>",
     "complex<f32>"),
]


def _program(check: str, element: str) -> str:
    value = "[(1.0, 0.0), (2.0, 0.0)]" if element.startswith("complex") else "[1.0, 2.0]"
    return (f"func.func @main() {{\n  %x = stablehlo.constant dense<{value}> : "
            f"tensor<2x{element}>\n  {check}\n  func.return\n}}\n")


@pytest.mark.parametrize("check,element", CUSTOM_FORMS)
def test_custom_forms_become_generic_and_run(check, element):
    text = _program(check, element)
    generic = to_generic_form(text)
    assert generic.count("\n") == text.count("\n")
    assert '"check.' in generic
    load(generic)()


def test_rewritten_check_keeps_its_meaning():
    text = _program("check.expect_eq_const %x, dense<[1.0, 3.0]> : tensor<2xf32>", "f32")
    with pytest.raises(CheckFailure, match="index \\[1\\]: actual 2.0 vs expected 3.0"):
        load(to_generic_form(text))()


def test_probe_becomes_a_generic_op_with_one_result():
    line = '  %p = interpreter.probe %x, probe_id = "p0" : tensor<2xi64>'
    assert to_generic_form(line).strip() == (
        '%p = "interpreter.probe"(%x) {probe_id = "p0"} : (tensor<2xi64>) -> (tensor<2xi64>)')


def test_text_without_test_dialects_is_unchanged():
    assert to_generic_form(JAX_STYLE) == JAX_STYLE


def test_comments_are_left_alone():
    text = "// check.expect_eq %a, %b : tensor<2xi32>\n"
    assert to_generic_form(text) == text


def test_upstream_note_says_why_upstream_skips_a_file():
    from pjrt_ref.conformance.testfile import upstream_note

    assert upstream_note("// RUN-DISABLED(inaccurate) stablehlo-translate --interpret\n") == \
        "RUN-DISABLED(inaccurate)"
    assert upstream_note("// RUN: stablehlo-opt %s > %t.1\n") == \
        "its RUN lines never use --interpret"
    assert upstream_note("// RUN: stablehlo-translate --interpret %s\n") == ""
    assert upstream_note("func.func @main() {\n}\n") == ""
