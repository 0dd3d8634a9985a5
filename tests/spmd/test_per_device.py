"""The per-device program (pjrt_ref/spmd/per_device/): what each device runs.

Hand-written annotated programs are partitioned over a few devices; each
test checks what the per-device program promises (which collectives it has,
that every value is a tile where it can be) and that the devices' results,
put back together, are the global program's results computed by numpy (the
oracle; nothing here reads pjrt-ref's own global run). JAX programs are
checked against JAX's cpu backend.
"""
from __future__ import annotations

import numpy as np
import pytest

from pjrt_ref.interpreter import load
from pjrt_ref.spmd.partitioner import make_partitioned_runner
from tests.support.jax_support import run_on_cpu_and_pjrt_ref

ROWS = '#sdy.sharding<@mesh, [{"x"}, {}]>'
WHOLE = '#sdy.sharding<@mesh, [{}, {}]>'


def module(body: str, arguments: str, results: str, devices: int = 4) -> str:
    return (f'module @m attributes {{mhlo.num_partitions = {devices} : i32, mhlo.num_replicas = 1 : i32}} {{\n'
            f'  sdy.mesh @mesh = <["x"={devices}]>\n'
            f'  func.func public @main({arguments}) -> ({results}) {{\n{body}\n  }}\n}}')


def partitioned(text: str, devices: int = 4):
    runner = make_partitioned_runner(load(text), num_partitions=devices, num_replicas=1)
    assert runner.lowered is not None, runner.kept_whole_because
    return runner


def run_rows(runner, x: np.ndarray, devices: int = 4) -> list[np.ndarray]:
    """Run with `x` split by rows; each device's first result."""
    rows = np.split(x, devices)
    return [outputs[0] for outputs in runner([[rows[d]] for d in range(devices)])]


X = np.arange(32, dtype=np.float32).reshape(8, 4) - 7.5


def test_element_wise_ops_and_iota_run_on_tiles_without_collectives():
    text = module("""
    %i = stablehlo.iota dim = 0 : tensor<8x4xf32>
    %c = stablehlo.constant dense<2.0> : tensor<f32>
    %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<8x4xf32>
    %m = stablehlo.multiply %arg0, %b : tensor<8x4xf32>
    %r = stablehlo.add %m, %i : tensor<8x4xf32>
    return %r : tensor<8x4xf32>""", f"%arg0: tensor<8x4xf32> {{sdy.sharding = {ROWS}}}",
                  f"tensor<8x4xf32> {{sdy.sharding = {ROWS}}}")
    runner = partitioned(text)
    program = runner.lowered.text
    assert "tensor<8x4xf32>" not in program.split("#loc")[0]          # every value is a tile
    assert "all_gather" not in program and "all_reduce" not in program
    expected = X * 2 + np.arange(8, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(np.concatenate(run_rows(runner, X)), expected)


@pytest.mark.parametrize("init, collective", [(0.0, "all_reduce"), (5.0, "all_gather")],
                         ids=["identity_init", "other_init"])
def test_a_reduce_over_a_split_dimension(init, collective):
    """Each device sums its rows and an all_reduce adds the partial sums; an init
    value other than the identity would be counted once per device, so then the
    split dimension is gathered and reduced whole."""
    text = module(f"""
    %z = stablehlo.constant dense<{init}> : tensor<f32>
    %s = stablehlo.reduce(%arg0 init: %z) applies stablehlo.add across dimensions = [0]
        : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32>
    return %s : tensor<4xf32>""", f"%arg0: tensor<8x4xf32> {{sdy.sharding = {ROWS}}}",
                  'tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}')
    runner = partitioned(text)
    other = {"all_reduce": "all_gather", "all_gather": "all_reduce"}[collective]
    assert collective in runner.lowered.text and other not in runner.lowered.text
    for result in run_rows(runner, X):
        np.testing.assert_allclose(result, X.sum(axis=0) + init, rtol=1e-6)


def test_a_product_over_split_contracting_dimensions_adds_partial_sums():
    columns = '#sdy.sharding<@mesh, [{}, {"x"}]>'
    text = module("""
    %d = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0]
        : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    return %d : tensor<4x3xf32>""",
                  f"%arg0: tensor<4x8xf32> {{sdy.sharding = {columns}}}, "
                  f"%arg1: tensor<8x3xf32> {{sdy.sharding = {ROWS}}}",
                  f"tensor<4x3xf32> {{sdy.sharding = {WHOLE}}}")
    runner = partitioned(text)
    assert "all_reduce" in runner.lowered.text and "all_gather" not in runner.lowered.text
    a = np.arange(32, dtype=np.float32).reshape(4, 8) / 7
    b = np.arange(24, dtype=np.float32).reshape(8, 3) - 3
    a_tiles, b_tiles = np.split(a, 4, axis=1), np.split(b, 4)
    outputs = runner([[a_tiles[d], b_tiles[d]] for d in range(4)])
    for device in range(4):
        np.testing.assert_allclose(outputs[device][0], a @ b, rtol=1e-5)


def test_an_op_without_a_rule_runs_on_gathered_operands_and_says_so():
    """sort along the split dimension: the reference gathers it (XLA's own
    choice may differ; the values may not)."""
    text = module("""
    %s = "stablehlo.sort"(%arg0) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %lt = stablehlo.compare LT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
        stablehlo.return %lt : tensor<i1>
    }) {dimension = 0 : i64, is_stable = true} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %s : tensor<8x4xf32>""", f"%arg0: tensor<8x4xf32> {{sdy.sharding = {ROWS}}}",
                  f"tensor<8x4xf32> {{sdy.sharding = {ROWS}}}")
    runner = partitioned(text)
    assert "all_gather" in runner.lowered.text
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    np.testing.assert_array_equal(np.concatenate(run_rows(runner, x)), np.sort(x, axis=0))


def test_sort_along_a_whole_dimension_keeps_the_split():
    text = module("""
    %s = "stablehlo.sort"(%arg0) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %lt = stablehlo.compare LT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
        stablehlo.return %lt : tensor<i1>
    }) {dimension = 1 : i64, is_stable = true} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %s : tensor<8x4xf32>""", f"%arg0: tensor<8x4xf32> {{sdy.sharding = {ROWS}}}",
                  f"tensor<8x4xf32> {{sdy.sharding = {ROWS}}}")
    runner = partitioned(text)
    assert runner.gathered_for == () and "all_gather" not in runner.lowered.text
    x = np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)
    np.testing.assert_array_equal(np.concatenate(run_rows(runner, x)), np.sort(x, axis=1))


