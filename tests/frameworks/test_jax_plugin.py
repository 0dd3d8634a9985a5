"""JAX loads pjrt-ref as a PJRT plugin and runs programs on it.

Each test runs in a child process (tests/support/jax_support.py), so a crash in the
plugin fails that test instead of killing pytest.
"""
from __future__ import annotations

import pytest

import pjrt_ref

from tests.support.jax_support import run_jax, run_python


def test_jnp_add():
    proc = run_jax("""
        assert jax.default_backend() == "pjrt_ref", jax.default_backend()
        d = jax.devices()[0]
        assert d.platform == "pjrt_ref" and d.id == 0, d
        assert int(jnp.add(1, 1)) == 2
        print("ok", d)
    """)
    assert "ok" in proc.stdout


def test_default_backend_stays_cpu():
    run_python("""
        import jax
        assert jax.default_backend() == "cpu", jax.default_backend()
        devices = jax.devices("pjrt_ref")
        assert len(devices) == 1 and devices[0].platform == "pjrt_ref"
        x = jax.device_put(1.5, devices[0])
        assert float(x + 1) == 2.5
        assert list((x + 1).devices())[0].platform == "pjrt_ref"
    """)


def test_plugin_costs_little_at_startup():
    """Registration (dlopen + shim init) and client creation load none of
    the heavy parts: the interpreter, numba, scipy and jaxlib's StableHLO
    bindings wait for the first compile. (What that costs in seconds is
    the machine's business; the child prints it.)"""
    proc = run_python("""
        import dataclasses, sys, time
        import jax
        from jax._src import xla_bridge
        import pjrt_ref.frameworks.jax as plugin
        spent, loaded = {}, {}
        original = plugin.initialize
        def timed_initialize():
            before = set(sys.modules)
            t = time.perf_counter()
            original()
            spent["register"] = time.perf_counter() - t
            loaded["register"] = set(sys.modules) - before
            registration = xla_bridge._backend_factories["pjrt_ref"]
            def timed_factory(*args, **kwargs):
                before = set(sys.modules)
                t = time.perf_counter()
                try:
                    return registration.factory(*args, **kwargs)
                finally:
                    spent["client"] = time.perf_counter() - t
                    loaded["client"] = set(sys.modules) - before
            xla_bridge._backend_factories["pjrt_ref"] = dataclasses.replace(registration, factory=timed_factory)
        plugin.initialize = timed_initialize
        assert jax.default_backend() == "cpu"
        print(spent)
        # The interpreter's light runtime pieces (interpreter/partitioned_run.py)
        # may load; its planner, op families and numba paths may not.
        heavy = ("numba", "scipy", "jaxlib.mlir.dialects.stablehlo", "pjrt_ref.interpreter.program",
                 "pjrt_ref.interpreter.plan", "pjrt_ref.interpreter.ops", "pjrt_ref.interpreter.optimiser")
        for step, modules in loaded.items():
            found = sorted(m for m in modules if m.startswith(heavy))
            assert not found, (step, found)
    """)
    assert "register" in proc.stdout and "client" in proc.stdout


def test_load_through_env_variable():
    run_python("""
        import jax, jax.numpy as jnp
        assert int(jnp.add(2, 3)) == 5
        assert jax.devices()[0].platform == "pjrt_ref"
    """, PJRT_NAMES_AND_LIBRARY_PATHS=f"pjrt_ref:{pjrt_ref.library_path()}", JAX_PLATFORMS="pjrt_ref")


ALL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "bfloat16", "float16", "float32", "float64", "complex64", "complex128"]


def test_device_put_round_trips_every_dtype():
    run_jax(f"""
        import ml_dtypes
        jax.config.update("jax_enable_x64", True)
        rng = np.random.default_rng(0)
        for name in {ALL_DTYPES!r}:
            dtype = ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)
            for shape in [(), (0,), (5,), (2, 3), (2, 0, 3), (3, 1, 4)]:
                host = (rng.standard_normal(shape) * 10).astype(dtype)
                if name.startswith("complex"):
                    host = host + 1j * host.astype(dtype)
                dev = jax.device_put(host)
                assert dev.dtype == host.dtype, (name, dev.dtype)
                back = np.asarray(dev)
                assert back.shape == host.shape and back.dtype == host.dtype, (name, shape)
                np.testing.assert_array_equal(back, host, err_msg=name)
        # narrow types: one element per byte on the host
        for dtype in [jnp.int4, jnp.uint4, jnp.int2, jnp.float8_e4m3fn, jnp.float8_e5m2,
                      jnp.float8_e4m3b11fnuz, jnp.float4_e2m1fn]:
            host = np.arange(6).reshape(2, 3).astype(dtype)
            back = np.asarray(jax.device_put(host).block_until_ready())
            assert back.dtype == host.dtype, dtype
            np.testing.assert_array_equal(back.astype(np.float32), host.astype(np.float32))
        # non-contiguous host arrays go through byte_strides
        host = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
        np.testing.assert_array_equal(np.asarray(jax.device_put(host)), host)
        host = np.arange(24, dtype=np.int64).reshape(4, 6).T
        np.testing.assert_array_equal(np.asarray(jax.device_put(host)), host)
    """)


