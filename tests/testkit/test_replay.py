"""The third opinion at the first differing op (pjrt_ref/testkit/replay.py): StableHLO's own
reference interpreter, run in a child, says whose values it gives."""
from __future__ import annotations

import numpy as np

from pjrt_ref.testkit.causes import cause_of
from pjrt_ref.testkit.replay import Replay, stablehlo_interpreter_sides

REVERSE = """
func.func @main(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = stablehlo.reverse %x, dims = [1] : tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}
"""


def test_the_stablehlo_interpreter_names_the_sides_whose_values_it_gives():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    right = np.flip(x, 1)                     # numpy's flip: what reverse over dimension 1 gives
    wrong = right.copy()
    wrong.flat[0] = wrong.flat[1]             # the planted off-by-one of docs/debugging.md
    sides = stablehlo_interpreter_sides(REVERSE, [x], {"pjrt-ref": [right], "cpu": [right], "plugin": [wrong]})
    assert sides == "pjrt-ref, cpu"
    assert stablehlo_interpreter_sides(REVERSE, [x], {"plugin": [wrong]}) == "none of them"


def test_an_op_the_stablehlo_interpreter_cannot_run_is_said_to_be_unavailable():
    custom = REVERSE.replace('stablehlo.reverse %x, dims = [1]',
                             'stablehlo.custom_call @no_such_target(%x)').replace(
        ": tensor<3x4xf32>\n  return", ": (tensor<3x4xf32>) -> tensor<3x4xf32>\n  return")
    x = np.zeros((3, 4), np.float32)
    assert stablehlo_interpreter_sides(custom, [x], {"pjrt-ref": [x]}).startswith("unavailable (")


def test_the_report_gives_the_third_opinion():
    facts = {"op": "stablehlo.reverse", "location": "tests/ops_test.py:7:34", "dtype": "float32"}
    _, evidence = cause_of("AssertionError", "", [Replay(1, "differs", "...", facts, "plugin", "pjrt-ref, cpu")])
    assert "StableHLO's reference interpreter gives the values of: pjrt-ref, cpu" in evidence
