"""`jax.experimental.custom_partitioning` on several pjrt_ref devices
(pjrt_ref/spmd/custom_partitioning.py, the PJRT Custom Partitioner extension):
values and result shardings against JAX's cpu backend, the sharding-rule
propagation on its own, and the errors."""
from __future__ import annotations

import numpy as np
import pytest

from pjrt_ref.spmd.custom_partitioning import parse_sharding_rule
from pjrt_ref.spmd.layout import Layout, replicated
from tests.support.jax_support import run_jax, run_on_cpu_and_pjrt_ref

PRELUDE = """
from functools import partial
jax.config.update("jax_num_cpu_devices", 8)
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
"""

CASES = {
    # The per-device body differs from the function's own: only the callbacks' answer runs.
    "elementwise_with_a_rule": """
@custom_partitioning
def f(x, y):
    return x + y

def partition(mesh, arg_shapes, result_shape):
    return mesh, lambda x, y: x + 2 * y, arg_shapes[0].sharding, (arg_shapes[0].sharding,) * 2

f.def_partition(partition=partition, sharding_rule="i j, i j -> i j")

def run(devices):
    mesh = Mesh(np.array(devices[:4]), ("x",))
    x = jax.device_put(np.arange(32.0).reshape(8, 4), NamedSharding(mesh, P("x")))
    y = jax.device_put(np.ones((8, 4)), NamedSharding(mesh, P()))
    r = jax.jit(f)(x, y)
    return [str(r.sharding.spec), np.asarray(r).tolist()]
""",
    # A collective inside the per-device module.
    "psum_inside": """
@custom_partitioning
def f(x):
    return x.sum(axis=0)

def partition(mesh, arg_shapes, result_shape):
    def lower(x):
        return jax.lax.psum(x.sum(axis=0), "x")
    return mesh, lower, NamedSharding(mesh, P()), (NamedSharding(mesh, P("x")),)

f.def_partition(partition=partition, sharding_rule="i j -> j", reduction_factors=("i",))

def run(devices):
    mesh = Mesh(np.array(devices[:4]), ("x",))
    x = jax.device_put(np.arange(32.0).reshape(8, 4), NamedSharding(mesh, P("x")))
    r = jax.jit(f)(x)
    return [str(r.sharding.spec), np.asarray(r).tolist()]
""",
    # Two results, each split as the callbacks say.
    "two_results": """
@custom_partitioning
def f(x):
    return x * 3, x + 1

def partition(mesh, arg_shapes, result_shape):
    rows = NamedSharding(mesh, P("x"))
    return mesh, lambda x: (x * 3, x + 1), (rows, rows), (rows,)

f.def_partition(partition=partition, sharding_rule="i j -> i j, i j")

def run(devices):
    mesh = Mesh(np.array(devices[:4]), ("x",))
    x = jax.device_put(np.arange(32.0).reshape(8, 4), NamedSharding(mesh, P(None, "x")))
    s, t = jax.jit(f)(x)
    return [str(s.sharding.spec), str(t.sharding.spec), np.asarray(s).tolist(), np.asarray(t).tolist()]
""",
    # JAX's reshape case: compound factors and a factor that must stay whole.
    "compound_factors": """
def partition(mesh, arg_shapes, result_shape):
    arg_shardings = jax.tree.map(lambda s: s.sharding, arg_shapes)
    return mesh, lambda x, y: x.reshape((4,)) + y, result_shape.sharding, arg_shardings

@custom_partitioning
def f(x, y):
    return x.reshape((8,)) + y

f.def_partition(partition=partition, sharding_rule="(i k) j, (i k j) -> (i k j)", i=2, k=2,
                need_replication_factors=("k",))

def run(devices):
    mesh = Mesh(np.array(devices[:8]).reshape(2, 4), ("x", "y"))
    x = jax.device_put(np.arange(8).reshape(4, 2), NamedSharding(mesh, P("x", None)))
    y = jax.device_put(np.arange(8), NamedSharding(mesh, P("x")))
    r = jax.jit(f)(x, y)
    return [str(r.sharding.spec), np.asarray(r).tolist()]
""",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_shardings_are_cpu_s(name):
    results = run_on_cpu_and_pjrt_ref(CASES[name], prelude=PRELUDE, timeout=300)
    assert results["pjrt_ref"] == results["cpu"]


def test_a_callback_s_error_is_the_compile_s_error_with_its_message():
    proc = run_jax(PRELUDE + """
@custom_partitioning
def f(x):
    return x * 2

def partition(mesh, arg_shapes, result_shape):
    raise RuntimeError("this partitioner refuses")

f.def_partition(partition=partition, sharding_rule="i -> i")
mesh = Mesh(np.array(jax.devices("pjrt_ref")[:4]), ("x",))
x = jax.device_put(np.arange(8.0), NamedSharding(mesh, P("x")))
try:
    jax.jit(f)(x)
    print("no error")
except Exception as error:
    print(type(error).__name__, str(error).replace(chr(10), " "))
print(np.asarray(jax.jit(lambda v: v + 1)(x)).tolist())      # the plugin goes on working
""", JAX_PLATFORMS="pjrt_ref,cpu", timeout=300)
    refused, after = proc.stdout.strip().splitlines()[-2:]
    assert "this partitioner refuses" in refused and "CustomSPMDPartitioning" in refused
    assert after == str([float(v) + 1 for v in range(8)])


def test_the_call_outside_a_partitioned_program_is_a_clear_error():
    from pjrt_ref.errors import Unimplemented
    from pjrt_ref.interpreter import load

    program = load("""func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = stablehlo.custom_call @CustomSPMDPartitioning(%x) {backend_config = "1"} : (tensor<4xf32>) -> tensor<4xf32>
      return %0 : tensor<4xf32>
    }""")
    with pytest.raises(Unimplemented, match="partitioned over several devices"):
        program(np.zeros(4, np.float32))


# ------------------------------------------------------ the sharding rule alone
def _rows(devices, count=2) -> Layout:
    """Dimension 0 split into `count` tiles over `devices` in order, dimension 1 whole."""
    per = len(devices) // count
    return Layout((count, 1), {d: (i // per, 0) for i, d in enumerate(devices)})


def test_the_rule_carries_a_split_to_the_result_dimensions_of_the_same_factor():
    rule = parse_sharding_rule("#sdy.op_sharding_rule<([i, j], [j, k])->([k, i]) {i=8, j=4, k=2}>")
    devices = [0, 1, 2, 3]
    (result,) = rule.result_layouts([_rows(devices), replicated(2, devices)], devices)
    assert result.tile_counts == (1, 2)
    assert [result.tile_of[d] for d in devices] == [(0, 0), (0, 0), (0, 1), (0, 1)]


def test_compound_dimensions_split_their_major_factor_unless_it_must_stay_whole():
    devices = list(range(4))
    rule = parse_sharding_rule("#sdy.op_sharding_rule<([ij, k], [ijk])->([ijk]) {i=2, j=2, k=2} "
                               "need_replication={j}, custom>")
    assert rule.operands == ((("i", "j"), ("k",)), (("i", "j", "k"),))
    assert rule.need_replication == frozenset("j")
    (result,) = rule.result_layouts([_rows(devices), replicated(1, devices)], devices)
    assert result.tile_counts == (2,)
    blocked = parse_sharding_rule("#sdy.op_sharding_rule<([ji, k])->([ij]) {i=2, j=2, k=2} need_replication={j}>")
    (whole,) = blocked.result_layouts([_rows(devices)], devices)
    assert whole.tile_counts == (1,)

