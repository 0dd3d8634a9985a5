"""The one place pjrt-ref reaches into numpy's private modules: ignoring
floating-point errors for a whole program run, cheaply.

Integer wrap-around and IEEE special values are the spec's semantics, not
accidents, so numpy must not warn about them while a program runs
(`steps.FunctionPlan.run`). numpy (>= 2.0) keeps its floating-point error
state in a context variable, and `np.errstate(all="ignore")` builds a new
state object on every entry (~1 us, as long as a one-op program's whole
run). Setting one state object built here instead does the same: "ignore"
for every error, restored on the way out exactly as np.errstate restores
it. With a numpy that lacks these names, ERROR_STATE is None and callers
use np.errstate (tests/interpreter/test_numpy_errors.py says which numpy
versions have them).
"""
from __future__ import annotations

try:
    from numpy._core._ufunc_config import _extobj_contextvar as ERROR_STATE
    from numpy._core._ufunc_config import _make_extobj
    IGNORE_ALL_ERRORS = _make_extobj(all="ignore")
except (ImportError, AttributeError, TypeError):
    ERROR_STATE = None
    IGNORE_ALL_ERRORS = None
