"""The C thread pool for split matrix products (interpreter/native/gemm_pool.c,
seen from Python by interpreter/native/gemm_pool.py and driven by
interpreter/native/products.py's engine): each block equal to np.matmul on that
block for every layout it accepts, many host threads at once, fork, the
fallback to Python threads, and the environment settings."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from tests.support.jit_support import product_in_blocks
from tests.support.products_support import FixedStrategy, GivenAnswers, RecordingPool, RecordingThreads, c_pool
from pjrt_ref.errors import InvalidArgument
from pjrt_ref.interpreter.native import blas, gemm_pool, products
from pjrt_ref.interpreter.native.gemm_pool import GemmPool

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def one_thread_blas():
    """The pool's threads call single-threaded OpenBLAS (openblas_threads.py)."""
    blas.limit_blas_threads()


def _engine(idle: int | None = None, **parts) -> blas.ProductEngine:
    """An engine that splits every shape where CPUs are idle (what
    product_strategy's DEFAULT says, whatever a timing on this machine
    would), seeing `idle` CPUs idle (None: as many as are)."""
    idle_cpus = None if idle is None else (lambda: idle)
    return blas.build_engine(idle_cpus=idle_cpus, strategies=FixedStrategy(), **parts)


def _matrix(shape, dtype, layout="rows"):
    """A random matrix of `shape` laid out as product_probes.layout names it, or as a
    view with a leading dimension larger than its row ("padded")."""
    values = RNG.standard_normal(shape).astype(dtype)
    if layout == "columns":
        return np.asfortranarray(values)
    if layout == "padded":
        wide = np.zeros((shape[0], shape[1] + 7), dtype)
        wide[:, 3:3 + shape[1]] = values
        return wide[:, 3:3 + shape[1]]
    return values


SHAPES = [(256, 256, 256), (128, 784, 512), (333, 129, 257), (512, 255, 3), (200, 1000, 33)]
LAYOUTS = [("rows", "rows"), ("columns", "rows"), ("rows", "columns"), ("columns", "columns"),
           ("padded", "padded")]


def _blocks_of(a, b):
    """The bits blas.matmul promises for `a @ b`: its blocks (pinned in
    test_native_blas_heap.test_blocks_depend_on_the_shape_only) by numpy."""
    blocks = blas.product_blocks(a.shape[0], a.shape[1], b.shape[1])
    return product_in_blocks(a, b, blocks.axis, blocks.count)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layouts", LAYOUTS, ids="-".join)
