"""Unreduced-sharding cases for tests/spmd/test_spmd_unreduced.py, run as a script.

    python tests/support/unreduced_cases.py OUT.pkl

runs each case on whatever 4-device JAX backend the environment selects
(the cpu oracle or pjrt_ref) and pickles, per case, a list of
(sharding spec, each device's shard) for every array it produced. JAX's
explicit sharding can leave a value unreduced (`P(unreduced={'x'})`): each
device holds a partial sum, so the shards themselves are what is compared.
"""
from __future__ import annotations

import pickle
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


def explicit_mesh(shape: tuple, names: tuple):
    count = int(np.prod(shape))
    return jax.make_mesh(shape, names, axis_types=(AxisType.Explicit,) * len(shape),
                         devices=jax.devices()[:count])


def record(*arrays) -> list:
    return [(str(a.sharding.spec), [np.asarray(s.data) for s in
                                    sorted(a.addressable_shards, key=lambda s: s.device.id)])
            for a in arrays]


def unreduced_out_and_reshard():
    """shard_map out_specs unreduced keeps each device's local value; a
    reshard to P() sums them."""
    with jax.set_mesh(explicit_mesh((2,), ("x",))):
        f = jax.jit(jax.shard_map(lambda x: jax.lax.pcast(x, "x", to="unreduced"),
                                  out_specs=P(unreduced={"x"})))
        out = f(jax.device_put(np.arange(8.), P("x")))
        return record(out, jax.reshard(out, P()))


def unreduced_matmul_2d():
    """A contraction over a sharded axis left unreduced over "y", on a 2x2 mesh."""
    with jax.set_mesh(explicit_mesh((2, 2), ("x", "y"))):
        a = jax.device_put(np.arange(8.).reshape(2, 4), P("x", "y"))
        b = jax.device_put(np.arange(8.).reshape(4, 2), P("y", None))
        f = jax.jit(jax.shard_map(lambda a, b: a @ b, in_specs=(P("x", "y"), P("y", None)),
                                  out_specs=P("x", None, unreduced={"y"})))
        out = f(a, b)
        grad = jax.jit(jax.grad(lambda a, b: jax.reshard(f(a, b), P("x", None)).sum()))(a, b)
        return record(out, jax.reshard(out, P("x", None)), grad)


def reduced_input_gradient():
    """The gradient for a reduced (replicated) input of a shard_map is unreduced."""
    with jax.set_mesh(explicit_mesh((2,), ("x",))):
        f = jax.shard_map(lambda x, y: jax.lax.psum(x[:8] * y, "x"), out_specs=P())
        g = jax.jit(jax.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1)))
        dx, dy = g(jax.device_put(np.arange(16.), P("x")),
                   jax.device_put(np.arange(8.), P(None, reduced={"x"})))
        return record(dx, dy, jax.reshard(dy, P()))


def reshard_to_unreduced():
    """Making a whole value unreduced keeps it on one device, zeros elsewhere."""
    with jax.set_mesh(explicit_mesh((2,), ("x",))):
        out = jax.reshard(jnp.arange(8.), P(unreduced={"x"}))
        scattered = jax.shard_map(lambda x: jax.lax.psum_scatter(x, "x", tiled=True),
                                  out_specs=P("x"))(out)
        return record(out, scattered)


CASES = [unreduced_out_and_reshard, unreduced_matmul_2d, reduced_input_gradient,
         reshard_to_unreduced]

def run(case):
    """The case's arrays, or why this JAX refused it (JAX 0.12 changed the
    rules for unreduced shard_map outputs; a case it refuses on its own cpu
    backend cannot be compared)."""
    try:
        return case()
    except Exception as error:  # noqa: BLE001 - reported by the test
        return {"refused": f"{type(error).__name__}: {str(error).splitlines()[0]}"}


if __name__ == "__main__":
    with open(sys.argv[1], "wb") as handle:
        pickle.dump({case.__name__: run(case) for case in CASES}, handle)
