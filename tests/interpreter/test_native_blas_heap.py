"""The matrix-product fast path (interpreter/ops/dot.py `matrix_product`),
products split over threads (interpreter/native/products.py, on engines
built for each test; its C pool in detail: test_native_gemm_pool.py) and
the malloc thresholds
(interpreter/native/heap.py), each against the unoptimised path and against
XLA."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.support.oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)
from tests.support.jit_support import mlp_training_step, product_in_blocks  # noqa: E402
from tests.support.products_support import FixedStrategy, GivenAnswers, RecordingPool, RecordingThreads, c_pool  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402
from pjrt_ref.interpreter.native import blas, heap, helper_threads  # noqa: E402
from pjrt_ref.interpreter.native.product_strategy import Strategy  # noqa: E402
from pjrt_ref.interpreter.ops import dot  # noqa: E402

RNG = np.random.default_rng(4)

# (lhs, rhs) builders: plain, transposed operands (views BLAS reads by
# strides), a 3-d operand, and rows that do not divide evenly into blocks.
PRODUCTS = {
    "square": (lambda x, y: x @ y, (256, 256), (256, 256)),
    "lhs_transposed": (lambda x, y: x.T @ y, (128, 512), (128, 320)),
    "rhs_transposed": (lambda x, y: x @ y.T, (200, 300), (280, 300)),
    "both_transposed": (lambda x, y: x.T @ y.T, (96, 300), (260, 96)),
    "three_d_lhs": (lambda x, y: jnp.einsum("abk,kn->abn", x, y), (4, 70, 200), (200, 160)),
    "odd_rows": (lambda x, y: x @ y, (333, 129), (129, 257)),
}


def _operands(lhs_shape, rhs_shape, dtype):
    return (RNG.standard_normal(lhs_shape).astype(dtype), RNG.standard_normal(rhs_shape).astype(dtype))


def _reference_product(text, args, monkeypatch):
    """The same program with the matrix fast path off: dot_general's generic
    batched path (work-type conversion, one np.matmul, rounding back)."""
    def generic(lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract, result_dtype):
        lhs_free = [d for d in range(lhs.ndim) if d not in lhs_batch and d not in lhs_contract]
        rhs_free = [d for d in range(rhs.ndim) if d not in rhs_batch and d not in rhs_contract]
        work = dot.work_dtype(lhs.dtype, rhs.dtype, result_dtype)
        return dot.batched_product(lhs, rhs, lhs_batch, rhs_batch, lhs_free, rhs_free,
                                   lhs_contract, rhs_contract, work, result_dtype)

    with monkeypatch.context() as patch:
        patch.setattr(dot, "dot_general_arrays", generic)
        return load(text)(*args)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(PRODUCTS))
def test_matrix_fast_path_against_generic_path_and_xla(name, dtype, monkeypatch):
    fn, lhs_shape, rhs_shape = PRODUCTS[name]
    args = _operands(lhs_shape, rhs_shape, dtype)
    text = lower_to_text(fn, *args)          # oracle.py enables x64: f64 stays f64
    xla = np.asarray(jax.jit(fn)(*args))
    ours = load(text)(*args)[0]
    generic = _reference_product(text, args, monkeypatch)[0]
    assert ours.dtype == generic.dtype == xla.dtype == np.dtype(dtype)
    # The generic path multiplies 3-d stacks (numpy may hand BLAS other
    # arguments) and XLA sums in its own order: equal up to the rounding of
    # a dot product. (Split or not, the fast path has its blocks' bits:
    # test_products_have_the_bits_of_their_blocks.)
    tolerance = dict(rtol=1e-5, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(ours, generic, **tolerance)
    np.testing.assert_allclose(ours, xla, **tolerance)


def test_blocks_depend_on_the_shape_only():
    """The longer side of the result is cut, into a power of two of blocks
    of about 2^23 multiply-adds (at least two from 2^22 on), at least 64
    long; small or thin products are one block."""
    R, C = blas.ROW_BLOCKS, blas.COLUMN_BLOCKS
    assert blas.product_blocks(256, 256, 256) == (R, 2)              # W2
    assert blas.product_blocks(128, 784, 512) == (C, 4)              # W4's forward product
    assert blas.product_blocks(784, 128, 512) == (R, 4)              # and its weight gradient
    assert blas.product_blocks(300, 300, 300) == (R, 2)              # 3 rounds down to 2
    assert blas.product_blocks(4096, 4096, 4096) == (R, 16)          # at most 16
    assert blas.product_blocks(32, 256, 1024) == (C, 2)              # W9's LSTM step, 2^23
    assert blas.product_blocks(100, 256, 256) == (C, 2)              # 2^22.6: two blocks
    assert blas.product_blocks(100, 128, 256).count == 1             # under 2^22: too little work
    assert blas.product_blocks(100, 512, 100).count == 1             # 2^22.3, but no two 64-long blocks

    assert blas.product_blocks(8, 4096, 4096).count == 1             # thin: matrix-vector like
    assert blas.product_blocks(256, 8, 8).count == 1                 # too little work
    assert blas.Blocks(R, 4).ranges(333, 7) == [(0, 83), (83, 166), (166, 249), (249, 333)]
    assert blas.Blocks(C, 2).ranges(7, 129) == [(0, 64), (64, 129)]


def test_fine_blocks_cut_the_same_axis_down_to_small_products():
    """blas.fine_blocks: the shape's axis, blocks of at most 2^19
    multiply-adds (OpenBLAS's small-product kernels), at most 16, none
    shorter than 16; one block stays one."""
    R, C = blas.ROW_BLOCKS, blas.COLUMN_BLOCKS
    assert blas.fine_blocks(32, 256, 1024) == (C, 16)                # W9's step: 2^19 each
    assert blas.fine_blocks(32, 1024, 256) == (C, 16)                # 16 columns each
    assert blas.fine_blocks(256, 256, 256) == (R, 16)                # 16 rows each, 2^20: capped
    assert blas.fine_blocks(128, 784, 512) == (C, 16)                # at most 16
    assert blas.fine_blocks(32, 128, 1024) == (C, 8)                 # 2^22 / 8 = 2^19: enough
    assert blas.fine_blocks(40, 1024, 1024) == (C, 16)
    assert blas.fine_blocks(64, 4096, 24).count == 1                 # one block stays one
    assert blas.fine_blocks(100, 128, 256).count == 1
    assert blas.fine_blocks(1024, 128, 64) == (R, 16)                # 64 rows each, 2^19
    assert blas.fine_blocks(2048, 512, 20) == (R, 16)                # at most 16, 2^20 each


def test_loaded_programs_limit_openblas_to_one_thread():
    """After a program is planned, OpenBLAS runs on one thread (by our
    setting, unless the user chose) and products may use every CPU."""
    load("func.func @main(%x: tensor<f32>) -> tensor<f32> { return %x : tensor<f32> }")
    assert blas.matmul_threads() == len(os.sched_getaffinity(0))
    if "OPENBLAS_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        assert blas.blas_threads() == 1


def test_the_process_has_one_engine_and_a_test_may_lend_it_another():
    """blas.engine() is built once per process; engine_in_use puts another
    engine in its place for the `with` block only."""
    process = blas.engine()
    assert blas.engine() is process
    with blas.engine_in_use(blas.build_engine(idle_cpus=lambda: 0)) as lent:
        assert blas.engine() is lent and blas.idle_cpus() == 0
    assert blas.engine() is process


def _expected_blocks(a, b):
    """The bits blas.matmul promises for `a @ b`: its blocks (pinned by
    test_blocks_depend_on_the_shape_only), computed by numpy."""
    blocks = blas.product_blocks(a.shape[0], a.shape[1], b.shape[1])
    return product_in_blocks(a, b, blocks.axis, blocks.count)


def _engine(idle: int, split: bool = True, **parts) -> blas.ProductEngine:
    """An engine that sees `idle` CPUs idle, on a strategy that splits or
    not (what the timing probe would decide: product_strategy.py)."""
    return blas.build_engine(idle_cpus=lambda: idle, strategies=FixedStrategy(Strategy(split=split)),
                             **parts)


SPLIT_SHAPES = [((256, 256), (256, 256), np.float32), ((128, 784), (784, 512), np.float32),
                ((333, 700), (700, 300), np.float32), ((300, 300), (300, 300), np.float64),
                ((512, 255), (255, 3), np.float64), ((256, 1000), (1000, 10), np.float32)]


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("helpers_idle", [0, 1, 3])
@pytest.mark.parametrize("lhs_shape,rhs_shape,dtype", SPLIT_SHAPES)
def test_products_have_the_bits_of_their_blocks(lhs_shape, rhs_shape, dtype, helpers_idle,
                                                split):
    """Whoever computes the blocks -- this thread alone, helpers or not,
    any thread count, either strategy -- and whatever the layouts, the
    result has the bits of the blocks computed by numpy."""
    engine = _engine(helpers_idle, split)
    a, b = _operands(lhs_shape, rhs_shape, dtype)
    for lhs, rhs in ((a, b), (np.asfortranarray(a), b), (a, np.asfortranarray(b))):
        expected = _expected_blocks(lhs, rhs)
        for threads in (1, 2, 4):
            np.testing.assert_array_equal(engine.matmul(lhs, rhs, threads=threads), expected)


def _recording(path: str) -> tuple[dict, list]:
    """(engine parts, entries): a C pool, or with `path` "python" no C pool
    and Python threads, that record (blocks, helpers) of every blocked
    product in `entries`."""
    if path == "python":
        threads = RecordingThreads()
        return {"pool": None, "python_threads": threads}, threads.entries
    pool = RecordingPool(c_pool())
    return {"pool": pool}, pool.entries


@pytest.mark.parametrize("path", ["c_pool", "python"])
def test_big_products_share_their_blocks_with_idle_cpus(path):
    """W2's two blocks go to this thread and a helper when a CPU is idle
    and the strategy splits; otherwise this thread computes them, as one
    call where that gives the blocks' bits. The bits never change."""
    parts, calls = _recording(path)
    a, b = _operands((256, 256), (256, 256), np.float32)
    expected = product_in_blocks(a, b, 0, 2)
    np.testing.assert_array_equal(_engine(1, **parts).matmul(a, b, threads=2), expected)
    assert calls == [(2, 1)]
    for exact in (True, False):   # this thread alone: one call only where it is exact
        for idle, threads, split in ((0, 2, True), (1, 1, True), (1, 2, False)):
            engine = _engine(idle, split, **parts)
            engine.exactness = GivenAnswers(engine, blocks_exact=exact)
            calls.clear()
            result = engine.matmul(a, b, threads=threads)
            assert calls == ([] if exact else [(2, 0)])
            if not exact:
                np.testing.assert_array_equal(result, expected)


def test_blocks_are_exact_tells_whether_blocks_equal_one_call():
    """The check answers what numpy says about the shape's blocks on this
    machine's BLAS, whichever way that goes."""
    for lhs_shape, rhs_shape, dtype in SPLIT_SHAPES:
        a, b = _operands(lhs_shape, rhs_shape, dtype)
        same = bool(np.array_equal(_expected_blocks(a, b), a @ b))
        assert blas.blocks_are_exact(a, b) == same, (lhs_shape, rhs_shape, dtype)


@pytest.mark.parametrize("path", ["c_pool", "python"])
def test_split_product_raises_no_warning_in_helper_threads(path):
    """inf * 0 inside BLAS: numpy's error state is per thread, and the plan
    runs with all errors ignored; the helpers must ignore them too."""
    parts, calls = _recording(path)
    engine = _engine(1, **parts)
    a, b = _operands((256, 256), (256, 256), np.float32)
    a[:, 0] = np.inf
    b[0, :] = 0
    with np.errstate(all="raise"):
        result = engine.matmul(a, b, threads=2)
    assert np.isnan(result).all()
    assert calls == [(2, 1)]


def test_concurrent_products_share_the_helpers():
    """Several host threads (as JAX's, or one per device) splitting products
    at once: each helper serves one caller at a time, a caller that finds
    none idle does its blocks itself, and every result has its blocks'
    bits."""
    import threading

    engine = _engine(3)
    pairs = [_operands((256, 256), (256, 256), np.float32) for _ in range(6)]
    expected = [product_in_blocks(a, b, 0, 2) for a, b in pairs]
    results: dict = {}

    def caller(index: int) -> None:
        a, b = pairs[index]
        results[index] = [engine.matmul(a, b, threads=4) for _ in range(20)]

    callers = [threading.Thread(target=caller, args=(i,)) for i in range(len(pairs))]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(60)
    for index, want in enumerate(expected):
        for got in results[index]:
            np.testing.assert_array_equal(got, want)
    assert len(helper_threads._HELPERS) <= helper_threads.MAX_HELPERS


def test_training_step_split_on_the_pool_equals_unsplit_and_xla(monkeypatch):
    """W4 with its products split over the C pool (a CPU said idle, two
    threads per product) has the bits of the same program computed on one
    thread, and XLA's values up to float rounding."""
    # W4's sizes: five products big enough to split.
    step, args = mlp_training_step(RNG, (784, 512, 512, 10), batch=128)
    text = lower_to_text(step, *args)
    flat = jax.tree_util.tree_leaves(args)
    xla = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(step)(*args))]
    program = load(text)
    parts, entries = _recording("c_pool")
    with blas.engine_in_use(_engine(1, **parts)):
        monkeypatch.setenv("PJRT_REF_MATMUL_THREADS", "2")
        split = program(*flat)
        assert sum(helpers > 0 for _, helpers in entries) >= 4   # the big forward and backward products
        entries.clear()
        monkeypatch.setenv("PJRT_REF_MATMUL_THREADS", "1")
        unsplit = program(*flat)
    assert all(helpers == 0 for _, helpers in entries)      # this time no helper joined
    for ours, one_thread, theirs in zip(split, unsplit, xla, strict=True):
        np.testing.assert_array_equal(ours, one_thread)
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