@pytest.mark.parametrize("rows,inner,columns", SHAPES)
def test_pool_blocks_are_numpys_block_products(rows, inner, columns, layouts, dtype):
    """Each block the pool computes, of rows or of columns, has the bits of
    np.matmul on that block (so the pool hands BLAS what numpy hands it),
    whichever thread computes it, whatever the number of blocks. (Blocks
    one row or column thin are left out: numpy hands those to gemv, and
    blas.product_blocks never cuts so thin.)"""
    pool = c_pool()
    a = _matrix((rows, inner), dtype, layouts[0])
    b = _matrix((inner, columns), dtype, layouts[1])
    call = pool.call(a, b)
    assert call is not None
    for axis, length in ((blas.ROW_BLOCKS, rows), (blas.COLUMN_BLOCKS, columns)):
        for count in (c for c in (1, 2, 3) if length // c >= 2):
            expected = product_in_blocks(a, b, axis, count)
            for helpers in (0, 1, 2):
                out = np.full((rows, columns), np.nan, dtype)
                assert pool.multiply(call, out, blas.Blocks(axis, count), helpers)
                np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layouts", LAYOUTS, ids="-".join)
@pytest.mark.parametrize("rows,inner,columns", SHAPES)
def test_split_products_have_the_bits_of_their_blocks(rows, inner, columns, layouts, dtype):
    """A product through the pool (CPUs said idle) gives its blocks' bits."""
    engine = _engine(3, pool=c_pool())
    a = _matrix((rows, inner), dtype, layouts[0])
    b = _matrix((inner, columns), dtype, layouts[1])
    expected = _blocks_of(a, b)
    for threads in (2, 4):
        np.testing.assert_array_equal(engine.matmul(a, b, threads=threads), expected)


@pytest.mark.parametrize("exact", [True, False])
def test_one_thread_makes_one_call_only_where_blocks_are_exact(exact):
    """With no helper, this thread makes one BLAS call where the blocks give
    that call's bits (the check's answer, given here both ways) and
    computes the blocks otherwise."""
    pool = RecordingPool(c_pool())
    engine = _engine(0, pool=pool)
    engine.exactness = GivenAnswers(engine, blocks_exact=exact)
    a, b = _matrix((256, 256), np.float64), _matrix((256, 256), np.float64)
    result = engine.matmul(a, b, threads=2)
    if exact:
        assert pool.entries == []
        np.testing.assert_array_equal(result, np.matmul(a, b))
    else:
        assert pool.entries == [(2, 0)]
        np.testing.assert_array_equal(result, _blocks_of(a, b))


@pytest.mark.parametrize("case", ["same_memory", "strided", "mixed_dtypes", "byte_swapped"])
def test_operands_the_pool_does_not_take(case):
    """What the pool does not compute: operands BLAS cannot read in place
    (np.matmul computes their blocks, on Python threads); mixed or
    non-native types, and a @ a.T on one buffer (numpy may use syrk, not
    gemm), are one np.matmul call."""
    x = _matrix((256, 256), np.float32)
    a, b = {"same_memory": (x, x.T),
            "strided": (x[:, ::2], _matrix((128, 256), np.float32)),
            "mixed_dtypes": (x, _matrix((256, 256), np.float64)),
            "byte_swapped": (x.astype(">f4"), x.astype(">f4"))}[case]
    engine = _engine(pool=c_pool())
    assert engine.gemm_call(a, b) is None
    expected = _blocks_of(a, b) if case == "strided" else np.matmul(a, b)
    np.testing.assert_array_equal(engine.matmul(a, b, threads=2), expected)


def test_many_host_threads_at_once():
    """Host threads (JAX's, one per device) splitting products at the same
    time for a while: the pool serves one at a time, the others compute
    the same blocks on their own thread; every result has its blocks' bits
    and nobody hangs."""
    engine = _engine(3, pool=c_pool())
    cases = [(_matrix((256, 256), np.float32), _matrix((256, 256), np.float32)),
             (_matrix((128, 784), np.float32), _matrix((784, 512), np.float32, "columns")),
             (_matrix((300, 300), np.float64, "columns"), _matrix((300, 300), np.float64)),
             (_matrix((333, 129), np.float32), _matrix((129, 257), np.float32))]
    expected = [_blocks_of(a, b) for a, b in cases]
    wrong: list = []
    done: list = []

    def caller(index: int) -> None:
        a, b = cases[index % len(cases)]
        for _ in range(60):
            if not np.array_equal(engine.matmul(a, b, threads=(2, 3, 4)[index % 3]),
                                  expected[index % len(cases)]):
                wrong.append(index)
        done.append(index)

    callers = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(6)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(120)
    assert sorted(done) == list(range(6)), "a caller did not finish (hang?)"
    assert wrong == []


_FORK_CHILD = textwrap.dedent("""
    import os, numpy as np
    from pjrt_ref.interpreter.native import blas
    blas.limit_blas_threads()
    engine = blas.build_engine(idle_cpus=lambda: 1)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 256, 256)).astype(np.float32)
    blocks = np.concatenate([a[:128] @ b, a[128:] @ b])
    assert np.array_equal(engine.matmul(a, b, threads=2), blocks)
    lib = engine.pool.lib
    assert lib.gemm_pool_workers() >= 1                # the parent's pool runs
    pid = os.fork()
    if pid == 0:
        status = 0 if lib.gemm_pool_workers() == 0 else 3  # the child has no thread of it
        for _ in range(20):
            if not np.array_equal(engine.matmul(a, b, threads=2), blocks):
                status = 4
        if lib.gemm_pool_workers() < 1:                 # it started its own
            status = 5
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert np.array_equal(engine.matmul(a, b, threads=2), blocks)   # the parent's still works
    print(os.waitstatus_to_exitcode(status))
""")


def test_forked_child_starts_its_own_pool():
    """The loader forks (bytecode check): a child inherits none of the
    pool's threads, and must neither wait for them nor think it has them."""
    c_pool()
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "PJRT_REF_BLAS_THREADS",
                                "PJRT_REF_GEMM_POOL")}
    environment["PJRT_REF_PRODUCT_PROBE"] = "0"   # split whatever a timing would say
    out = subprocess.run([sys.executable, "-c", _FORK_CHILD], env=environment,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0"]


def test_without_the_c_module_python_threads_split():
    """No C pool (module not built): products are split over Python threads,
    with the same bits."""
    threads = RecordingThreads()
    engine = _engine(1, pool=None, python_threads=threads)
    a, b = _matrix((256, 256), np.float32), _matrix((256, 256), np.float32, "columns")
    np.testing.assert_array_equal(engine.matmul(a, b, threads=2), _blocks_of(a, b))
    assert threads.entries == [(2, 1)]


def test_module_that_does_not_import_leaves_python_threads():
    """In a process where the C module cannot be imported, blas loads
    without it and still splits products."""
    code = textwrap.dedent("""
        import sys, numpy as np
        sys.modules["pjrt_ref.interpreter.native._gemm_pool"] = None   # import fails
        from pjrt_ref.interpreter.native import blas
        blas.limit_blas_threads()
        engine = blas.build_engine(idle_cpus=lambda: 1)
        a, b = np.random.default_rng(0).standard_normal((2, 256, 256))
        assert np.array_equal(engine.matmul(a, b, threads=2), np.concatenate([a[:128] @ b, a[128:] @ b]))
        from pjrt_ref.interpreter.native import helper_threads
        print(engine.pool, blas.engine().pool, len(helper_threads._HELPERS))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, env={**os.environ, "PJRT_REF_PRODUCT_PROBE": "0"})
    assert out.stdout.split() == ["None", "None", "1"]


def test_pool_switch_and_spin_settings(monkeypatch):
    """PJRT_REF_GEMM_POOL=0 selects the Python threads; PJRT_REF_POOL_SPIN_US
    sets the spin (0: never; empty: the default; a value that is not a count
    is rejected, naming the variable)."""
    pool = c_pool()
    a, b = _matrix((256, 256), np.float32), _matrix((256, 256), np.float32)
    monkeypatch.setenv("PJRT_REF_GEMM_POOL", "0")
    assert pool.call(a, b) is None
    monkeypatch.setenv("PJRT_REF_GEMM_POOL", "1")
    assert pool.call(a, b) is not None
    for setting, nanoseconds in (("0", 0), ("50", 50_000), ("", gemm_pool.DEFAULT_SPIN_US * 1000)):
        monkeypatch.setenv("PJRT_REF_POOL_SPIN_US", setting)
        assert gemm_pool.spin_ns() == nanoseconds
    for setting in ("fast", "-3"):
        monkeypatch.setenv("PJRT_REF_POOL_SPIN_US", setting)
        with pytest.raises(InvalidArgument, match=f"PJRT_REF_POOL_SPIN_US='{setting}' is not an integer"):
            gemm_pool.spin_ns()


def test_matmul_threads_one_never_wakes_a_helper(monkeypatch):
    monkeypatch.setenv("PJRT_REF_MATMUL_THREADS", "1")
    pool = RecordingPool(c_pool())
    a, b = _matrix((256, 256), np.float32), _matrix((256, 256), np.float32)
    np.testing.assert_array_equal(_engine(3, pool=pool).matmul(a, b), _blocks_of(a, b))
    assert all(helpers == 0 for _, helpers in pool.entries)


@pytest.mark.parametrize("spin_us", [0, 20_000])
def test_workers_sleep_after_their_spin(spin_us, monkeypatch):
    """With no spin, or after it, no worker of the pool is left spinning
    (an idle plugin gives its CPUs back)."""
    import time

    pool = c_pool()
    monkeypatch.setenv("PJRT_REF_POOL_SPIN_US", str(spin_us))
    a, b = _matrix((256, 256), np.float32), _matrix((256, 256), np.float32)
    np.testing.assert_array_equal(_engine(1, pool=pool).matmul(a, b, threads=2), _blocks_of(a, b))
    deadline = time.monotonic() + 10
    while pool.spinning() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert pool.spinning() == 0


def test_idle_cpus_does_not_count_our_spinning_workers():
    """A worker spinning for the next product is a runnable task in
    /proc/loadavg; idle_cpus must not call its CPU busy because of it."""
    class SpinningPool:
        @staticmethod
        def spinning():
            return 1

    this_thread_and_one_spinner = lambda: 2  # noqa: E731
    assert products.IdleCpus(None, cpus=2, runnable=this_thread_and_one_spinner)() == 0
    assert products.IdleCpus(SpinningPool(), cpus=2, runnable=this_thread_and_one_spinner)() == 1
    assert products.runnable_tasks() >= 1   # /proc/loadavg's count includes this thread


def test_block_counts_beyond_the_claim_word_are_refused():
    """The pool's claim word has 16 bits for blocks: the C side refuses
    other counts and axes (returns 0, nothing written), and blas.matmul
    does not hand it more than its `max_blocks` (here lowered to 1: the
    Python threads compute the blocks)."""
    pool = c_pool()
    a, b = _matrix((256, 256), np.float32), _matrix((256, 256), np.float32)
    call = pool.call(a, b)
    for count in (0, -1, pool.lib.GEMM_POOL_MAX_BLOCKS + 1):
        out = np.zeros((256, 256), np.float32)
        for helpers in (0, 1):
            assert not pool.multiply(call, out, blas.Blocks(blas.ROW_BLOCKS, count), helpers)
        assert not out.any()
    gemm, is_double, trans_a, trans_b, rows, columns, inner, lhs, lda, rhs, ldb = call
    out = np.zeros((256, 256), np.float32)
    no_such_axis = 7
    assert not pool.lib.gemm_pool_multiply(gemm, is_double, trans_a, trans_b, rows, columns,
                                           inner, lhs, lda, rhs, ldb, gemm_pool.address(out), 256, 0,
                                           no_such_axis, 2, 0, 0)
    assert not out.any()
    small = RecordingPool(pool)
    small.max_blocks = 1
    np.testing.assert_array_equal(_engine(1, pool=small).matmul(a, b, threads=2), _blocks_of(a, b))
    assert small.entries == []


@pytest.mark.parametrize("stale", ["missing_names", "older_abi"])
def test_a_module_built_from_an_older_header_is_not_used(stale, monkeypatch):
    """An editable install keeps its old .so after a pull: if it lacks a
    function gemm_pool.py needs, or was built from other declarations
    (GEMM_POOL_ABI: gemm_pool_multiply gained `accumulate`), products run
    without the C pool instead of calling it with the wrong arguments."""
    import types

    import pjrt_ref.interpreter.native as native_package

    if stale == "missing_names":
        lib = types.SimpleNamespace(gemm_pool_multiply=None, gemm_pool_spinning=None)
    else:
        lib = types.SimpleNamespace(**{name: getattr(c_pool().lib, name) for name in gemm_pool.NAMES})
        lib.GEMM_POOL_ABI = gemm_pool.ABI - 1
    module = types.SimpleNamespace(lib=lib)
    monkeypatch.setitem(sys.modules, "pjrt_ref.interpreter.native._gemm_pool", module)
    monkeypatch.setattr(native_package, "_gemm_pool", module, raising=False)
    assert gemm_pool.load() is None


# --- c += a @ b (blas.matmul_add) ----------------------------------------------

def _added(a, b, c):
    """What matmul_add promises: the bits of adding matmul's product to c."""
    return np.add(c, _blocks_of(a, b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layouts", LAYOUTS, ids="-".join)
@pytest.mark.parametrize("rows,inner,columns", SHAPES + [(256, 32, 1024), (32, 1024, 256)])
def test_matmul_add_has_the_bits_of_the_add_after_the_product(rows, inner, columns, layouts,
                                                              dtype):
    """Whatever the accumulate probe says for the shape, with or without
    a helper: `c` gets the bits of c + matmul(a, b), in place."""
    a = _matrix((rows, inner), dtype, layouts[0])
    b = _matrix((inner, columns), dtype, layouts[1])
    start = RNG.standard_normal((rows, columns)).astype(dtype)
    for idle in (0, 1):
        c = start.copy()
        assert _engine(idle).matmul_add(a, b, c, threads=2) is c
        np.testing.assert_array_equal(c, _added(a, b, start))


@pytest.mark.parametrize("exact", [True, False])
def test_matmul_add_adds_inside_gemm_only_where_the_probe_says_so(exact):
    """The probe's answer given both ways: gemm with beta = 1 into `c`, or
    the product then the add. (Given True, the bits are only promised
    where the real probe agrees.)"""
    pool = RecordingPool(c_pool())
    engine = _engine(pool=pool)
    a, b = _matrix((256, 32), np.float32, "columns"), _matrix((32, 1024), np.float32)
    truly = engine.exactness.accumulate_is_exact(a, b)
    engine.exactness = GivenAnswers(engine, accumulate_exact=exact)
    pool.accumulated.clear()
    start = RNG.standard_normal((256, 1024)).astype(np.float32)
    c = start.copy()
    engine.matmul_add(a, b, c)
    assert pool.accumulated and all(flag == exact for flag in pool.accumulated)
    if truly or not exact:
        np.testing.assert_array_equal(c, _added(a, b, start))
    np.testing.assert_allclose(c, start + a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows,inner,columns", [(256, 32, 1024), (64, 3000, 64), (333, 129, 257)])
def test_the_accumulate_probe_answers_for_the_operands_it_describes(rows, inner, columns):
    """On these operands, gemm with beta = 1 gives the add's bits exactly
    where the probe (on random operands of the shape) said it would."""
    pool = c_pool()
    a, b = _matrix((rows, inner), np.float32), _matrix((inner, columns), np.float32)
    start = RNG.standard_normal((rows, columns)).astype(np.float32)
    blocks = blas.product_blocks(rows, inner, columns)
    accumulated = start.copy()
    assert pool.multiply(pool.call(a, b), accumulated, blocks, 0, accumulate=True)
    assert blas.accumulate_is_exact(a, b) == np.array_equal(accumulated, _added(a, b, start))


class OneUlpOff(GemmPool):
    """The C pool with a gemm whose accumulate rounds differently: one
    element of each product it adds into its output one ulp up."""

    def multiply(self, call, out, blocks, helpers, accumulate=False):
        done = super().multiply(call, out, blocks, helpers, accumulate)
        if accumulate:
            out[0, 0] = np.nextafter(out[0, 0], np.inf)
        return done


def test_the_accumulate_probe_says_no_where_the_sums_differ():
    """A gemm whose accumulate rounds differently (simulated: one ulp off)
    is not used."""
    pool = c_pool()
    engine = _engine(pool=OneUlpOff(pool.lib, pool.gemms))
    a, b = _matrix((256, 32), np.float32), _matrix((32, 1024), np.float32)
    assert not engine.exactness.accumulate_is_exact(a, b)
    start = RNG.standard_normal((256, 1024)).astype(np.float32)
    c = start.copy()
    engine.matmul_add(a, b, c)
    np.testing.assert_array_equal(c, _added(a, b, start))


@pytest.mark.parametrize("case", ["one_block", "strided_c", "c_overlaps_a", "other_dtype"])
def test_matmul_add_falls_back_to_the_product_then_the_add(case):
    """Where the pool cannot add into `c` (a one-block product, a `c` that
    is not C-contiguous, overlaps an operand or has another dtype), the
    product then the add, same values."""
    pool = RecordingPool(c_pool())
    a, b = _matrix((256, 32), np.float32), _matrix((32, 1024), np.float32)
    wide = RNG.standard_normal((256, 2048)).astype(np.float32)
    c = {"one_block": None, "strided_c": wide[:, ::2], "c_overlaps_a": None,
         "other_dtype": RNG.standard_normal((256, 1024))}[case]
    if case == "one_block":
        a, b = _matrix((8, 4), np.float32), _matrix((4, 6), np.float32)
        c = RNG.standard_normal((8, 6)).astype(np.float32)
    if case == "c_overlaps_a":
        c = RNG.standard_normal((256, 1024)).astype(np.float32)
        a = c[:, :32]
    expected = np.add(c, _blocks_of(a, b))
    assert _engine(pool=pool).matmul_add(a, b, c) is c
    assert not any(pool.accumulated)
    np.testing.assert_array_equal(c, expected)