def test_deleted_array_raises():
    run_jax("""
        x = jax.device_put(np.arange(3.0))
        x.delete()
        assert x.is_deleted()
        try:
            np.asarray(x)
        except RuntimeError as e:
            assert "deleted" in str(e).lower(), e
        else:
            raise AssertionError("using a deleted array did not raise")
        try:
            jnp.add(x, 1)
        except RuntimeError as e:
            assert "deleted" in str(e).lower(), e
        else:
            raise AssertionError("computing with a deleted array did not raise")
        print("ok")
    """)


def test_donate_argnums():
    run_jax("""
        import warnings
        f = jax.jit(lambda x, y: x + y, donate_argnums=0)
        x = jax.device_put(np.arange(4.0, dtype=np.float32))
        y = jax.device_put(np.ones(4, np.float32))
        with warnings.catch_warnings():
            warnings.simplefilter("error")       # "donated buffers were not usable" would fail
            out = f(x, y)
        np.testing.assert_array_equal(np.asarray(out), [1, 2, 3, 4])
        assert x.is_deleted(), "donated argument still alive"
        assert not y.is_deleted()
        try:
            np.asarray(x)
        except RuntimeError as e:
            assert "deleted" in str(e).lower() or "donated" in str(e).lower(), e
        else:
            raise AssertionError("reading a donated array did not raise")
    """)


def test_jit_with_several_outputs_and_copy():
    run_jax("""
        f = jax.jit(lambda x, y: (x + y, y + y, x))
        a, b, c = f(jnp.float32(1), jnp.arange(3, dtype=jnp.float32))
        np.testing.assert_array_equal(a, [1, 2, 3])
        np.testing.assert_array_equal(b, [0, 2, 4])
        assert float(c) == 1.0
        z = jax.device_put(a, jax.devices()[0])       # same device: no copy needed
        np.testing.assert_array_equal(z, a)
        cpu = jax.device_put(a, jax.devices("cpu")[0])   # cross-backend transfer
        np.testing.assert_array_equal(cpu, a)
        back = jax.device_put(cpu, jax.devices("pjrt_ref")[0])
        np.testing.assert_array_equal(back, a)
    """, JAX_PLATFORMS="pjrt_ref,cpu")


def test_jit_times_two():
    run_jax("""
        f = jax.jit(lambda x: x * 2)
        np.testing.assert_allclose(f(jnp.arange(5.0)), np.arange(5.0) * 2)
    """)


def test_grad_of_mlp():
    run_jax("""
        def mlp(params, x):
            for w, b in params[:-1]:
                x = jnp.tanh(x @ w + b)
            w, b = params[-1]
            return (x @ w + b).sum()
        key = jax.random.PRNGKey(0)
        sizes = [3, 8, 8, 1]
        params = []
        for i, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
            params.append((jax.random.normal(jax.random.fold_in(key, i), (m, n)) * 0.5,
                           jnp.zeros(n)))
        x = jnp.ones((4, 3))
        grads = jax.jit(jax.grad(mlp))(params, x)
        cpu = jax.devices("cpu")[0]
        expected = jax.jit(jax.grad(mlp), backend="cpu")(jax.device_put(params, cpu), jax.device_put(x, cpu))
        for g, e in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(expected)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-6)
    """, JAX_PLATFORMS="pjrt_ref,cpu")


def test_scan_cumulative_sum():
    run_jax("""
        def step(carry, x):
            carry = carry + x
            return carry, carry * 2
        total, ys = jax.jit(lambda xs: jax.lax.scan(step, 0.0, xs))(jnp.arange(5.0))
        assert float(total) == 10.0
        np.testing.assert_allclose(ys, 2 * np.cumsum(np.arange(5.0)))
    """)