# Settings that change how OpenBLAS threads or how the plugin optimises;
# the child processes below run without them unless a test sets one, and
# with the timing probe off (product_strategy.py: it could choose
# OpenBLAS's own threads, whose bits are not the blocks').
_BLAS_SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "PJRT_REF_BLAS_THREADS",
                  "PJRT_REF_MATMUL_THREADS", "PJRT_REF_OPTIMIZE", "PJRT_REF_PRODUCT_PROBE")


def _run_with_default_blas(code: str, drop: tuple = (), stdin: str | None = None,
                           **settings: str) -> list[str]:
    """The words `code` prints in a fresh Python, run without _BLAS_SETTINGS
    and `drop` in its environment, with `settings` added."""
    environment = {k: v for k, v in os.environ.items() if k not in _BLAS_SETTINGS + drop}
    environment.update({"PJRT_REF_PRODUCT_PROBE": "0", **settings})
    return subprocess.run([sys.executable, "-c", code], input=stdin, env=environment,
                          capture_output=True, text=True, check=True, timeout=120).stdout.split()


def test_plugin_product_through_jax_uses_the_pool():
    """W2 through JAX and the plugin, with the pool forced on (a CPU said
    idle): the bits of its two row blocks, computed on the pool's threads."""
    code = textwrap.dedent("""
        import numpy as np, jax
        from pjrt_ref.interpreter.native import blas
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((2, 256, 256)).astype(np.float32)
        with blas.engine_in_use(blas.build_engine(idle_cpus=lambda: 1)) as engine:
            result = np.asarray(jax.jit(lambda x, y: x @ y)(a, b))
        blocks = np.concatenate([a[:128] @ b, a[128:] @ b])
        print(jax.devices()[0].platform, np.array_equal(result, blocks),
              engine.pool.lib.gemm_pool_workers() >= 1)
    """)
    out = _run_with_default_blas(code, drop=("PJRT_REF_GEMM_POOL",), JAX_PLATFORMS="pjrt_ref",
                                 PJRT_REF_MATMUL_THREADS="2")
    assert out == ["pjrt_ref", "True", "True"]


