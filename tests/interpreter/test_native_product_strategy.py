"""Finding numpy's OpenBLAS (interpreter/native/openblas.py) and deciding, by
timing, how a shape of product runs on this machine
(interpreter/native/product_strategy.py, run by product_probes.py for
products.py's engine). Timings are never
asserted, and no test takes what this machine's timing decides: the rules
are checked on given times (a fake clock), and the engine with each
verdict forced (given times, `GivenTimes`), each leading to the bits it
promises."""
from __future__ import annotations

import json
import os
import types

import numpy as np
import pytest

from tests.support.jit_support import product_in_blocks
from tests.support.products_support import FixedStrategy, GivenAnswers, RecordingPool, RecordingThreads, c_pool
from pjrt_ref.interpreter.native import blas, openblas, openblas_threads, product_strategy
from pjrt_ref.interpreter.native.openblas_threads import OpenBlasThreads
from pjrt_ref.interpreter.native.product_probes import ShapeStrategies
from pjrt_ref.interpreter.native.product_strategy import Strategy

SITE = "/venv/lib/python3.12/site-packages"
NUMPY_DIR = SITE + "/numpy"
NUMPY_WHEEL = SITE + "/numpy.libs/libscipy_openblas64_-2a2b.so"
SCIPY_WHEEL = SITE + "/scipy.libs/libscipy_openblas-6cdc.so"
SYSTEM = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"


def test_numpys_own_openblas_comes_first_and_other_packages_copies_never():
    mapped = [SCIPY_WHEEL, "/usr/lib/x86_64-linux-gnu/libc.so.6", SYSTEM, NUMPY_WHEEL, NUMPY_WHEEL]
    found = openblas.candidate_paths(mapped, NUMPY_DIR)
    assert found[:2] == [NUMPY_WHEEL, SYSTEM]
    assert SCIPY_WHEEL not in found
    # numpy from a distribution, linked to the system's OpenBLAS:
    assert openblas.candidate_paths([SCIPY_WHEEL, SYSTEM], NUMPY_DIR)[0] == SYSTEM


def test_find_answers_whether_numpy_uses_openblas():
    """numpy built on OpenBLAS: the library is found, mapped in this
    process, and names its kernels; built on another BLAS: None."""
    blas_name = str(np.__config__.CONFIG["Build Dependencies"]["blas"]["name"]).lower()
    found = openblas.find()
    if "openblas" in blas_name:
        assert found is not None
        assert found.config.startswith("OpenBLAS") and found.corename
        with open("/proc/self/maps") as maps:
            assert found.path in maps.read()
        assert openblas.describe()["corename"] == found.corename
    else:
        assert found is None
        assert openblas.describe()["corename"] is None


def _no_blocks(*args):
    pytest.fail("blocks computed")


def test_without_openblas_threads_are_left_alone_and_products_are_one_call(monkeypatch):
    """A process whose OpenBLAS is not found (a fresh OpenBlasThreads, as a
    new process has) limits nothing, and its engine cuts no product."""
    monkeypatch.setattr(openblas, "find", lambda: None)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "PJRT_REF_BLAS_THREADS"):
        monkeypatch.delenv(name, raising=False)
    threads = OpenBlasThreads()
    assert threads.limit() is None
    engine = blas.ProductEngine(threads, None, idle_cpus=lambda: 1, python_threads=_no_blocks)
    a, b = np.random.default_rng(0).standard_normal((2, 256, 256)).astype(np.float32)
    np.testing.assert_array_equal(engine.matmul(a, b), np.matmul(a, b))


# --- The rules, on given times ------------------------------------------------

