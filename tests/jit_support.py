"""Comparing optimised (interpreter/jit) results with the plain interpreter's."""
from __future__ import annotations

import numpy as np


def assert_same_values(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Same dtype, shape and bits, except that a NaN may differ from a NaN
    in sign and payload.

    When two NaNs meet in a commutative op (a * b, a + b), x86 returns the
    first operand, and a compiled loop may order the operands differently
    from numpy's loop; the spec (like XLA) leaves NaN payloads unspecified.
    Everything else, signed zeros included, must be identical.
    """
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (ours.dtype, theirs.dtype)
    a, b = ours.reshape(-1), theirs.reshape(-1)
    if a.dtype.kind in "fc":
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        np.testing.assert_array_equal(nan_a, nan_b)
        a, b = a[~nan_a], b[~nan_b]
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