_PRODUCT_BITS = textwrap.dedent("""
    import sys
    import numpy as np
    from pjrt_ref.interpreter import load
    from pjrt_ref.interpreter.native import blas
    text = sys.stdin.read()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 784)).astype(np.float32)
    b = rng.standard_normal((784, 512)).astype(np.float32)
    product = np.asarray(load(text)(a, b)[0])
    print(blas.blas_threads(), product.view(np.uint32).sum(dtype=np.uint64))
""")


@pytest.mark.parametrize("optimize", ["1", "0"])
def test_unoptimised_path_uses_the_same_blas_setting(optimize):
    """PJRT_REF_OPTIMIZE=0 is the reference the optimiser is checked
    against: OpenBLAS gets the same one-thread setting there (its thread
    count changes how it splits a product, and so the bits), and a W4-sized
    product has the bits of its four column blocks on numpy's
    single-threaded BLAS in both modes."""
    text = lower_to_text(lambda x, y: x @ y, np.zeros((128, 784), np.float32),
                         np.zeros((784, 512), np.float32))
    threads, checksum = _run_with_default_blas(_PRODUCT_BITS, stdin=text,
                                               PJRT_REF_OPTIMIZE=optimize)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 784)).astype(np.float32)
    b = rng.standard_normal((784, 512)).astype(np.float32)
    blas.limit_blas_threads()   # this process: the same single-threaded OpenBLAS
    assert threads == "1"
    expected = product_in_blocks(a, b, blas.COLUMN_BLOCKS, 4)
    assert int(checksum) == int(expected.view(np.uint32).sum(dtype=np.uint64))