@pytest.mark.parametrize("times,expected", [
    ({"serial": 1.0, "split": 0.6}, Strategy(split=True)),
    ({"serial": 1.0, "split": 1.2}, Strategy(split=False)),
    ({"serial": 1.0, "split": 1.0}, Strategy(split=True)),            # helpers never ran: no verdict against
    ({"serial": 1.0}, Strategy(split=True)),                          # one CPU: nothing to decide
    ({"serial": 1.0, "split": 0.6, "openblas": 0.35}, Strategy(split=True)),   # not 2x better
    ({"serial": 3.5, "split": 1.75, "openblas": 0.56}, Strategy(split=False, openblas_threads=2)),
    ({"serial": 1.0, "split": 0.6, "fine": 0.4}, Strategy(split=True, fine=True)),
    ({"serial": 1.0, "split": 0.6, "fine": 0.58}, Strategy(split=True)),   # not 1.1x better
    ({"serial": 1.0, "split": 1.2, "fine": 0.5}, Strategy(split=True, fine=True)),
    ({"serial": 1.0, "split": 0.6, "fine": 0.4, "openblas": 0.25}, Strategy(split=True, fine=True)),
    ({"serial": 1.0, "split": 0.6, "fine": 0.4, "openblas": 0.15},
     Strategy(split=False, openblas_threads=2)),
])
def test_decide(times, expected):
    decided = product_strategy.decide(times, openblas_threads=2)
    assert ((decided.split, decided.openblas_threads, decided.fine)
            == (expected.split, expected.openblas_threads, expected.fine))
    assert decided.measured_us == pytest.approx({n: s * 1e6 for n, s in times.items()})


class FakeClock:
    """perf_counter for product_strategy: candidates advance it."""

    def __init__(self):
        self.now = 0.0
        self.calls: dict = {}

    def candidate(self, name: str, seconds: float):
        def run():
            self.calls[name] = self.calls.get(name, 0) + 1
            self.now += seconds
        return run


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(product_strategy, "time",
                        types.SimpleNamespace(perf_counter=lambda: fake.now, sleep=lambda s: None))
    return fake


def test_measure_times_our_candidates_in_turns_and_openblas_only_if_it_may_win(clock):
    ours = {"serial": clock.candidate("serial", 3.0), "split": clock.candidate("split", 2.0)}
    times = product_strategy.measure(ours, clock.candidate("openblas", 10.0), quiet=lambda: True)
    assert times == {"serial": 3.0, "split": 2.0, "openblas": 10.0}
    rounds = product_strategy.ROUNDS
    assert clock.calls == {"serial": 1 + rounds, "split": 1 + rounds, "openblas": 2}
    clock.calls.clear()
    times = product_strategy.measure(ours, clock.candidate("openblas", 1.0), quiet=lambda: True)
    assert times["openblas"] == 1.0
    assert clock.calls["openblas"] == 2 + 1 + rounds   # it beat ours once: its own rounds


def test_a_busy_machine_measures_nothing(clock):
    ours = {"serial": clock.candidate("serial", 3.0), "split": clock.candidate("split", 2.0)}
    assert product_strategy.measure(ours, None, quiet=lambda: False) is None
    assert clock.calls == {"serial": 1, "split": 1}   # the untimed first calls only


# --- Remembering ---------------------------------------------------------------

@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    """An empty kernel cache directory, and nothing known in this process
    (each test builds engines of its own: nothing known to them either)."""
    monkeypatch.setenv("PJRT_REF_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PJRT_REF_PRODUCT_PROBE", raising=False)
    product_strategy.forget_all()
    yield tmp_path
    product_strategy.forget_all()


def test_strategies_are_kept_on_disk_per_machine(fresh_cache, monkeypatch):
    kept = Strategy(split=False, measured_us={"serial": 300.0, "split": 320.0})
    product_strategy.remember("float32 256x256x256 rows,rows c", kept)
    product_strategy.forget_all()                        # as a new process
    assert product_strategy.lookup("float32 256x256x256 rows,rows c") == kept
    (path,) = fresh_cache.iterdir()
    assert path.name.startswith("products-") and path.suffix == ".json"
    content = json.loads(path.read_text())
    assert content["machine"] == product_strategy.machine()
    assert content["machine"]["usable_cpus"] == len(os.sched_getaffinity(0))
    product_strategy.forget_all()
    other = {**product_strategy.machine(), "kernels": "another CPU's"}
    monkeypatch.setattr(product_strategy, "machine", lambda: other)
    assert product_strategy.lookup("float32 256x256x256 rows,rows c") is None


class GivenTimes:
    """In place of `product_strategy.measure`: the candidates' best times are
    `times`, whatever this machine would measure; `calls` counts the timings."""

    def __init__(self, times: dict[str, float]):
        self.times = times
        self.calls = 0

    def __call__(self, ours, threaded, quiet) -> dict[str, float]:
        self.calls += 1
        return dict(self.times)


