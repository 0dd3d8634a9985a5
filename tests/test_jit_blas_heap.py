"""The matrix-product fast path (interpreter/ops/dot.py `matrix_product`),
products split over threads (interpreter/jit/blas.py; its C pool in
detail: test_jit_gemm_pool.py) and the malloc thresholds
(interpreter/jit/heap.py), each against the unoptimised path and against
XLA."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from oracle import lower_to_text  # noqa: E402  (sets JAX_PLATFORMS=cpu)
from jit_support import mlp_training_step  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from pjrt_ref.interpreter import load  # noqa: E402
from pjrt_ref.interpreter.jit import blas, heap  # noqa: E402
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
    # a dot product. (Split or not, the fast path has one BLAS call's bits:
    # test_products_have_the_bits_of_one_blas_call.)
    tolerance = dict(rtol=1e-5, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(ours, generic, **tolerance)
    np.testing.assert_allclose(ours, xla, **tolerance)


def test_blocks_depend_on_shape_and_setting_only():
    assert blas.row_blocks(256, 256, 256, 2) == [0, 128, 256]
    assert blas.row_blocks(256, 256, 256, 1) == [0, 256]
    assert blas.row_blocks(100, 256, 256, 2) == [0, 100]       # under 2 x 64 rows
    assert blas.row_blocks(256, 8, 8, 2) == [0, 256]           # too little work
    assert blas.row_blocks(333, 129, 257, 4) == [0, 83, 166, 249, 333]


def test_loaded_programs_split_big_products():
    """After a program is planned, OpenBLAS runs on one thread and big
    products are split over the CPUs (so the tests above cover the split
    wherever the machine has more than one CPU)."""
    load("func.func @main(%x: tensor<f32>) -> tensor<f32> { return %x : tensor<f32> }")
    assert blas.matmul_threads() == min(len(os.sched_getaffinity(0)), blas.matmul_threads())
    if "OPENBLAS_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        assert blas.matmul_threads() == len(os.sched_getaffinity(0))


SPLIT_SHAPES = [((256, 256), (256, 256), np.float32), ((128, 784), (784, 512), np.float32),
                ((333, 700), (700, 300), np.float32), ((300, 300), (300, 300), np.float64),
                ((512, 255), (255, 3), np.float64), ((256, 1000), (1000, 10), np.float32)]


@pytest.mark.parametrize("helpers_idle", [0, 1, 3])
@pytest.mark.parametrize("lhs_shape,rhs_shape,dtype", SPLIT_SHAPES)
def test_products_have_the_bits_of_one_blas_call(lhs_shape, rhs_shape, dtype, helpers_idle,
                                                 monkeypatch):
    """Split or not, with or without helpers, transposed or not: always the
    bits of one BLAS call (blocks are used only where they give them)."""
    monkeypatch.setattr(blas, "idle_cpus", lambda: helpers_idle)
    a, b = _operands(lhs_shape, rhs_shape, dtype)
    for lhs, rhs in ((a, b), (np.asfortranarray(a), b), (a, np.asfortranarray(b))):
        for threads in (2, 4):
            np.testing.assert_array_equal(blas.matmul(lhs, rhs, threads=threads), lhs @ rhs)


def _count_splits(path: str, monkeypatch) -> list:
    """Block counts of the split products run from now on (recorded at the
    C pool's entry, or at the Python threads' one when `path` is
    "python": then the C pool is out of the picture)."""
    calls = []
    if path == "python":
        monkeypatch.setattr(blas, "_POOL", None)
        real = blas.run_shared
        monkeypatch.setattr(blas, "run_shared", lambda jobs, helpers: (calls.append(len(jobs)),
                                                                       real(jobs, helpers)))
    else:
        assert blas._POOL is not None, "the C pool (interpreter/jit/gemm_pool.c) was not built"
        real = blas._pool_multiply
        monkeypatch.setattr(blas, "_pool_multiply",
                            lambda call, out, blocks, helpers: (calls.append(blocks),
                                                                real(call, out, blocks, helpers))[1])
    return calls


@pytest.mark.parametrize("path", ["c_pool", "python"])
def test_exact_shapes_are_split_over_helpers(path, monkeypatch):
    """A shape whose blocks give one call's bits (W2's) is computed in
    blocks, on helper threads when a CPU is idle; a shape whose blocks would
    not is one call."""
    calls = _count_splits(path, monkeypatch)
    monkeypatch.setattr(blas, "idle_cpus", lambda: 1)
    a, b = _operands((256, 256), (256, 256), np.float32)
    bounds = blas.row_blocks(256, 256, 256, 2)
    assert blas.blocks_are_exact(a, b, bounds)
    np.testing.assert_array_equal(blas.matmul(a, b, threads=2), a @ b)
    assert calls == [2]
    monkeypatch.setattr(blas, "idle_cpus", lambda: 0)    # busy machine: one call
    np.testing.assert_array_equal(blas.matmul(a, b, threads=2), a @ b)
    assert calls == [2]
    monkeypatch.setattr(blas, "idle_cpus", lambda: 1)
    monkeypatch.setattr(blas, "_blocks_exact", lambda *args: False)
    np.testing.assert_array_equal(blas.matmul(a, b, threads=2), a @ b)
    assert calls == [2]


@pytest.mark.parametrize("path", ["c_pool", "python"])
def test_split_product_raises_no_warning_in_helper_threads(path, monkeypatch):
    """inf * 0 inside BLAS: numpy's error state is per thread, and the plan
    runs with all errors ignored; the helpers must ignore them too."""
    calls = _count_splits(path, monkeypatch)
    monkeypatch.setattr(blas, "idle_cpus", lambda: 1)
    a, b = _operands((256, 256), (256, 256), np.float32)
    a[:, 0] = np.inf
    b[0, :] = 0
    with np.errstate(all="raise"):
        result = blas.matmul(a, b, threads=2)
    assert np.isnan(result).all()
    assert calls == [2]


def test_concurrent_products_share_the_helpers(monkeypatch):
    """Several host threads (as JAX's, or one per device) splitting products
    at once: each helper serves one caller at a time, a caller that finds
    none idle does its blocks itself, and every result has the bits of one
    BLAS call."""
    import threading

    monkeypatch.setattr(blas, "idle_cpus", lambda: 3)
    pairs = [_operands((256, 256), (256, 256), np.float32) for _ in range(6)]
    expected = [a @ b for a, b in pairs]
    results: dict = {}

    def caller(index: int) -> None:
        a, b = pairs[index]
        results[index] = [blas.matmul(a, b, threads=4) for _ in range(20)]

    callers = [threading.Thread(target=caller, args=(i,)) for i in range(len(pairs))]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(60)
    for index, want in enumerate(expected):
        for got in results[index]:
            np.testing.assert_array_equal(got, want)
    assert len(blas._HELPERS) <= blas.MAX_HELPERS


def test_training_step_split_on_the_pool_equals_unsplit_and_xla(monkeypatch):
    """W4 with its products split over the C pool (a CPU said idle, two
    threads per product) has the bits of the same program with products
    unsplit, and XLA's values up to float rounding."""
    # W4's sizes: five products big enough to split.
    step, args = mlp_training_step(RNG, (784, 512, 512, 10), batch=128)
    text = lower_to_text(step, *args)
    flat = jax.tree_util.tree_leaves(args)
    xla = [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.jit(step)(*args))]
    program = load(text)
    splits = _count_splits("c_pool", monkeypatch)
    monkeypatch.setattr(blas, "idle_cpus", lambda: 1)
    monkeypatch.setenv("PJRT_REF_MATMUL_THREADS", "2")
    split = program(*flat)
    split_count = len(splits)
    assert split_count >= 4      # the big forward and backward products
    monkeypatch.setenv("PJRT_REF_MATMUL_THREADS", "1")
    unsplit = program(*flat)
    assert len(splits) == split_count   # this time none entered the pool
    for ours, one_call, theirs in zip(split, unsplit, xla, strict=True):
        np.testing.assert_array_equal(ours, one_call)
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