def test_users_own_one_thread_setting_gives_the_same_blocks():
    """OPENBLAS_NUM_THREADS=1 set by the user (pjrt-ref then leaves OpenBLAS
    alone) gives the blocks' bits too: only OpenBLAS's thread count decides."""
    text = lower_to_text(lambda x, y: x @ y, np.zeros((128, 784), np.float32),
                         np.zeros((784, 512), np.float32))
    threads, checksum = _run_with_default_blas(_PRODUCT_BITS, stdin=text,
                                               OPENBLAS_NUM_THREADS="1")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 784)).astype(np.float32)
    b = rng.standard_normal((784, 512)).astype(np.float32)
    blas.limit_blas_threads()
    expected = product_in_blocks(a, b, blas.COLUMN_BLOCKS, 4)
    assert threads == "1"
    assert int(checksum) == int(expected.view(np.uint32).sum(dtype=np.uint64))


def test_a_failing_block_raises_in_the_caller():
    def fail():
        raise ValueError("block failed")

    with pytest.raises(ValueError, match="block failed"):
        helper_threads.run_shared([lambda: None, fail, lambda: None], helpers=2)
    helper_threads.run_shared([], helpers=2)  # nothing to do: returns at once


class _Interrupted(Exception):
    pass


def test_an_interrupted_caller_still_waits_for_its_helpers():
    """A signal (Ctrl-C, a test timeout) while the caller waits must not let it
    return before a helper has finished writing into the caller's arrays."""
    import signal
    import threading
    import time

    out = np.zeros(1)

    def helper_block():
        time.sleep(0.5)
        out[0] = 1.0

    shared = helper_threads._SharedJobs([helper_block])
    threading.Thread(target=shared.work, daemon=True).start()     # the helper

    def raise_interrupted(signum, frame):
        raise _Interrupted()

    main = threading.get_ident()
    previous = signal.signal(signal.SIGUSR1, raise_interrupted)
    try:
        threading.Timer(0.1, signal.pthread_kill, (main, signal.SIGUSR1)).start()
        with pytest.raises(_Interrupted):
            shared.wait()
        assert out[0] == 1.0          # the helper's write came first
    finally:
        signal.signal(signal.SIGUSR1, previous)