@pytest.fixture
def serial_quick_enough(monkeypatch):
    """The serial candidate's first run counts as quick enough to time
    (under MAX_PROBED_SECONDS), however loaded this machine is."""
    monkeypatch.setattr(product_strategy, "serial_seconds", lambda run: 0.0)


class RecordedOpenBlas:
    """OpenBLAS on one thread (so products follow their strategy), its
    threaded products recorded in `threaded` (thread counts) and computed
    by one np.matmul call."""

    threads = 1

    def __init__(self):
        self.threaded: list[int] = []

    def threaded_matmul(self, a, b, threads):
        self.threaded.append(threads)
        return np.matmul(a, b)


# Each verdict the timing can reach for a shape, by the times that lead to it
# (test_decide checks the rule), and the strategy with two usable CPUs.
VERDICTS = {
    "split": ({"serial": 1.0, "split": 0.6}, Strategy(split=True)),
    "serial": ({"serial": 1.0, "split": 1.2}, Strategy(split=False)),
    "openblas threads": ({"serial": 3.5, "split": 1.75, "openblas": 0.56},
                         Strategy(split=False, openblas_threads=2)),
}


def _engine_with_one_idle_cpu(openblas: RecordedOpenBlas, pool: RecordingPool,
                              threads: RecordingThreads) -> blas.ProductEngine:
    """An engine whose products may share their blocks with one helper."""
    return blas.ProductEngine(openblas, pool, idle_cpus=lambda: 1, python_threads=threads)


@pytest.mark.parametrize("verdict", list(VERDICTS))
def test_a_shape_is_timed_once_per_machine_and_each_verdict_gives_its_bits(
        verdict, fresh_cache, serial_quick_enough, monkeypatch):
    """The first product of a shape is timed, later ones and a later
    process reuse the verdict. Split or not, the result is the blocks'
    bits, shared with a helper only when split; with OpenBLAS's threads it
    is one threaded call, the product's value."""
    times, expected = VERDICTS[verdict]
    timing = GivenTimes(times)
    monkeypatch.setattr(product_strategy, "measure", timing)
    monkeypatch.setattr(product_strategy, "usable_cpus", lambda: 2)
    monkeypatch.setenv("PJRT_REF_MATMUL_THREADS", "2")
    openblas, pool, threads = RecordedOpenBlas(), RecordingPool(c_pool()), RecordingThreads()
    a, b = np.random.default_rng(1).standard_normal((2, 256, 256)).astype(np.float32)
    engine = _engine_with_one_idle_cpu(openblas, pool, threads)
    results = [engine.matmul(a, b) for _ in range(3)]
    engine = _engine_with_one_idle_cpu(openblas, pool, threads)
    product_strategy.forget_all()                        # as a new process: the verdict is on disk
    results.append(engine.matmul(a, b))
    assert timing.calls == 1
    (strategy,) = engine.strategies.known.values()
    assert (strategy.split, strategy.openblas_threads, strategy.fine) == \
        (expected.split, expected.openblas_threads, expected.fine)
    helpers = {helpers for _, helpers in pool.entries + threads.entries}
    if expected.openblas_threads:
        assert openblas.threaded == [2] * len(results)
        for result in results:
            np.testing.assert_allclose(result, np.matmul(a, b), rtol=1e-5, atol=1e-4)
    else:
        assert openblas.threaded == []
        assert (1 in helpers) == expected.split       # a helper took blocks only when split
        for result in results:
            np.testing.assert_array_equal(result, product_in_blocks(a, b, 0, 2))


def test_busy_machine_uses_the_default_and_writes_nothing(fresh_cache, serial_quick_enough, monkeypatch):
    blas.limit_blas_threads()
    monkeypatch.setattr(product_strategy, "QUIET_WAIT_SECONDS", 0)
    monkeypatch.setattr(product_strategy, "usable_cpus", lambda: 2)
    engine = blas.build_engine(idle_cpus=lambda: 0)
    a, b = np.random.default_rng(1).standard_normal((2, 256, 256)).astype(np.float32)
    np.testing.assert_array_equal(engine.matmul(a, b), product_in_blocks(a, b, 0, 2))
    assert list(engine.strategies.known.values()) == [product_strategy.DEFAULT]
    assert list(fresh_cache.iterdir()) == []


class NeverTimed(ShapeStrategies):
    """An engine's strategies that fail the test if they time anything."""

    def measure(self, a, b, blocks, in_c):
        pytest.fail("timed")


