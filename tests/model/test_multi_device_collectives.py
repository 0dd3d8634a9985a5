"""Every collective on a 2 x 2 process grid (2 replicas x 2 partitions), in each of
the spec's process-group modes, run by pjrt-ref's multi-device execution and
compared with XLA's cpu backend running the same StableHLO module on 4 host
devices (`--xla_force_host_platform_device_count=4`, in a subprocess).

The StableHLO reference interpreter is no oracle here: its `run_parallel`
needs four threads at once, more than its pool has on a two-core machine
(tests/interpreter/test_ops_collective_grid.py covers 2 x 1 and 1 x 2 grids against it,
including `collective_broadcast` in both of its modes, which XLA:CPU does not
implement and so is missing here).

The cases, and the run on XLA CPU: tests/support/collective_grid_cases.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.collective_grid_cases import ARGS, CASES, LOGICAL_IDS, MISMATCH, P, R, grid_program, run_on_xla_cpu
from pjrt_ref.errors import DeadlineExceeded
from pjrt_ref.interpreter import load
from pjrt_ref.model.multi_device import run_per_device


@pytest.fixture(scope="module")
def xla_results():
    return run_on_xla_cpu(grid_program(CASES), ARGS)


@pytest.fixture(scope="module")
def our_results():
    return run_per_device(load(grid_program(CASES)), R, P, ARGS, LOGICAL_IDS)


@pytest.mark.parametrize("index,case", list(enumerate(CASES)))
def test_collective_on_a_2x2_grid_matches_xla_cpu(index, case, our_results, xla_results):
    for d, (ours, theirs) in enumerate(zip(our_results, xla_results)):
        mine, xla = ours[index], theirs[index]
        assert mine.dtype == xla.dtype and mine.shape == xla.shape, (case, d, mine.dtype, xla.dtype)
        np.testing.assert_array_equal(mine, xla, err_msg=f"{case} on process {LOGICAL_IDS[d]}")


def test_a_device_that_never_arrives_is_a_deadline_error_naming_the_op(monkeypatch):
    monkeypatch.setenv("PJRT_REF_COLLECTIVE_TIMEOUT", "0.5")
    program = load(MISMATCH)
    x = np.ones(3, np.float32)
    with pytest.raises(DeadlineExceeded) as caught:
        run_per_device(program, 2, 1, [[x], [x]], [(0, 0), (1, 0)])
    message = str(caught.value)
    assert "stablehlo.all_reduce" in message and "model.py" in message
    assert "process (1, 0)" in message and "0.5 s" in message
