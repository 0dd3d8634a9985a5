"""interpreter/numpy_errors.py, the one use of numpy's private modules: which
numpy versions have the shortcut, and that it ignores exactly what
np.errstate(all="ignore") does and restores the caller's state."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from pjrt_ref.interpreter import numpy_errors


def test_numpy_2_has_the_shortcut():
    """numpy 2.0 moved the error state into `numpy._core._ufunc_config`'s
    context variable; every numpy 2 release this project installs has it.
    Before 2.0 the shortcut is absent and the plain np.errstate is used."""
    major = int(np.__version__.split(".")[0])
    assert (numpy_errors.ERROR_STATE is not None) == (major >= 2)


@pytest.mark.skipif(numpy_errors.ERROR_STATE is None, reason="this numpy has no error-state variable")
def test_the_shortcut_ignores_every_error_and_restores_the_callers_state():
    with np.errstate(all="raise"):
        token = numpy_errors.ERROR_STATE.set(numpy_errors.IGNORE_ALL_ERRORS)
        try:
            assert np.geterr() == {"divide": "ignore", "over": "ignore", "under": "ignore",
                                   "invalid": "ignore"}
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                np.float32(1) / np.zeros(2, np.float32)                  # divide
                np.full(2, 3e38, np.float32) * np.float32(10)           # over
                np.sqrt(np.float32(-1) * np.ones(2, np.float32))          # invalid
        finally:
            numpy_errors.ERROR_STATE.reset(token)
        assert np.geterr()["divide"] == "raise"


@pytest.mark.parametrize("shortcut", [True, False])
def test_a_program_run_warns_of_nothing_either_way(shortcut, monkeypatch):
    """1/0, overflow and sqrt(-1) are the spec's inf and NaN: no warning, with
    the shortcut and with np.errstate (a numpy without it)."""
    from pjrt_ref.interpreter import load, steps

    if not shortcut:
        monkeypatch.setattr(steps, "ERROR_STATE", None)
    program = load("""
func.func @main(%x: tensor<2xf32>, %y: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {
  %q = stablehlo.divide %x, %y : tensor<2xf32>
  %m = stablehlo.multiply %x, %x : tensor<2xf32>
  %s = stablehlo.sqrt %y : tensor<2xf32>
  return %q, %m, %s : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}""")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q, m, s = program(np.array([1, 3e38], np.float32), np.array([0, -1], np.float32))
    np.testing.assert_array_equal(q, np.array([np.inf, -3e38], np.float32))
    np.testing.assert_array_equal(m, np.array([1, np.inf], np.float32))
    assert s[0] == 0 and np.isnan(s[1])