def test_probe_switched_off_times_nothing(fresh_cache, monkeypatch):
    monkeypatch.setenv("PJRT_REF_PRODUCT_PROBE", "0")
    blas.limit_blas_threads()
    engine = blas.build_engine()
    engine.strategies = NeverTimed(engine)
    a, b = np.random.default_rng(1).standard_normal((2, 256, 256)).astype(np.float32)
    engine.matmul(a, b)
    assert list(engine.strategies.known.values()) == [product_strategy.DEFAULT]


class CountedOpenBlasThreads:
    """The process's OpenBLAS threads, each threaded product's thread count
    appended to `calls`."""

    def __init__(self, real: OpenBlasThreads):
        self.real = real
        self.calls: list[int] = []

    @property
    def threads(self) -> int | None:
        return self.real.threads

    def threaded_matmul(self, a, b, threads):
        self.calls.append(threads)
        return self.real.threaded_matmul(a, b, threads)


@pytest.mark.skipif(openblas_threads.thread_local_setter() is None,
                    reason="this OpenBLAS exports no openblas_set_num_threads_local: never chosen")
def test_openblas_threads_strategy_makes_one_threaded_call():
    """Where the timing chose OpenBLAS's own threads: one np.matmul call
    with them, for this thread only (its setting is restored after)."""
    blas.limit_blas_threads()
    threads = CountedOpenBlasThreads(blas.engine().openblas)
    engine = blas.ProductEngine(threads, None, python_threads=_no_blocks,
                                strategies=FixedStrategy(Strategy(split=False, openblas_threads=2)))
    a, b = np.random.default_rng(1).standard_normal((2, 256, 256)).astype(np.float32)
    setter = openblas_threads.thread_local_setter()
    before = setter(0)
    setter(before)
    np.testing.assert_allclose(engine.matmul(a, b), np.matmul(a, b), rtol=1e-5, atol=1e-4)
    assert threads.calls == [2]
    assert setter(before) == before


@pytest.mark.parametrize("same_bits", [True, False])
def test_fine_blocks_are_timed_only_where_they_give_the_blocks_bits(same_bits, serial_quick_enough, monkeypatch):
    """The `fine` candidate is offered to the timing only where the check
    on random operands found its bits equal to the shape's blocks' bits."""
    blas.limit_blas_threads()
    engine = blas.build_engine()
    engine.exactness = GivenAnswers(engine, same_bits=same_bits)
    offered = []
    monkeypatch.setattr(product_strategy, "measure", lambda ours, threaded, quiet: (
        offered.append(sorted(ours)), None)[1])
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((32, 256)).astype(np.float32), rng.standard_normal((256, 1024)).astype(np.float32)
    blocks = blas.product_blocks(32, 256, 1024)
    engine.strategies.measure(a, b, blocks, in_c=engine.gemm_call(a, b) is not None)
    assert ("fine" in offered[0]) == same_bits


def test_the_fine_check_compares_the_two_cuts():
    """ExactnessProbes.same_bits on this machine's BLAS: each cut against
    numpy's own block products."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((32, 256)).astype(np.float32), rng.standard_normal((256, 1024)).astype(np.float32)
    coarse, fine = blas.product_blocks(32, 256, 1024), blas.fine_blocks(32, 256, 1024)
    engine = blas.engine()
    call = engine.gemm_call(a, b)
    same = np.array_equal(product_in_blocks(a, b, coarse.axis, coarse.count),
                          product_in_blocks(a, b, fine.axis, fine.count))
    assert engine.exactness.same_bits(a, b, coarse, fine, call) == same
    assert engine.exactness.same_bits(a, b, coarse, coarse, call)


def test_fine_strategy_computes_the_fine_blocks():
    """Where the timing chose `fine`: the product is fine_blocks' blocks,
    with a helper or without (whose bits the check found equal to the
    shape's blocks')."""
    blas.limit_blas_threads()
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((32, 256)).astype(np.float32), rng.standard_normal((256, 1024)).astype(np.float32)
    fine = blas.fine_blocks(32, 256, 1024)
    for idle in (0, 1):
        engine = blas.build_engine(idle_cpus=lambda: idle, strategies=FixedStrategy(Strategy(fine=True)))
        np.testing.assert_array_equal(engine.matmul(a, b), product_in_blocks(a, b, fine.axis, fine.count))
