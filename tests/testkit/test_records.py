"""Reading the recording proxy's folder back (pjrt_ref/testkit/records.py, artifacts.py)."""
from __future__ import annotations

import numpy as np
import pytest

from pjrt_ref.testkit.artifacts import folder_of_test, keep_test
from pjrt_ref.testkit.records import read_records

INDEX = """program\t1\tmlir\tt.py::a
compiled\t1\tok\t
execution\t1\t1\t1\t2\tt.py::a
argument\t1\t0\t0\t11\t2,2\tok
argument\t1\t0\t1\t21\t3\tok
executed\t1\tok\t
execution\t2\t1\t1\t2\tt.py::b
argument\t2\t0\t0\t11\t2,2\tnot kept: 300000000 bytes
argument\t2\t0\t1\t21\t3\tok
"""
PROGRAM = "func.func @main(%a: tensor<2x2xf32>, %b: tensor<3xi4>) -> tensor<2x2xf32> {\n  return %a : tensor<2x2xf32>\n}\n"


@pytest.fixture
def recorded(tmp_path):
    (tmp_path / "index.tsv").write_text(INDEX)
    (tmp_path / "program-1.code").write_text(PROGRAM)
    (tmp_path / "program-1.options").write_bytes(b"")
    np.arange(4, dtype=np.float32).tofile(tmp_path / "argument-1-0-0.bin")
    (tmp_path / "argument-1-0-1.bin").write_bytes(bytes([1, 2, 15]))      # s4, a byte each
    (tmp_path / "argument-2-0-1.bin").write_bytes(bytes([0x21, 0x0f]))    # s4 packed two a byte
    return read_records(str(tmp_path))


def test_records_say_what_each_test_compiled_and_ran(recorded):
    assert recorded.tests() == ["t.py::a", "t.py::b"]
    _, (first,) = recorded.of_test("t.py::a")
    x, y = (argument.value() for argument in first.device_arguments())
    np.testing.assert_array_equal(x, np.arange(4, dtype=np.float32).reshape(2, 2))
    assert str(y.dtype) == "int4" and y.astype(int).tolist() == [1, 2, -1]
    _, (second,) = recorded.of_test("t.py::b")
    assert second.outcome == "" and not second.arguments[0].kept     # the process ended inside the call
    with pytest.raises(ValueError, match="copied 2 bytes for int4"):
        second.arguments[1].value()


def test_a_kept_test_is_replayable_only_with_every_argument_in_hand(recorded, tmp_path):
    first = keep_test(recorded, "t.py::a", "AssertionError", str(tmp_path / "kept"))
    assert first.folder == folder_of_test(str(tmp_path / "kept"), "t.py::a")
    assert [e.replayable for e in first.executions] == [""]
    assert sorted(p.name for p in (tmp_path / "kept" / "t.py--a" / "execution-1").iterdir()) == [
        "arg0.npy", "arg1.npy", "execution.json", "program.mlir"]
    second = keep_test(recorded, "t.py::b", "crashed", str(tmp_path / "kept"))
    assert second.executions[0].replayable == "the plugin did not finish it"