def test_threads_share_one_jitted_function():
    proc = run_jax("""
        import threading
        f = jax.jit(lambda x, y: x + y)
        errors = []
        def worker(k):
            try:
                x = jax.device_put(np.full(3, k, np.float32))
                for i in range(200):
                    out = f(x, np.float32(i))
                    expected = np.full(3, k + i, np.float32)
                    if not np.array_equal(np.asarray(out), expected):
                        errors.append((k, i, np.asarray(out)))
                        return
            except Exception as e:
                errors.append((k, repr(e)))
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads: t.start()
        for t in threads: t.join(timeout=100)
        assert not any(t.is_alive() for t in threads), "deadlock: threads still running"
        assert not errors, errors[:3]
        print("ok")
    """, timeout=150)
    assert "ok" in proc.stdout


def test_assorted_programs_match_cpu():
    """A handful of everyday JAX programs agree with JAX's own CPU backend."""
    run_jax("""
        from jax import lax
        ours, cpu = jax.devices("pjrt_ref")[0], jax.devices("cpu")[0]
        key = jax.random.PRNGKey(42)
        x = jax.random.normal(key, (6, 5))
        programs = {
            "random": lambda k: jax.random.uniform(k, (3, 4)),
            "softmax": lambda x: jax.nn.softmax(x, axis=-1),
            "vmap_dot": lambda x: jax.vmap(lambda r: r @ r)(x),
            "argsort": lambda x: jnp.argsort(x[:, 0]),
            "while": lambda x: lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.5), (0, x))[1],
            "cond": lambda x: lax.cond(x.sum() > 0, lambda v: v * 2, lambda v: -v, x),
            "cumsum_max": lambda x: (jnp.cumsum(x, axis=0), x.max(axis=1), jnp.argmax(x)),
            "conv": lambda x: jax.lax.conv(x[None, None], jnp.ones((1, 1, 2, 2)), (1, 1), "SAME"),
        }
        for name, fn in programs.items():
            arg = key if name == "random" else x
            got = jax.jit(fn, device=ours)(jax.device_put(arg, ours))
            want = jax.jit(fn, device=cpu)(jax.device_put(arg, cpu))
            for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6, err_msg=name)
        print("ok")
    """, JAX_PLATFORMS="pjrt_ref,cpu")


def test_device_count_follows_what_jax_asks_of_its_cpu_backend():
    """JAX's test files call `jtu.request_cpu_devices(n)` (it sets jax_num_cpu_devices
    before the backends start): pjrt_ref gets n devices as cpu does; without it,
    PJRT_REF_NUM_DEVICES counts them, as XLA's host-device flag does for cpu."""
    requested = run_python("""
        import jax
        from jax._src import test_util as jtu
        jtu.request_cpu_devices(3)
        print(len(jax.devices("pjrt_ref")), len(jax.devices("cpu")))
    """, JAX_PLATFORMS="pjrt_ref,cpu", PJRT_REF_NUM_DEVICES="2")
    assert requested.stdout.splitlines()[-1] == "3 3"
    unset = run_python("""
        import jax
        print(len(jax.devices("pjrt_ref")))
    """, JAX_PLATFORMS="pjrt_ref,cpu", PJRT_REF_NUM_DEVICES="2")
    assert unset.stdout.splitlines()[-1] == "2"


def test_string_arrays_live_on_pjrt_ref_as_on_cpu_which_is_why_the_device_kind_is_cpu():
    """JAX lets string arrays onto a device only if its `device_kind` is exactly
    "cpu" (jax/_src/api.py, _check_string_compatible_sharding): the reason
    pjrt-ref's devices report that kind (docs/architecture.md, "What the device says it is")."""
    proc = run_jax("""
        strings = np.array(["pjrt", "", "ref ✓"], dtype=np.dtypes.StringDType())
        dev = jax.devices("pjrt_ref")[0]
        y = jax.device_put(strings, dev)
        print(dev.device_kind, dev.platform, y.devices() == {dev}, np.asarray(y).tolist())
    """, JAX_PLATFORMS="pjrt_ref,cpu")
    assert proc.stdout.split("\n")[-2] == "cpu pjrt_ref True ['pjrt', '', 'ref ✓']"