_MAPPED_CHUNKS = textwrap.dedent("""
    import ctypes, numpy as np
    from pjrt_ref.interpreter.native import heap
    applied = heap.keep_freed_memory()

    class MallInfo(ctypes.Structure):   # glibc's struct mallinfo; hblks: mmapped chunks
        _fields_ = [(name, ctypes.c_int) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo.restype = MallInfo
    before = libc.mallinfo().hblks
    alive = [np.ones(n, np.float32) for n in (300_000, 500_000, 400_000) * 4]
    print(applied, libc.mallinfo().hblks - before)
""")


def _mapped_chunks(**env) -> tuple[str, int]:
    """(keep_freed_memory()'s answer, how many more chunks malloc serves by
    mmap once 12 arrays of 1.2 to 2 MB are alive), in a fresh process."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environment.update(env)
    out = subprocess.run([sys.executable, "-c", _MAPPED_CHUNKS], env=environment,
                         capture_output=True, text=True, check=True, timeout=120).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(heap.platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_heap_thresholds_keep_arrays_in_the_heap():
    """With the thresholds set, arrays up to 32 MiB come from the heap (and
    go back to it when freed) instead of each being its own mmap, which the
    kernel faults in afresh every time; PJRT_REF_HEAP=0 and the user's own
    MALLOC_* settings leave malloc alone."""
    applied, tuned = _mapped_chunks()
    off, untuned = _mapped_chunks(PJRT_REF_HEAP="0")
    user, _ = _mapped_chunks(MALLOC_TRIM_THRESHOLD_="131072")
    assert (applied, off, user) == ("True", "False", "False")
    assert tuned == 0
    assert untuned > 0    # glibc's own threshold starts at 128 KiB
