"""A compile pauses Python's cyclic collector while it builds the program
(pjrt_ref/model/executable.py, `collector_paused`), and gives it back as it
found it: on when it was on, off when the host had turned it off, and only
once the last of several compiles in flight has ended."""
from __future__ import annotations

import gc
import threading

import pytest

from pjrt_ref.errors import PjrtRefError
from pjrt_ref.model import executable, program_cache
from pjrt_ref.model.executable import Executable, collector_paused

PROGRAM = b"""
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = stablehlo.add %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
"""


@pytest.fixture(autouse=True)
def collector_on():
    program_cache.clear()
    was = gc.isenabled()
    gc.enable()
    yield
    program_cache.clear()
    (gc.enable if was else gc.disable)()


def test_a_compile_builds_with_the_collector_paused_and_resumes_it(monkeypatch):
    seen = []
    real_load = executable.Executable.__init__

    def load_and_look(self, *args, **kwargs):
        seen.append(gc.isenabled())
        real_load(self, *args, **kwargs)
    monkeypatch.setattr(executable.Executable, "__init__", load_and_look)
    Executable.compile(PROGRAM, "mlir")
    assert seen == [False] and gc.isenabled()


def test_a_failed_compile_resumes_the_collector_too():
    with pytest.raises(PjrtRefError):
        Executable.compile(b"not a program", "mlir")
    assert gc.isenabled()


def test_a_host_that_turned_the_collector_off_keeps_it_off():
    gc.disable()
    Executable.compile(PROGRAM, "mlir")
    assert not gc.isenabled()


def test_the_collector_resumes_when_the_last_of_overlapping_compiles_ends():
    first_inside, second_done, states = threading.Event(), threading.Event(), []

    def long_compile():
        with collector_paused():
            first_inside.set()
            second_done.wait(10)
            states.append(("first, after the second ended", gc.isenabled()))

    thread = threading.Thread(target=long_compile)
    thread.start()
    first_inside.wait(10)
    with collector_paused():
        states.append(("second", gc.isenabled()))
    second_done.set()
    thread.join(10)
    states.append(("after both", gc.isenabled()))
    assert states == [("second", False), ("first, after the second ended", False), ("after both", True)]