def test_dlpack_is_jaxlib_s_limit_and_np_asarray_is_the_zero_copy_way_out():
    """jaxlib exports DLPack only from cpu and GPU platforms, so `np.from_dlpack`
    of a pjrt_ref array fails inside jaxlib (docs/architecture.md, "DLPack").
    `np.asarray` shares the buffer's memory instead: no copy, read-only."""
    proc = run_jax("""
        y = jax.jit(lambda a: a * 2)(jax.device_put(np.arange(4096.0), jax.devices("pjrt_ref")[0]))
        view, again = np.asarray(y), np.asarray(y)
        try:
            np.from_dlpack(y)
            refused = "no error"
        except Exception as error:
            refused = str(error)
        print(view.ctypes.data == y.unsafe_buffer_pointer() == again.ctypes.data,
              view.flags.writeable, view[-1] == 8190.0)
        print(refused)
    """, JAX_PLATFORMS="pjrt_ref,cpu")
    shared, refused = proc.stdout.strip().split("\n")[-2:]
    assert shared == "True False True"
    assert "cannot be used as a DLPack device" in refused


def test_a_donated_argument_no_output_can_reuse_stays_live_as_on_cpu():
    """XLA gives a `donate_argnums` buffer up only when an output of the same
    size in bytes can take its place; the others stay live (JAX warns). One
    output, two donors of its size: only the first is given up."""
    proc = run_jax("""
        import warnings
        jax.config.update("jax_num_cpu_devices", 2)
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        flags = {}
        for platform in ("cpu", "pjrt_ref"):
            mesh = Mesh(np.array(jax.devices(platform)[:2]), ("x",))
            rows = NamedSharding(mesh, P("x"))
            x, y = (jax.device_put(np.arange(16.0).reshape(8, 2), rows) for _ in range(2))
            d, e = (jax.device_put(np.ones(4), jax.devices(platform)[0]) for _ in range(2))
            column = jax.device_put(np.arange(16.0).reshape(16, 1), rows)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                jax.jit(lambda v: v @ v.T, donate_argnums=0)(x)      # (8, 8) cannot reuse (8, 2)
                jax.jit(lambda v: v * 2, donate_argnums=0)(y)
                jax.jit(lambda a, b: a + b, donate_argnums=(0, 1))(d, e)
                jax.jit(lambda v: v.reshape(16), donate_argnums=0)(column)   # same bytes, other shape
            flags[platform] = [v.is_deleted() for v in (x, y, d, e, column)]
        print(flags)
    """, JAX_PLATFORMS="pjrt_ref,cpu")
    flags = eval(proc.stdout.strip().splitlines()[-1])
    assert flags["pjrt_ref"] == flags["cpu"] == [False, True, True, False, True]


def test_the_isolated_runtime_runs_jax_programs_from_threads_and_reads_the_live_environment():
    """PJRT_REF_RUNTIME=isolated under JAX: the plugin's Python is its own
    (capi_shim/isolated_runtime.c); values equal cpu's from several threads,
    and a setting changed by the host after start-up is seen."""
    proc = run_jax("""
        import os, sys, threading
        cpu = jax.devices("cpu")[0]
        f = jax.jit(lambda x: jnp.sin(x) * 2 + x.sum())
        x = np.linspace(-3, 3, 16, dtype=np.float32)
        want = np.asarray(jax.jit(f, device=cpu)(x))
        results = []
        def worker():
            for _ in range(20):
                results.append(np.asarray(f(x)))
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads: t.start()
        for t in threads: t.join(timeout=100)
        assert len(results) == 80 and all(np.allclose(r, want, rtol=1e-6, atol=1e-6) for r in results)
        assert "pjrt_ref.capi" not in sys.modules      # the plugin's modules live in its own Python
        os.environ["PJRT_REF_MAX_STEPS"] = "5"         # read by the plugin when it runs the loop
        loop = jax.jit(lambda n: jax.lax.while_loop(lambda c: c < n, lambda c: c + 1, 0))
        try:
            loop(100).block_until_ready()
            print("no limit")
        except Exception as error:
            print("limited" if "RESOURCE_EXHAUSTED" in str(error) else error)
    """, JAX_PLATFORMS="pjrt_ref,cpu", PJRT_REF_RUNTIME="isolated", timeout=200)
    assert proc.stdout.strip().splitlines()[-1] == "limited"


