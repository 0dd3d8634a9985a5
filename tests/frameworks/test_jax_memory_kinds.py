"""JAX's memory kinds on pjrt_ref, side by side with JAX's cpu backend (the oracle).

Each program runs on both platforms in one child process; the test compares
what JAX reports (memory kinds of arrays and shards) and the values.
"""
from __future__ import annotations

import pytest

from tests.support.jax_support import run_on_cpu_and_pjrt_ref

PROGRAMS = {
    "device_put": """
def run(devices):
    dev = devices[0]
    x = jnp.arange(8.0, device=dev)
    out = {"memories": [m.kind for m in dev.addressable_memories()], "default": dev.default_memory().kind}
    for kind in ("pinned_host", "unpinned_host", "device"):
        y = jax.device_put(x, SingleDeviceSharding(dev, memory_kind=kind))
        out[kind] = [y.sharding.memory_kind, y.addressable_shards[0].data.sharding.memory_kind, y.tolist()]
    return out
""",
    "jit_in_and_out_shardings": """
def run(devices):
    dev = devices[0]
    host = SingleDeviceSharding(dev, memory_kind="pinned_host")
    x = jax.device_put(jnp.arange(8.0), dev)
    y = jax.jit(lambda a: a * 2, out_shardings=host)(x)
    z = jax.jit(lambda a: a + 1, in_shardings=host, out_shardings=host)(y)
    w = jax.jit(lambda a: a - 1)(z)
    return [[v.sharding.memory_kind, v.tolist()] for v in (y, z, w)]
""",
    "device_put_inside_jit": """
def run(devices):
    dev = devices[0]
    host, device = (SingleDeviceSharding(dev, memory_kind=k) for k in ("pinned_host", "device"))
    @jax.jit
    def f(a):
        h = jax.device_put(a * 3, host)
        return jax.device_put(h, device) + 1, h
    results = f(jax.device_put(jnp.arange(8.0), dev))
    return [[v.sharding.memory_kind, v.tolist()] for v in results]
""",
    "compute_on_host": """
def run(devices):
    from jax.experimental.compute_on import compute_on
    @jax.jit
    def f(a):
        with compute_on("device_host"):
            b = a * 2
        return b + 1
    return f(jax.device_put(jnp.arange(8.0), devices[0])).tolist()
""",
    "remat_offload": """
def run(devices):
    from jax.ad_checkpoint import checkpoint_name
    policy = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["y"],
        offload_src="device", offload_dst="pinned_host")
    def loss(a):
        y = checkpoint_name(jnp.sin(a), "y")
        return jnp.sum(jnp.cos(y) * a)
    x = jax.device_put(jnp.linspace(-1, 1, 8), devices[0])
    return jax.jit(jax.grad(jax.checkpoint(loss, policy=policy)))(x).tolist()
""",
    "sharded_over_four_devices": """
def run(devices):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(devices[:4]), ("x",))
    host = NamedSharding(mesh, P("x"), memory_kind="pinned_host")
    x = jax.device_put(jnp.arange(16.0), NamedSharding(mesh, P("x")))
    y = jax.jit(lambda a: a * 2, out_shardings=host)(x)
    z = jax.device_put(x, host)
    return [[v.sharding.memory_kind, [s.data.sharding.memory_kind for s in v.addressable_shards],
             v.tolist()] for v in (y, z)]
""",
}

PRELUDE = """
jax.config.update("jax_num_cpu_devices", 4)
from jax.sharding import SingleDeviceSharding
"""


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_memory_kinds_and_values_are_cpu_s(name):
    results = run_on_cpu_and_pjrt_ref(PROGRAMS[name], prelude=PRELUDE)
    if _numbers(results["cpu"]):
        assert results["pjrt_ref"] == pytest.approx(results["cpu"])
    else:
        assert results["pjrt_ref"] == results["cpu"]


def _numbers(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, (int, float)) for v in value)