def test_a_loop_carries_tiles():
    text = module("""
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %r:2 = stablehlo.while(%i = %zero, %v = %arg0) : tensor<i32>, tensor<8x4xf32>
    cond {
      %n = stablehlo.constant dense<3> : tensor<i32>
      %lt = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %one = stablehlo.constant dense<1> : tensor<i32>
      %next = stablehlo.add %i, %one : tensor<i32>
      %w = stablehlo.multiply %v, %v : tensor<8x4xf32>
      stablehlo.return %next, %w : tensor<i32>, tensor<8x4xf32>
    }
    return %r#1 : tensor<8x4xf32>""", f"%arg0: tensor<8x4xf32> {{sdy.sharding = {ROWS}}}",
                  f"tensor<8x4xf32> {{sdy.sharding = {ROWS}}}")
    runner = partitioned(text)
    assert "all_gather" not in runner.lowered.text and "tensor<2x4xf32>" in runner.lowered.text
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_allclose(np.concatenate(run_rows(runner, x)), x ** 8, rtol=1e-6)


def test_a_program_with_collectives_of_its_own_runs_whole(monkeypatch):
    text = module("""
    %p = stablehlo.partition_id : tensor<ui32>
    %c = stablehlo.convert %p : (tensor<ui32>) -> tensor<f32>
    %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<8x4xf32>
    %r = stablehlo.add %arg0, %b : tensor<8x4xf32>
    return %r : tensor<8x4xf32>""", f"%arg0: tensor<8x4xf32> {{sdy.sharding = {ROWS}}}",
                  f"tensor<8x4xf32> {{sdy.sharding = {ROWS}}}")
    runner = make_partitioned_runner(load(text), num_partitions=4, num_replicas=1)
    assert runner.lowered is None and "partition_id" in runner.kept_whole_because


def test_the_setting_off_runs_the_global_program(monkeypatch):
    monkeypatch.setenv("PJRT_REF_SPMD_PER_DEVICE", "0")
    text = module("""
    %r = stablehlo.sine %arg0 : tensor<8x4xf32>
    return %r : tensor<8x4xf32>""", f"%arg0: tensor<8x4xf32> {{sdy.sharding = {ROWS}}}",
                  f"tensor<8x4xf32> {{sdy.sharding = {ROWS}}}")
    runner = make_partitioned_runner(load(text), num_partitions=4, num_replicas=1)
    assert runner.lowered is None
    np.testing.assert_allclose(np.concatenate(run_rows(runner, X)), np.sin(X), rtol=1e-6)