# Settings that change how OpenBLAS threads or how the plugin optimises;
# the child processes below run without them unless a test sets one.
_BLAS_SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "PJRT_REF_BLAS_THREADS",
                  "PJRT_REF_MATMUL_THREADS", "PJRT_REF_OPTIMIZE")


def _run_with_default_blas(code: str, drop: tuple = (), stdin: str | None = None,
                           **settings: str) -> list[str]:
    """The words `code` prints in a fresh Python, run without _BLAS_SETTINGS
    and `drop` in its environment, with `settings` added."""
    environment = {k: v for k, v in os.environ.items() if k not in _BLAS_SETTINGS + drop}
    environment.update(settings)
    return subprocess.run([sys.executable, "-c", code], input=stdin, env=environment,
                          capture_output=True, text=True, check=True, timeout=120).stdout.split()


def test_plugin_product_through_jax_uses_the_pool():
    """W2 through JAX and the plugin, with the pool forced on (a CPU said
    idle): numpy's bits for a @ b, computed on the pool's threads."""
    code = textwrap.dedent("""
        import numpy as np, jax
        from pjrt_ref.interpreter.jit import blas
        blas.idle_cpus = lambda: 1
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((2, 256, 256)).astype(np.float32)
        result = np.asarray(jax.jit(lambda x, y: x @ y)(a, b))
        print(jax.devices()[0].platform, np.array_equal(result, a @ b),
              blas._POOL.lib.gemm_pool_workers() >= 1)
    """)
    out = _run_with_default_blas(code, drop=("PJRT_REF_GEMM_POOL",), JAX_PLATFORMS="pjrt_ref",
                                 PJRT_REF_MATMUL_THREADS="2")
    assert out == ["pjrt_ref", "True", "True"]


