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


SHARDED = """
module @jit_f attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func public @main(%arg0: tensor<4x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>})
      -> (tensor<4x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
    %0 = stablehlo.reverse %arg0, dims = [1] : tensor<4x4xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{"x"}, {}]> : tensor<4x4xf32>
    return %1 : tensor<4x4xf32>
  }
}
"""


def test_a_program_on_several_devices_has_a_one_device_form_without_its_shardings():
    from pjrt_ref.interpreter import load
    from pjrt_ref.testkit.one_device import global_arguments, one_device_program

    single, why = one_device_program(SHARDED)
    assert why == "" and "sdy." not in single and "mhlo.num_partitions = 1" in single
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    whole = global_arguments(SHARDED, b"", [[x[:2]], [x[2:]]])    # rows split over "x"
    np.testing.assert_array_equal(whole[0], x)
    np.testing.assert_array_equal(load(single)(*whole)[0], np.flip(x, 1))


def test_a_program_written_per_device_has_no_one_device_form():
    from pjrt_ref.testkit.one_device import one_device_program

    per_device = SHARDED.replace("    %1 = sdy", "    %r = stablehlo.replica_id : tensor<ui32>\n    %1 = sdy")
    single, why = one_device_program(per_device)
    assert single is None and why == "it has per-device parts (stablehlo.replica_id)"


def test_a_difference_only_partitioned_is_filed_as_such():
    replayed = Replay(1, "differs", "result 0 on device 1 of 2: ...", devices=2, one_device="agrees")
    assert cause_of("AssertionError", "", [replayed])[0].title() == \
        "results differ: only partitioned over 2 devices"