PRELUDE = """
jax.config.update("jax_num_cpu_devices", 4)
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax._src.random import threefry2x32
"""


@pytest.mark.slow
def test_jax_programs_show_their_collectives_and_agree_with_cpu():
    """What JAX's tests read from `compiled.as_text()`: a sum over a split
    axis has an all-reduce, a product whose operands' splits do not fit an
    all-gather, a partitionable PRNG draw no array of the global shape; the
    values are the cpu backend's (what XLA's text shows is its own business).
    """
    results = run_on_cpu_and_pjrt_ref("""
def run(devices):
    mesh = Mesh(np.array(devices[:4]), ("x",))
    rows = NamedSharding(mesh, P("x", None))
    x = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(8, 4), rows)
    w = jax.device_put(np.arange(8.0, dtype=np.float32).reshape(4, 2), NamedSharding(mesh, P("x", None)))
    total = jax.jit(lambda a: a.sum(axis=0))
    product = jax.jit(lambda a, b: a @ b)
    def bits(a):
        return threefry2x32.threefry_random_bits(jnp.array([0, 0], dtype="uint32"), 32, a.shape) + a
    n = jax.device_put(np.arange(16, dtype=np.uint32), NamedSharding(mesh, P("x")))
    with jax.threefry_partitionable(True):
        draw = jax.jit(bits)
        draw_text = draw.lower(n).compile().as_text()
        drawn = np.asarray(draw(n)).tolist()
    return {"sum": np.asarray(total(x)).tolist(),
            "sum_all_reduce": "all-reduce" in total.lower(x).compile().as_text(),
            "product": np.asarray(product(x, w)).tolist(),
            "product_all_gather": "all-gather" in product.lower(x, w).compile().as_text(),
            "drawn": drawn, "draw_global_shape": "[16]" in draw_text}
""", prelude=PRELUDE, timeout=300)
    ours, cpu = results["pjrt_ref"], results["cpu"]
    assert [ours[k] for k in ("sum", "product", "drawn")] == [cpu[k] for k in ("sum", "product", "drawn")]
    assert ours["sum_all_reduce"] and ours["product_all_gather"] and not ours["draw_global_shape"], ours


@pytest.mark.slow
def test_unreduced_gradients_accumulate_in_a_loop_and_are_added_once():
    """JAX's minibatch pattern (pjit_test's test_minibatch_scan_unreduced): the weight
    gradients stay partial sums across the scan, one all-reduce adds them after it;
    the values are the cpu backend's."""
    results = run_on_cpu_and_pjrt_ref("""
from jax.sharding import AxisType, reshard

def run(devices):
    def model(ws, xs):
        for w in ws:
            xs = jnp.dot(xs, w)
        return jnp.sum(xs)

    @jax.jit
    def step(ws, xs):
        def body(acc, x):
            grad = jax.grad(model)(ws, x)
            return jax.tree.map(jnp.add, acc, grad), None
        acc = reshard(jax.tree.map(jnp.zeros_like, ws), P(unreduced={"x"}))
        acc, _ = jax.lax.scan(body, acc, xs)
        acc = reshard(acc, P())
        return jax.tree.map(lambda w, g: w - g * 0.01, reshard(ws, P()), acc)

    mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,), devices=devices[:2])
    rng = np.random.RandomState(0)
    with jax.set_mesh(mesh):
        ws = tuple(jax.device_put(rng.rand(4, 4).astype(np.float32), P(reduced={"x"})) for _ in range(3))
        xs = jax.device_put(rng.rand(2, 2, 4).astype(np.float32), P(None, "x", None))
        out = step(ws, xs)
        text = step.lower(ws, xs).compile().as_text()
    return {"values": [np.asarray(o).round(5).tolist() for o in out], "all_reduces": text.count("all-reduce(")}
""", prelude=PRELUDE, timeout=300)
    ours, cpu = results["pjrt_ref"], results["cpu"]
    np.testing.assert_allclose(np.array(ours["values"]), np.array(cpu["values"]), rtol=1e-5, atol=1e-5)
    assert ours["all_reduces"] == 1