_PRODUCT_BITS = textwrap.dedent("""
    import sys
    import numpy as np
    from pjrt_ref.interpreter import load
    from pjrt_ref.interpreter.jit import blas
    text = sys.stdin.read()
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 784)).astype(np.float32)
    b = rng.standard_normal((784, 512)).astype(np.float32)
    product = np.asarray(load(text)(a, b)[0])
    print(blas._BLAS_THREADS, product.view(np.uint32).sum(dtype=np.uint64))
""")


@pytest.mark.parametrize("optimize", ["1", "0"])
def test_unoptimised_path_uses_the_same_blas_setting(optimize):
    """PJRT_REF_OPTIMIZE=0 is the reference the optimiser is checked
    against: OpenBLAS gets the same one-thread setting there (its thread
    count changes how it splits a product, and so the bits), and a W4-sized
    product has the bits of numpy's single-threaded BLAS in both modes."""
    text = lower_to_text(lambda x, y: x @ y, np.zeros((128, 784), np.float32),
                         np.zeros((784, 512), np.float32))
    threads, checksum = _run_with_default_blas(_PRODUCT_BITS, stdin=text,
                                               PJRT_REF_OPTIMIZE=optimize)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 784)).astype(np.float32)
    b = rng.standard_normal((784, 512)).astype(np.float32)
    blas.limit_blas_threads()   # this process: the same single-threaded OpenBLAS
    assert threads == "1"
    assert int(checksum) == int(np.matmul(a, b).view(np.uint32).sum(dtype=np.uint64))


def test_a_failing_block_raises_in_the_caller():
    def fail():
        raise ValueError("block failed")

    with pytest.raises(ValueError, match="block failed"):
        blas.run_shared([lambda: None, fail, lambda: None], helpers=2)
    blas.run_shared([], helpers=2)  # nothing to do: returns at once


_FAULTS = textwrap.dedent("""
    import resource, numpy as np
    from pjrt_ref.interpreter.jit import heap
    applied = heap.keep_freed_memory()
    def step():  # like a program: results alive together, then all freed
        alive = []
        for n in (300_000, 500_000, 400_000) * 4:
            alive.append(np.empty(n, np.float32))
            alive[-1][:] = 1.0
    for _ in range(5):
        step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        step()
    print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(**env) -> tuple[str, int]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environment.update(env)
    out = subprocess.run([sys.executable, "-c", _FAULTS], env=environment, capture_output=True,
                         text=True, check=True, timeout=120).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(heap.platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_heap_thresholds_stop_page_faults_per_array():
    applied, tuned = _faults()
    off, untuned = _faults(PJRT_REF_HEAP="0")
    user, _ = _faults(MALLOC_TRIM_THRESHOLD_="131072")
    assert (applied, off, user) == ("True", "False", "False")
    # 240 arrays of 1.2 to 2 MB: each one faults its ~300-500 pages in
    # again when malloc has handed them back to the kernel.
    assert untuned > 20_000
    assert tuned < untuned / 20