@pytest.mark.parametrize("runtime", ["shared", "isolated"])
def test_an_ahead_of_time_compile_against_a_topology_returns_and_runs(runtime):
    """jaxlib 0.10 holds the GIL while it waits for a compile against a
    topology through a real client (jax::CompileWithTopology), whose work
    calls PJRT_Compile from a compiler-pool thread: in the host's Python that
    call would wait for the GIL for ever. On such a jaxlib pjrt_ref's topology
    compiles go through JAX's compile-only client (topology_compiles.py); in
    a Python of its own the plugin compiles on either route. The executable
    serializes, loads on the attached devices and runs."""
    proc = run_jax("""
        from jax.experimental import topologies
        from jax.experimental.serialize_executable import serialize, deserialize_and_load
        topology = topologies.get_topology_desc(platform="pjrt_ref", topology_name="")
        sharding = jax.sharding.SingleDeviceSharding(topology.devices[0])
        spec = jax.ShapeDtypeStruct((4,), jnp.float32, sharding=sharding)
        compiled = jax.jit(lambda x: x * 2 + 1).lower(spec).compile()
        print(type(compiled).__name__)
        loaded = deserialize_and_load(*serialize(compiled))
        print(np.asarray(loaded(jnp.arange(4.0))).tolist())
    """, JAX_PLATFORMS="pjrt_ref,cpu", PJRT_REF_RUNTIME=runtime, PJRT_REF_GIL_STALL="20", timeout=120)
    assert proc.stdout.strip().splitlines()[-2:] == ["Compiled", "[1.0, 3.0, 5.0, 7.0]"]


def test_only_jaxlib_0_10_compiles_topologies_on_a_pool():
    from pjrt_ref.frameworks.jax.topology_compiles import jaxlib_compiles_on_a_pool

    assert jaxlib_compiles_on_a_pool("0.10.2")
    assert jaxlib_compiles_on_a_pool("0.10.2.dev20260101")
    assert not jaxlib_compiles_on_a_pool("0.11.0")
    assert not jaxlib_compiles_on_a_pool("0.12.0.1")


def test_async_collectives_run_and_their_compiled_text_reads():
    """`parallel.psum_start(x, 'i').done()` lowers to stablehlo.async_start /
    async_done, which XLA's MLIR-to-HLO conversion refuses: on one device
    and on four the program runs as on cpu, and `compiled.as_text()` (which
    converts PJRT_Executable_OptimizedProgram) gives the signature
    (partitioner.py `_UNCONVERTIBLE`)."""
    from jax._src.lax import parallel

    if not hasattr(parallel, "psum_start"):
        pytest.skip("this JAX has no async collectives")
    code = """
        from jax._src.lax import parallel
        n = jax.device_count()
        mesh = jax.make_mesh((n,), ('i',), axis_types=(jax.sharding.AxisType.Explicit,))
        with jax.set_mesh(mesh):
            @jax.jit
            @jax.shard_map(out_specs=jax.P('i'))
            def f(x):
                return parallel.psum_start(x * 2, 'i').done()
            x = jnp.arange(n * 4.0, out_sharding=jax.P('i'))
            expected = np.tile(np.arange(n * 4.0).reshape(n, 4).sum(0) * 2, n)
            np.testing.assert_allclose(np.asarray(f(x)), expected)
            text = f.lower(x).compile().as_text()
            assert text.startswith("HloModule jit_f"), text[:200]
            print("ok", n)
    """
    for devices in ("1", "4"):
        proc = run_jax(code, PJRT_REF_NUM_DEVICES=devices)
        assert proc.stdout.split()[-2:] == ["ok", devices]


def test_io_callback_in_a_shard_map_body_runs_on_each_device():
    """In a shard_map body, a host callback with a scalar and an array result runs
    once per device on that device's shard, as on cpu (JAX's own send/recv form
    would put the scalar's sharding on the array's recv too, which MLIR's verifier
    refuses)."""
    code = """
        from functools import partial
        from jax.experimental import io_callback
        from jax.sharding import PartitionSpec as P
        n = jax.device_count()
        mesh = jax.make_mesh((n,), ('i',), axis_types=(jax.sharding.AxisType.Auto,))
        @jax.jit
        @partial(jax.shard_map, mesh=mesh, in_specs=P('i'), out_specs=P('i'))
        def f(x):
            total, tens = io_callback(lambda v: (np.int32(np.sum(v)), np.asarray(v) * 10),
                                      (jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((4,), jnp.int32)), x)
            return tens + total
        x = jnp.arange(n * 4, dtype=jnp.int32)
        pieces = np.arange(n * 4).reshape(n, 4)
        expected = (pieces * 10 + pieces.sum(1, keepdims=True)).reshape(-1)
        print("ok", n, np.asarray(f(x)).tolist() == expected.tolist())
    """
    for devices in ("1", "2"):      # (io_callback puts its operands on a cpu device)
        proc = run_jax(code, PJRT_REF_NUM_DEVICES=devices, JAX_PLATFORMS="pjrt_ref,cpu")
        assert proc.stdout.split()[-3:] == ["ok", devices, "True"], proc.stdout[-2000:] + proc.stderr[-2000:]
