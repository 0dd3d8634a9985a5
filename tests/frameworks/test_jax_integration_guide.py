"""The PJRT integration guide's cases, run as a new user would, plus the
other everyday JAX programs of issue 2, each checked against JAX's own cpu
backend (in a child process: a crash fails one test, not pytest)."""
from __future__ import annotations

import pjrt_ref

from tests.support.jax_support import run_jax, run_python


def test_integration_guide_cases():
    proc = run_jax("""
        assert int(jax.numpy.add(1, 1)) == 2
        assert float(jax.jit(lambda x: x * 2)(1.)) == 2.0
        out = jax.pmap(lambda x: x + jax.lax.psum(x, 'i'), axis_name='i')(jnp.arange(jax.device_count()))
        assert jax.device_count() == 1 and out.tolist() == [0], out
        print("ok")
    """)
    assert "ok" in proc.stdout


def test_control_flow_vmap_and_random_match_cpu():
    run_jax("""
        from jax import lax
        ours, cpu = jax.devices("pjrt_ref")[0], jax.devices("cpu")[0]
        x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
        programs = {
            "fori_loop": lambda x: lax.fori_loop(0, 50, lambda i, v: v * 0.99 + jnp.sin(v) * 0.01 + i, x),
            "while_loop": lambda x: lax.while_loop(lambda c: c[1] < 5, lambda c: (c[0] @ c[0].T @ c[0] * 0.5, c[1] + 1), (x, 0))[0],
            "cond": lambda x: lax.cond(x[0, 0] < 0, jnp.exp, jnp.cos, x),
            "scan": lambda x: lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(4), x),
            "vmap": lambda x: jax.vmap(lambda r: jnp.outer(r, r).sum(0))(x),
            "random_normal": lambda x: jax.random.normal(jax.random.key(7), (5, 3)) + x.sum(),
        }
        for name, fn in programs.items():
            got = jax.jit(fn, device=ours)(jax.device_put(x, ours))
            want = jax.jit(fn, device=cpu)(jax.device_put(x, cpu))
            for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, atol=1e-6, err_msg=name)
        print("ok")
    """, JAX_PLATFORMS="pjrt_ref,cpu")


def test_register_plugin_with_library_path():
    run_python(f"""
        import os
        from jax._src import xla_bridge
        xla_bridge.register_plugin("pjrt_ref", library_path={str(pjrt_ref.library_path())!r})
        import jax, jax.numpy as jnp
        assert jax.devices()[0].platform == "pjrt_ref"
        assert int(jnp.multiply(6, 7)) == 42
    """, JAX_PLATFORMS="pjrt_ref", JAX_SKIP_ENTRY_POINT_PLUGINS="1")


def test_plugin_reports_the_stablehlo_versions_of_its_bindings():
    proc = run_python("""
        from jaxlib.mlir.dialects import stablehlo
        print(stablehlo.get_current_version(), stablehlo.get_minimum_version())
    """)
    current, minimum = proc.stdout.split()
    # The attributes as a framework reads them, through the C API.
    proc = run_python(f"""
        from pjrt_ref.capi_shim import _pjrt_ref_shim as shim
        ffi, lib = shim.ffi, shim.lib
        api = lib.GetPjrtApi()
        args = ffi.new("PJRT_Plugin_Attributes_Args*")
        args.struct_size = ffi.sizeof("PJRT_Plugin_Attributes_Args")
        assert api.PJRT_Plugin_Attributes(args) == ffi.NULL
        attrs = {{}}
        for i in range(args.num_attributes):
            a = args.attributes[i]
            name = ffi.string(a.name, a.name_size).decode()
            if name.startswith("stablehlo"):
                attrs[name] = ".".join(str(a.int64_array_value[k]) for k in range(a.value_size))
        print(attrs["stablehlo_current_version"], attrs["stablehlo_minimum_version"])
    """)
    assert proc.stdout.split() == [current, minimum]
