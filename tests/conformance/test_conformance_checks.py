"""The check ops (interpreter/ops/checks.py) against upstream's semantics
(stablehlo/tests/CheckOps.td and CheckOps.cpp; the custom-call tolerances of
tools/StablehloTranslateMain.cpp).

ULP distances are checked against numpy's `nextafter` (and ml_dtypes' for
the narrow floats): k steps of nextafter are k ULP.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pjrt_ref.errors import InvalidArgument, PjrtRefError
from pjrt_ref.interpreter import load
from pjrt_ref.interpreter.ops.checks import (
    CheckFailure, almost_equal_elements, equal_elements, ulp_difference)

FLOATS = [np.float16, np.float32, np.float64, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
          ml_dtypes.float8_e5m2]


def _steps(start, toward, count, dtype):
    x = np.array(start, dtype=dtype)
    target = np.array(toward, dtype=dtype)
    for _ in range(count):
        x = np.nextafter(x, target)
    return x


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("start,toward", [(1.0, 100.0), (1.5, -100.0), (-0.75, -100.0)])
def test_ulp_difference_counts_nextafter_steps(dtype, start, toward):
    x = np.array(start, dtype=dtype)
    for k in (0, 1, 2, 5):
        y = _steps(start, toward, k, dtype)
        assert int(ulp_difference(x, y)) == k
        assert int(ulp_difference(y, x)) == k


@pytest.mark.parametrize("dtype", FLOATS)
def test_ulp_difference_across_zero(dtype):
    tiny_positive = _steps(0.0, 1.0, 1, dtype)
    tiny_negative = _steps(0.0, -1.0, 1, dtype)
    assert int(ulp_difference(tiny_negative, tiny_positive)) == 2
    assert int(ulp_difference(np.array(-0.0, dtype), np.array(0.0, dtype))) == 0


def test_ulp_difference_of_non_finite_values():
    f = np.float32
    nan, quiet_negative_nan = np.array(np.nan, f), np.array(-np.nan, f)
    other_payload = np.array(0x7F800001, np.uint32).view(f)
    inf = np.array(np.inf, f)
    maximum = np.uint64(np.iinfo(np.uint64).max)
    assert ulp_difference(nan, quiet_negative_nan) == 0
    assert ulp_difference(nan, other_payload) == 0
    assert ulp_difference(inf, inf) == 0
    assert ulp_difference(inf, -inf) == maximum
    assert ulp_difference(inf, np.array(np.finfo(f).max, f)) == maximum
    assert ulp_difference(nan, np.array(1.0, f)) == maximum


def test_ulp_difference_of_complex_is_the_larger_part():
    real = _steps(1.0, 2.0, 2, np.float32)
    imag = _steps(-1.0, 0.0, 5, np.float32)
    actual = np.array(complex(real, imag), np.complex64)
    assert int(ulp_difference(actual, np.array(1 - 1j, np.complex64))) == 5


def test_almost_equal_elements():
    a = np.array([1.0, 1.0, np.nan, np.inf, np.inf, np.nan, 0.0, -0.0])
    e = np.array([1.0001, 1.0003, np.nan, np.inf, -np.inf, 0.0, 1e-5, 1e-4])
    ok = almost_equal_elements(a, e, 2e-4)
    assert ok.tolist() == [True, False, True, True, False, False, True, True]


def test_almost_equal_complex_needs_both_parts():
    a = np.array([1 + 1j, 1 + 1j], np.complex128)
    e = np.array([1 + 1.00001j, 1 + 1.1j], np.complex128)
    assert almost_equal_elements(a, e, 1e-4).tolist() == [True, False]


def test_equal_elements():
    assert equal_elements(np.array([0.0, np.nan, 1.0]),
                          np.array([-0.0, -np.nan, 1.0 + 1e-16 * 4])).tolist() == [True, True, False]
    big = np.array([2**64 - 1, 5], np.uint64)
    assert equal_elements(big, np.array([2**64 - 1, 6], np.uint64)).tolist() == [True, False]
    i4 = np.array([-8, 7], ml_dtypes.int4)
    assert equal_elements(i4, np.array([-8, 6], ml_dtypes.int4)).tolist() == [True, False]
    b = np.array([True, False])
    assert equal_elements(b, np.array([True, True])).tolist() == [True, False]
    c = np.array([1 + 2j, np.nan + 0j], np.complex64)
    assert equal_elements(c, np.array([1 + 2j, np.nan + 0j], np.complex64)).tolist() == [True, True]


def _program(body: str, result_type: str = "") -> str:
    return f"func.func @main() {{\n{body}\n  func.return\n}}"


def _f32_pair(actual, expected) -> str:
    a = ", ".join(repr(float(x)) for x in actual)
    e = ", ".join(repr(float(x)) for x in expected)
    n = len(actual)
    return (f"  %a = stablehlo.constant dense<[{a}]> : tensor<{n}xf32>\n"
            f"  %e = stablehlo.constant dense<[{e}]> : tensor<{n}xf32>\n")


def test_custom_call_expect_close_allows_three_ulp():
    one = np.float32(1.0)
    three_up = _steps(1.0, 2.0, 3, np.float32)
    four_up = _steps(1.0, 2.0, 4, np.float32)
    call = ("  stablehlo.custom_call @check.expect_close(%a, %e) {has_side_effect = true}"
            " : (tensor<3xf32>, tensor<3xf32>) -> ()")
    load(_program(_f32_pair([one, three_up, 2.0], [one, one, 2.0]) + call))()
    with pytest.raises(CheckFailure) as info:
        load(_program(_f32_pair([one, four_up, 2.0, 5.0][:3], [one, one, 2.0]) + call))()
    message = str(info.value)
    assert "check.expect_close" in message
    assert "1 of 3" in message and "first at index [1]" in message
    assert "ULP difference 4" in message and repr(float(four_up)) in message


def test_custom_call_expect_almost_eq_tolerance_is_1e_3():
    call = ("  stablehlo.custom_call @check.expect_almost_eq(%a, %e) {has_side_effect = true}"
            " : (tensor<2xf32>, tensor<2xf32>) -> ()")
    load(_program(_f32_pair([1.0, 2.0], [1.0009, 2.0]) + call))()
    with pytest.raises(CheckFailure):
        load(_program(_f32_pair([1.0, 2.0], [1.0, 2.0011]) + call))()


def test_dialect_expect_almost_eq_default_tolerance_is_1e_4():
    check = '  "check.expect_almost_eq"(%a, %e) : (tensor<1xf32>, tensor<1xf32>) -> ()'
    load(_program(_f32_pair([1.0], [1.00009]) + check))()
    with pytest.raises(CheckFailure):
        load(_program(_f32_pair([1.0], [1.0002]) + check))()
    wide = ('  "check.expect_almost_eq"(%a, %e) {tolerance = 0.01 : f64}'
            ' : (tensor<1xf32>, tensor<1xf32>) -> ()')
    load(_program(_f32_pair([1.0], [1.005]) + wide))()


def test_dialect_expect_close_default_max_ulp_is_1():
    check = '  "check.expect_close"(%a, %e) : (tensor<1xf32>, tensor<1xf32>) -> ()'
    load(_program(_f32_pair([1.0], [_steps(1.0, 2.0, 1, np.float32)]) + check))()
    with pytest.raises(CheckFailure):
        load(_program(_f32_pair([1.0], [_steps(1.0, 2.0, 2, np.float32)]) + check))()


def test_expect_eq_const_counts_every_mismatch():
    body = ("  %a = stablehlo.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi8>\n"
            '  "check.expect_eq_const"(%a) {value = dense<[[1, 0, 3], [4, 0, 0]]> : tensor<2x3xi8>}'
            " : (tensor<2x3xi8>) -> ()")
    with pytest.raises(CheckFailure) as info:
        load(_program(body))()
    assert "3 of 6" in str(info.value) and "index [0, 1]: actual 2 vs expected 0" in str(info.value)
    assert isinstance(info.value, PjrtRefError)


def test_check_eq_custom_call_returns_true():
    text = """
    func.func @main() -> tensor<i1> {
      %a = stablehlo.constant dense<[1.0, 2.0]> : tensor<2xf32>
      %b = stablehlo.constant dense<[1.00005, 2.0]> : tensor<2xf32>
      %0 = stablehlo.custom_call @check.eq(%a, %b) : (tensor<2xf32>, tensor<2xf32>) -> tensor<i1>
      func.return %0 : tensor<i1>
    }"""
    (result,) = load(text)()
    assert result.dtype == np.bool_ and result.shape == () and bool(result)


def test_expect_close_on_integers_is_rejected_at_load():
    body = ("  %a = stablehlo.constant dense<1> : tensor<i32>\n"
            "  stablehlo.custom_call @check.expect_close(%a, %a) {has_side_effect = true}"
            " : (tensor<i32>, tensor<i32>) -> ()")
    with pytest.raises(InvalidArgument, match="floating-point or complex"):
        load(_program(body))


def test_expect_serialized_eq_reads_the_probe_index(tmp_path, monkeypatch):
    np.save(tmp_path / "probe1.npy", np.array([1, 2, 3], np.int64))
    np.save(tmp_path / "probe2.npy", np.array([1, 2, 4], np.int64))
    (tmp_path / "index.csv").write_text(
        f"p0,tensor<3xi64>,{tmp_path / 'probe1.npy'}\n"
        f"p0,tensor<3xi64>,{tmp_path / 'probe2.npy'}\n")
    monkeypatch.setenv("PJRT_REF_PROBE_DIR", str(tmp_path))
    body = "  %a = stablehlo.constant dense<[1, 2, 3]> : tensor<3xi64>\n"
    check = ('  "check.expect_serialized_eq"(%a) {{probe_id = "p0", iteration = {} : ui32}}'
             " : (tensor<3xi64>) -> ()")
    load(_program(body + check.format(0)))()
    with pytest.raises(CheckFailure, match="actual 3 vs expected 4"):
        load(_program(body + check.format(1)))()


def test_probe_then_expect_serialized_eq_round_trips(tmp_path, monkeypatch):
    from pjrt_ref.interpreter.ops import checks

    monkeypatch.setattr(checks, "probe_directory", str(tmp_path))
    text = """
    func.func @main() {
      %a = stablehlo.constant dense<[1.5, -2.0]> : tensor<2xbf16>
      %b = stablehlo.constant dense<[3, -8]> : tensor<2xi4>
      %pa = "interpreter.probe"(%a) {probe_id = "a"} : (tensor<2xbf16>) -> tensor<2xbf16>
      %pb = "interpreter.probe"(%b) {probe_id = "b"} : (tensor<2xi4>) -> tensor<2xi4>
      %pa2 = "interpreter.probe"(%pb) {probe_id = "a"} : (tensor<2xi4>) -> tensor<2xi4>
      "check.expect_serialized_eq"(%pa) {probe_id = "a"} : (tensor<2xbf16>) -> ()
      "check.expect_serialized_eq"(%pb) {probe_id = "b"} : (tensor<2xi4>) -> ()
      "check.expect_serialized_eq"(%pb) {probe_id = "a", iteration = 1 : ui32} : (tensor<2xi4>) -> ()
      func.return
    }"""
    load(text)()
    assert (tmp_path / "index.csv").read_text().count("\n") == 3
    wrong_type = text.replace('{probe_id = "a", iteration = 1 : ui32} : (tensor<2xi4>)',
                              '{probe_id = "a"} : (tensor<2xi4>)')
    with pytest.raises(CheckFailure, match="serialized type tensor<2xbf16> differs"):
        load(wrong_type)()
