"""`pjrt-ref jax-tests`: on the pjrt_ref run, JAX's test utilities see
pjrt_ref's device as a cpu device (which tests run, with which tolerances)
while its platform stays pjrt_ref (platform dispatch), through the pytest
plugin the runner loads into JAX's test runs."""
from __future__ import annotations

import pytest
from tests.support.jax_support import run_python

DEVICE_TEST = """
import jax
from jax._src import test_util as jtu

def test_pjrt_ref_is_a_cpu_device_on_its_own_platform():
    assert jax.default_backend() == "pjrt_ref"
    assert jtu.test_device_matches(["cpu"]) and jtu.test_device_matches(["pjrt_ref"])
    assert jtu.device_under_test() == "pjrt_ref"
"""


def test_the_plugin_tags_pjrt_refs_device_for_jaxs_tests(tmp_path):
    test_file = tmp_path / "device_test.py"
    test_file.write_text(DEVICE_TEST)
    proc = run_python(f"""
        import sys, pytest
        sys.exit(pytest.main(["-q", "-p", "pjrt_ref.frameworks.jax.suite_plugin", "-p", "no:cacheprovider",
                              "--rootdir", {str(tmp_path)!r}, {str(test_file)!r}]))
    """, JAX_PLATFORMS="pjrt_ref,cpu", PJRT_REF_JAX_DEVICE_TAG="cpu")
    assert "1 passed" in proc.stdout


CAPTURE_TEST = """
from functools import partial
import jax, jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P
from jax._src import test_util as jtu

def test_capture_stdout_sees_debug_print_in_shard_map():
    mesh = Mesh(jax.devices(), ("i",))

    @partial(jax.shard_map, mesh=mesh, in_specs=P("i"), out_specs=P("i"))
    def f(x):
        jax.debug.print("instance {i} has x={x}", i=jax.lax.axis_index("i"), x=x)
        return x

    with jtu.capture_stdout() as output:
        f(jnp.arange(8))
        jax.effects_barrier()
    for i in range(4):
        assert f"instance {i} has x=[{2 * i} {2 * i + 1}]" in output()
"""


@pytest.mark.parametrize("backend", ["cpu", "pjrt_ref"])
def test_jtu_capture_stdout_captures_what_a_test_prints(tmp_path, backend):
    """JAX's shard_map tests read `jax.debug.print` output through `jtu.capture_stdout()`,
    which redirects the `sys.stdout` that `jax._src.test_util` bound on import. The
    plugin imports it early (to tag the device) and must do so with pytest's capture
    on, as collection would, or the test captures nothing (XLA CPU's run is the baseline)."""
    test_file = tmp_path / "capture_test.py"
    test_file.write_text(CAPTURE_TEST)
    env = ({"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
           if backend == "cpu" else {"JAX_PLATFORMS": "pjrt_ref,cpu", "PJRT_REF_NUM_DEVICES": "4"})
    proc = run_python(f"""
        import sys, pytest
        sys.exit(pytest.main(["-q", "-p", "pjrt_ref.frameworks.jax.suite_plugin", "-p", "no:cacheprovider",
                              "--rootdir", {str(tmp_path)!r}, {str(test_file)!r}]))
    """, PJRT_REF_JAX_DEVICE_TAG="cpu", **env)
    assert "1 passed" in proc.stdout


LEAKED_MESH_TEST = """
import jax, jax.numpy as jnp
from jax._src import test_util as jtu

def test_a_sets_the_mesh_without_with():
    jax.set_mesh(jtu.create_mesh((4,), ("x",)))

def test_b_jits_on_two_devices():
    mesh = jax.sharding.Mesh(jax.devices()[:2], ("y",))
    x = jax.device_put(jnp.arange(4), jax.NamedSharding(mesh, jax.P("y")))
    assert int(jax.jit(lambda x: x.sum())(x)) == 6
"""


@pytest.mark.parametrize("backend", ["cpu", "pjrt_ref"])
def test_a_mesh_one_test_leaves_set_does_not_reach_the_next(tmp_path, backend):
    """`jax.set_mesh(mesh)` outside a `with` sets the mesh for the rest of the thread
    (Pallas' interpret-mode distributed test does it): without the plugin the next test
    fails with "incompatible devices" on either backend."""
    test_file = tmp_path / "leak_test.py"
    test_file.write_text(LEAKED_MESH_TEST)
    env = ({"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
           if backend == "cpu" else {"JAX_PLATFORMS": "pjrt_ref,cpu", "PJRT_REF_NUM_DEVICES": "4"})

    def run(*plugin: str, **settings: str):
        return run_python(f"""
            import pytest
            print("exit", int(pytest.main(["-q", "-p", "no:cacheprovider", *{list(plugin)!r},
                                           "--rootdir", {str(tmp_path)!r}, {str(test_file)!r}])))
        """, **settings, **env)

    without = run()
    assert "1 failed, 1 passed" in without.stdout and "incompatible devices" in without.stdout
    with_plugin = run("-p", "pjrt_ref.frameworks.jax.suite_plugin", PJRT_REF_JAX_DEVICE_TAG="cpu")
    assert "2 passed" in with_plugin.stdout
    assert "leak_test.py::test_a_sets_the_mesh_without_with left JAX's mesh set" in with_plugin.stdout
