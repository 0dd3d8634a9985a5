"""HLO's legacy dynamic-slice / dynamic-update-slice form (one rank-1 start-index
tensor), which XLA CPU and PyTorch/XLA use and the StableHLO verifier refuses,
runs after the rewrite in pjrt_ref/model/legacy_hlo.py. The expected values are
numpy slices at the spec's clamped start (docs/spec.md#dynamic_slice:
`adjusted_start_indices = clamp(0, start_indices, shape(operand) - slice_sizes)`)."""
from __future__ import annotations

import numpy as np
import pytest

from pjrt_ref.interpreter import load
from pjrt_ref.model.legacy_hlo import rewrite_legacy_forms
from pjrt_ref.model.program_formats import to_stablehlo

LEGACY = """HloModule legacy
ENTRY main {
  p = s64[5,4] parameter(0)
  i = s32[2] parameter(1)
  u = s64[2,2] parameter(2)
  d = s64[2,3] dynamic-slice(p, i), dynamic_slice_sizes={2,3}
  e = s64[5,4] dynamic-update-slice(p, u, i)
  ROOT t = (s64[2,3], s64[5,4]) tuple(d, e)
}"""


def _hlo_proto(text: str) -> bytes:
    import jaxlib._hlo as hlo

    return hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()


@pytest.mark.parametrize("start", [(1, 0), (4, 3), (-2, 7), (0, 1)])
def test_legacy_start_index_tensors_slice_and_update_at_the_clamped_start(start):
    program = load(to_stablehlo(_hlo_proto(LEGACY), "hlo"))
    operand = np.arange(20, dtype=np.int64).reshape(5, 4)
    update = np.array([[-1, -2], [-3, -4]], dtype=np.int64)
    sliced, updated = program(operand, np.array(start, np.int32), update)
    row, column = min(max(start[0], 0), 5 - 2), min(max(start[1], 0), 4 - 3)
    np.testing.assert_array_equal(sliced, operand[row:row + 2, column:column + 3])
    row, column = min(max(start[0], 0), 5 - 2), min(max(start[1], 0), 4 - 2)
    expected = operand.copy()
    expected[row:row + 2, column:column + 2] = update
    np.testing.assert_array_equal(updated, expected)


def test_modern_forms_and_other_ops_are_left_alone():
    text = ('%3 = "stablehlo.dynamic_slice"(%0, %1, %2) <{slice_sizes = array<i64: 1, 1>}> : '
            '(tensor<4x4xf32>, tensor<i64>, tensor<i64>) -> tensor<1x1xf32> loc(#loc3)\n'
            '%4 = "stablehlo.dynamic_slice"(%5, %6) <{slice_sizes = array<i64: 1>}> : '
            '(tensor<5xi64>, tensor<i64>) -> tensor<1xi64>\n'
            '%7 = "stablehlo.add"(%3, %3) : (tensor<1x1xf32>, tensor<1x1xf32>) -> tensor<1x1xf32>\n')
    assert rewrite_legacy_forms(text) == text


def test_a_legacy_line_becomes_slices_reshapes_and_the_modern_op():
    line = ('    %20 = "stablehlo.dynamic_slice"(%arg10, %19) <{slice_sizes = array<i64: 1>}> : '
            '(tensor<5xi64>, tensor<1xi64>) -> tensor<1xi64> loc(#loc5)')
    rewritten = rewrite_legacy_forms(line).splitlines()
    assert [l.split('"')[1] for l in rewritten] == ["stablehlo.slice", "stablehlo.reshape",
                                                   "stablehlo.dynamic_slice"]
    assert rewritten[-1] == ('    %20 = "stablehlo.dynamic_slice"(%arg10, %pjrt_ref_legacy0_0) '
                             '<{slice_sizes = array<i64: 1>}> : (tensor<5xi64>, tensor<i64>) -> '
                             'tensor<1xi64> loc(#loc5)')
