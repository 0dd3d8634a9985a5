"""SPMD cases for tests/spmd/test_spmd.py, run as a script in a subprocess.

    python tests/support/spmd_cases.py OUT.pkl

runs every case on whatever 4-device JAX backend the environment selects
(`cpu` with `--xla_force_host_platform_device_count=4`, or `pjrt_ref` with
PJRT_REF_NUM_DEVICES=4) and pickles, per case: the lowered StableHLO text,
each device's argument shards, each device's output shards and each output's
sharding spec and shard shape. The cpu run is the oracle; the pjrt_ref run
is compared with it end to end, and the lowered text plus argument shards
drive the interpreter-level tests.
"""
from __future__ import annotations

import pickle
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def mesh_1d() -> Mesh:
    return Mesh(np.array(jax.devices()[:4]), ("x",))


def mesh_2d() -> Mesh:
    return Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("a", "b"))


def put(mesh, spec, array):
    return jax.device_put(array, NamedSharding(mesh, spec))


def matrix(rows: int, cols: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


def jit_cases():
    """jit over NamedSharding inputs with out_shardings (automatic partitioning)."""
    m1, m2 = mesh_1d(), mesh_2d()
    x = matrix(8, 4, 0)
    w = matrix(4, 6, 1)
    yield ("jit_rows_matmul", jax.jit(lambda x, w: jnp.tanh(x @ w) + 1.0,
                                      out_shardings=NamedSharding(m1, P("x", None))),
           [put(m1, P("x", None), x), put(m1, P(), w)])
    yield ("jit_columns_reduce", jax.jit(lambda x: (jnp.sum(x * 2.0, axis=1), jnp.max(x, axis=0)),
                                         out_shardings=(NamedSharding(m1, P()),
                                                        NamedSharding(m1, P("x")))),
           [put(m1, P(None, "x"), x)])
    yield ("jit_mesh_2d", jax.jit(lambda x, w: (x @ w, jnp.exp(x).mean()),
                                  out_shardings=(NamedSharding(m2, P("a", "b")),
                                                 NamedSharding(m2, P()))),
           [put(m2, P("a", "b"), x), put(m2, P("b", None), w)])
    yield ("jit_replicated_in", jax.jit(lambda x: jnp.cumsum(x, axis=0) - x.T.sum(),
                                        out_shardings=NamedSharding(m2, P(("a", "b")))),
           [put(m2, P(), x)])
    yield ("jit_constraint", jax.jit(
        lambda x: jax.lax.with_sharding_constraint(jnp.sin(x), NamedSharding(m1, P(None, "x"))) * 3,
        out_shardings=NamedSharding(m1, P("x"))), [put(m1, P("x"), x)])
    # No out_shardings: XLA's propagation chooses; element-wise ops keep x's sharding.
    yield ("jit_unspecified_out", jax.jit(lambda x: jnp.sin(x) * 2.0 + x),
           [put(m2, P("b", "a"), x)])
    # ... and a transpose (also under an element-wise op) carries it, its dims permuted.
    yield ("jit_unspecified_transposed_out", jax.jit(lambda x: (x.T, jnp.cos(x).T * 2.0)),
           [put(m2, P("a", "b"), x)])
    # ... and a product keeps its operands' splits along the dimensions it keeps
    # (the rhs's giving way where both split over the same devices).
    yield ("jit_unspecified_dot_out", jax.jit(lambda x, w: (x @ x.T, x.T @ x, x @ w)),
           [put(m2, P("a", "b"), x), put(m2, P(None, "b"), w)])
    # ... and through broadcasts and concatenations (what jnp.stack lowers to),
    # and a constraint that leaves its dimensions open (P.UNCONSTRAINED).
    yield ("jit_unspecified_stacked_out", jax.jit(lambda x: jax.lax.with_sharding_constraint(
        jnp.stack([x * 2.0, x + 1.0], axis=-1).transpose(1, 0, 2),
        NamedSharding(m2, P(P.UNCONSTRAINED, P.UNCONSTRAINED, None)))),
           [put(m2, P("a", "b"), x)])
    # ... and a constraint that pins one dimension and leaves the other open
    # takes the operand's split there.
    yield ("jit_partly_open_constraint", jax.jit(lambda x: jax.lax.with_sharding_constraint(
        jnp.sin(x) * 2.0, NamedSharding(m2, P(P.UNCONSTRAINED, "b"))) + 1.0), [put(m2, P("a", None), x)])
    # ... and out of a loop: what its body returns (scan over a constrained step).
    yield ("jit_scan_constrained_out", jax.jit(lambda x: jax.lax.scan(
        lambda c, _: (jax.lax.with_sharding_constraint(c * 2.0, NamedSharding(m2, P("b", "a"))), None),
        x, None, length=2)[0]), [put(m2, P(), x)])
    # ... and a sharding group (shard_alike): a value with no source of its
    # own takes the sharding its group's other member gets.
    def alike(x):
        from jax.experimental.shard_alike import shard_alike

        constrained = jax.lax.with_sharding_constraint(x * 2.0, NamedSharding(m2, P("b", "a")))
        _, counted = shard_alike(constrained, jnp.arange(32.0).reshape(8, 4))
        return constrained + 1.0, counted
    yield ("jit_unspecified_shard_alike_out", jax.jit(alike), [put(m2, P(), x)])
    # ... and a propagated split its tiles do not divide (7 rows over "a")
    # is dropped from that dimension only.
    yield ("jit_unspecified_uneven_out", jax.jit(lambda x: (jax.lax.with_sharding_constraint(
        x[:7] * 2.0, NamedSharding(m2, P("a", "b"))), jnp.sin(x[:7, :3]), x[:, :3] + 1.0)),
           [put(m2, P("a", "b"), x)])
    # ... and through slices, reverses, dynamic slices and gathers (splits
    # kept where the size is) and reshapes that merge or split dimensions.
    yield ("jit_unspecified_reshaped_out", jax.jit(lambda x, i: (
        x[1:5] * 2.0, x.reshape(4, 8), x.reshape(2, 4, 4), x[:, 1:2].reshape(8),
        jax.lax.dynamic_slice_in_dim(x, i, 4, 0), x[i], x[jnp.array([1, 3, 6])],
        jnp.take(x, jnp.array([3, 0]), axis=1), x[::-1, 1:])), [put(m2, P("a", "b"), x), put(m2, P(), np.int32(3))])
    # A parameter JAX leaves to the compiler (an uncommitted argument) takes the
    # sharding its uses give: another member of its sharding group's, a
    # constraint's after element-wise ops; JAX places the argument so.
    from jax.experimental.shard_alike import shard_alike
    z = matrix(8, 4, 4)
    yield ("jit_open_parameter_alike", jax.jit(lambda x, z: shard_alike(x, z)), [put(m2, P("a", "b"), x), z])
    yield ("jit_open_parameter_constrained", jax.jit(lambda x, z: (z, jax.lax.with_sharding_constraint(
        jnp.sin(z) * 2.0, NamedSharding(m2, P("b", None))) + x)), [put(m2, P(), x), z])

    # jax.debug.inspect_array_sharding: the callback hears the sharding propagation gives.
    def inspected(x):
        y = x * 2.0
        jax.debug.inspect_array_sharding(y, callback=lambda sharding: INSPECTED.append(str(sharding.spec)))
        return y + 1.0
    yield ("jit_inspected_sharding", jax.jit(inspected), [put(m2, P("b", "a"), x)])
    y = matrix(8, 6, 3)

    def loss(w, x, y):
        return jnp.mean((jnp.tanh(x @ w) - y) ** 2)
    yield ("jit_train_step", jax.jit(lambda w, x, y: w - 0.1 * jax.grad(loss)(w, x, y),
                                     out_shardings=NamedSharding(m1, P())),
           [put(m1, P(), w), put(m1, P("x"), x), put(m1, P("x"), y)])


def shard_map_cases():
    """shard_map with collectives inside (manual partitioning)."""
    m1, m2 = mesh_1d(), mesh_2d()
    x = matrix(8, 4, 2)
    ring = [(i, (i + 1) % 4) for i in range(4)]

    def collectives(x):
        gathered = jax.lax.all_gather(x, "x", tiled=True)
        return (jax.lax.psum(x, "x"), gathered, jax.lax.ppermute(x, "x", ring),
                jax.lax.psum_scatter(gathered * 2.0, "x", tiled=True),
                x * jax.lax.axis_index("x").astype(jnp.float32))
    yield ("shard_map_collectives", jax.jit(jax.shard_map(
        collectives, mesh=m1, in_specs=P("x"),
        out_specs=(P(), P(), P("x"), P("x"), P("x")), check_vma=False)), [put(m1, P("x"), x)])

    def per_row_axis(x):
        return jax.lax.psum(x, "a"), jax.lax.pmax(x, "b")
    yield ("shard_map_mesh_2d", jax.jit(jax.shard_map(
        per_row_axis, mesh=m2, in_specs=P("a", "b"), out_specs=(P(None, "b"), P("a")),
        check_vma=False)), [put(m2, P("a", "b"), x)])

    def then_global(x):
        return jax.shard_map(lambda v: jax.lax.psum(v * v, "x"), mesh=m1, in_specs=P("x"),
                             out_specs=P(), check_vma=False)(jnp.cos(x)) + 1.0
    yield ("shard_map_inside_jit", jax.jit(then_global, out_shardings=NamedSharding(m1, P())),
           [put(m1, P("x"), x)])


def more_shard_map_cases():
    """Device order, all_to_all, a loop around a collective, partial manual axes."""
    m1, m2 = mesh_1d(), mesh_2d()
    reversed_mesh = Mesh(np.array(jax.devices()[:4])[::-1], ("x",))
    x = matrix(8, 4, 4)
    ring = [(i, (i + 1) % 4) for i in range(4)]
    yield ("shard_map_reversed_mesh", jax.jit(jax.shard_map(
        lambda v: jax.lax.ppermute(v, "x", ring) + jax.lax.axis_index("x").astype(jnp.float32),
        mesh=reversed_mesh, in_specs=P("x"), out_specs=P("x"))), [put(reversed_mesh, P("x"), x)])
    wide = matrix(4, 16, 5)
    yield ("shard_map_all_to_all", jax.jit(jax.shard_map(
        lambda v: jax.lax.all_to_all(v, "x", 0, 1, tiled=True), mesh=m1, in_specs=P(None, "x"),
        out_specs=P("x"))), [put(m1, P(None, "x"), wide)])
    yield ("shard_map_loop", jax.jit(jax.shard_map(
        lambda v: jax.lax.fori_loop(0, 3, lambda i, c: jax.lax.psum(c, "x") / 4 + c, v),
        mesh=m1, in_specs=P("x"), out_specs=P("x"), check_vma=False)), [put(m1, P("x"), x)])
    # Manual over "a" only, with a constraint over the free axis "b" inside:
    # the result's open dimension takes it.
    def constrained(v):
        return jax.lax.with_sharding_constraint(v * v, NamedSharding(m2, P(None, "b")))
    yield ("shard_map_partial_manual_constrained", jax.jit(jax.shard_map(
        constrained, mesh=m2, in_specs=P("a"), out_specs=P("a"), axis_names={"a"},
        check_vma=False)), [put(m2, P("a"), x)])
    yield ("shard_map_partial_manual_constrained_replicated", jax.jit(jax.shard_map(
        constrained, mesh=m2, in_specs=P(), out_specs=P(), axis_names={"a"},
        check_vma=False)), [put(m2, P(), x)])
    # Manual over "a" only; "b" stays automatic inside the body.
    yield ("shard_map_partial_manual", jax.jit(jax.shard_map(
        lambda v: jax.lax.psum(jnp.sin(v), "a"), mesh=m2, in_specs=P("a"), out_specs=P(),
        axis_names={"a"}, check_vma=False)), [put(m2, P("a", "b"), x)])

    def outer(v):       # manual over "a"; inside it, a shard_map manual over "b"
        inner = jax.shard_map(lambda u: jax.lax.psum(u, "b") * 10.0,
                              mesh=jax.sharding.get_abstract_mesh(), in_specs=P(None, "b"),
                              out_specs=P(), axis_names={"b"}, check_vma=False)
        return jax.lax.psum(inner(v), "a")
    yield ("shard_map_nested", jax.jit(jax.shard_map(
        outer, mesh=m2, in_specs=P("a", None), out_specs=P(), axis_names={"a"},
        check_vma=False)), [put(m2, P("a", "b"), x)])

    # Under jax.grad, JAX outlines the shard_map into a private function that
    # the entry calls: the result's sharding comes through the func.call.
    gather = jax.jit(jax.shard_map(lambda v: jax.lax.all_gather(v, "x", tiled=True, to="invarying"),
                                   mesh=m1, in_specs=P("x"), out_specs=P()))
    yield ("shard_map_outlined_by_grad", jax.jit(jax.grad(lambda v: (gather(v) ** 2).sum() / 2)),
           [put(m1, P(), np.arange(8.0, dtype=np.float32))])
    # pmap's out_axes=None: a manual result replicated over the manual axis
    # that differs per device; XLA leaves each device its own value.
    yield ("pmap_out_axes_none", jax.pmap(lambda v, w: (v, w), in_axes=(0, None), out_axes=(None, 0)),
           [put(m1, P("x"), matrix(4, 2, 6)), put(m1, P(), matrix(4, 2, 7))])


def shards(array) -> list[np.ndarray]:
    """The array's shards in device-id order."""
    return [np.asarray(s.data) for s in sorted(array.addressable_shards, key=lambda s: s.device.id)]


def spec_of(array) -> str:
    sharding = array.sharding
    return str(getattr(sharding, "spec", sharding))


# What jax.debug.inspect_array_sharding's callbacks heard in the case running.
INSPECTED: list[str] = []


def run_all() -> dict:
    results = {}
    for name, fn, args in list(jit_cases()) + list(shard_map_cases()) + list(more_shard_map_cases()):
        INSPECTED.clear()
        outputs = fn(*args)
        heard = list(INSPECTED)        # (compiling again below may call the callbacks again)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        mesh = args[0].sharding.mesh
        # Arguments JAX left to the compiler go where the compiled program says.
        chosen = fn.lower(*args).compile().input_shardings[0]
        placed = [a if isinstance(a, jax.Array) else jax.device_put(a, s) for a, s in zip(args, chosen)]
        results[name] = {
            # Logical device (partition) p of the compiled program is mesh position p.
            "device_order": [d.id for d in mesh.devices.flat],
            "text": fn.lower(*args).as_text(),
            "arguments": [shards(a) for a in placed],
            "argument_hlo_shardings": [str(s._to_xla_hlo_sharding(np.ndim(a))) for s, a in zip(chosen, args)],
            "inspected": heard,
            "outputs": [shards(o) for o in outputs],
            "globals": [np.asarray(o) for o in outputs],
            "specs": [spec_of(o) for o in outputs],
            "shard_shapes": [o.sharding.shard_shape(o.shape) for o in outputs],
            "hlo_shardings": [str(o.sharding._to_xla_hlo_sharding(o.ndim)) for o in outputs],
        }
    return results


if __name__ == "__main__":
    with open(sys.argv[1], "wb") as handle:
        pickle.dump(run_all(), handle)
