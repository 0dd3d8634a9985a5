"""Collectives on one process, replica_id/partition_id, tokens and host channels.

Programs are compared with the StableHLO reference interpreter (which runs
one process, like pjrt-ref), and with JAX cpu for what JAX lowers itself.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.oracle import assert_same_as_jax

import jax
from jax import lax
from jax.sharding import PartitionSpec as P

from pjrt_ref.errors import InvalidArgument, Unavailable, Unimplemented
from pjrt_ref.interpreter import load
import threading

from pjrt_ref.interpreter.ops.side_effects import attach_host_channel, set_default_host_channel




COLLECTIVES = """
module attributes {mhlo.num_replicas = 1 : i32, mhlo.num_partitions = 1 : i32} {
func.func @main(%x: tensor<2x4xf32>, %y: tensor<2x4xi32>)
    -> (tensor<2x4xf32>, tensor<2x4xi32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>,
        tensor<2x4xf32>, tensor<ui32>, tensor<ui32>) {
  %ar0 = "stablehlo.all_reduce"(%x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
  }) {replica_groups = dense<[[0]]> : tensor<1x1xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %ar1 = "stablehlo.all_reduce"(%y) ({
    ^bb0(%a: tensor<i32>, %b: tensor<i32>):
      %s = stablehlo.multiply %a, %b : tensor<i32>
      stablehlo.return %s : tensor<i32>
  }) {replica_groups = dense<[[0]]> : tensor<1x1xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>} : (tensor<2x4xi32>) -> tensor<2x4xi32>
  %ag = "stablehlo.all_gather"(%x) {all_gather_dim = 1 : i64,
      replica_groups = dense<[[0]]> : tensor<1x1xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>,
      use_global_device_ids} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %rs = "stablehlo.reduce_scatter"(%x) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.maximum %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
  }) {scatter_dimension = 0 : i64, replica_groups = dense<[[0]]> : tensor<1x1xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %aa = "stablehlo.all_to_all"(%x) {split_dimension = 1 : i64, concat_dimension = 0 : i64,
      split_count = 1 : i64, replica_groups = dense<[[0]]> : tensor<1x1xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %cp = "stablehlo.collective_permute"(%x) {source_target_pairs = dense<[[0, 0]]> : tensor<1x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 2, type = 0>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %cb = "stablehlo.collective_broadcast"(%x) {replica_groups = dense<[[0]]> : tensor<1x1xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %r = stablehlo.replica_id : tensor<ui32>
  %p = stablehlo.partition_id : tensor<ui32>
  return %ar0, %ar1, %ag, %rs, %aa, %cp, %r, %p : tensor<2x4xf32>, tensor<2x4xi32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<ui32>, tensor<ui32>
}
}
"""


def test_collectives_on_one_process_return_their_operands():
    # The reference interpreter runs collectives only in run_parallel, which
    # jaxlib does not expose; by the spec, over a one-process group every
    # one of these is the identity (all_reduce never applies its region).
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3.5
    y = np.arange(8, dtype=np.int32).reshape(2, 4)
    results = load(COLLECTIVES)(x, y)
    for result, expected in zip(results, [x, y, x, x, x, x]):
        assert result.dtype == expected.dtype
        np.testing.assert_array_equal(result, expected)
    assert [r.dtype for r in results[-2:]] == [np.uint32, np.uint32]
    assert [r.shape for r in results[-2:]] == [(), ()] and not results[-1] and not results[-2]


PERMUTE_WITHOUT_SOURCE = """
func.func @main(%x: tensor<3xi64>) -> tensor<3xi64> {
  %r = "stablehlo.collective_permute"(%x) {source_target_pairs = dense<0> : tensor<0x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>} : (tensor<3xi64>) -> tensor<3xi64>
  return %r : tensor<3xi64>
}
"""


def test_collective_permute_with_no_source_gives_zeros():
    result = load(PERMUTE_WITHOUT_SOURCE)(np.array([4, 5, 6], np.int64))[0]
    assert result.dtype == np.int64
    np.testing.assert_array_equal(result, [0, 0, 0])


def _shard_map_on_one_device(body):
    mesh = jax.make_mesh((1,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i"),
                                 check_vma=False))


def test_jax_shard_map_collectives_on_one_device():
    def body(x):
        total = lax.psum(x, "i") + lax.pmax(x, "i") * lax.pmin(x, "i")
        gathered = lax.all_gather(x, "i", axis=0, tiled=True)
        scattered = lax.psum_scatter(x, "i", scatter_dimension=0, tiled=True)
        permuted = lax.ppermute(x, "i", perm=[(0, 0)])
        return total + gathered - scattered + permuted + lax.axis_index("i")

    assert_same_as_jax(_shard_map_on_one_device(body), np.arange(8, dtype=np.float32) - 2)


def test_jax_ppermute_without_a_source_gives_zeros():
    def body(x):
        return lax.ppermute(x, "i", perm=[]) + 1

    assert_same_as_jax(_shard_map_on_one_device(body), np.arange(4, dtype=np.int32))


QUANTIZED_PERMUTE = """
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  %q = stablehlo.uniform_quantize %x : (tensor<3xf32>) -> tensor<3x!quant.uniform<i8:f32, 0.5:7>>
  %r = "stablehlo.collective_permute"(%q) {source_target_pairs = dense<0> : tensor<0x2xi64>,
      channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>} : (tensor<3x!quant.uniform<i8:f32, 0.5:7>>) -> tensor<3x!quant.uniform<i8:f32, 0.5:7>>
  %d = stablehlo.uniform_dequantize %r : (tensor<3x!quant.uniform<i8:f32, 0.5:7>>) -> tensor<3xf32>
  return %d : tensor<3xf32>
}
"""


def test_quantized_collective_permute_zeros_are_quantized_zeros():
    # No oracle runs quantized collectives; quantize(0) dequantizes to 0.
    ours = load(QUANTIZED_PERMUTE)(np.array([1, 2, 3], np.float32))[0]
    np.testing.assert_array_equal(ours, np.zeros(3, np.float32))


CROSS_REPLICA_SUM = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "stablehlo.cross-replica-sum"(%x) {replica_groups = dense<[[0]]> : tensor<1x1xi64>} : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
"""


def test_cross_replica_sum_over_one_replica_is_the_identity():
    # Not in the spec nor in the reference interpreter: a sum over one replica.
    x = np.array([1, -2, 3.5, 0], np.float32)
    np.testing.assert_array_equal(load(CROSS_REPLICA_SUM)(x)[0], x)


def test_jax_psum_and_axis_index_on_one_device():
    def f(x):
        return jax.vmap(lambda v: lax.psum(v, "i") + lax.axis_index("i"), axis_name="i")(x)

    assert_same_as_jax(f, np.arange(1, dtype=np.int32).reshape(1, 1))


ALL_GATHER_TWO_REPLICAS = """
module attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
func.func @main(%x: tensor<2xf32>) -> tensor<4xf32> {
  %g = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64,
      replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2xf32>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}
}
"""


def test_program_for_several_replicas_is_rejected_when_called_as_one_process():
    program = load(ALL_GATHER_TWO_REPLICAS)   # loads: pjrt_ref runs it on two devices
    with pytest.raises(Unimplemented, match="2 replica.*stablehlo.all_gather|all_gather.*2 replica"):
        program(np.zeros(2, np.float32))


def test_replica_ids_outside_the_grid_are_rejected():
    text = COLLECTIVES.replace("dense<[[0]]> : tensor<1x1xi64>", "dense<[[1]]> : tensor<1x1xi64>")
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(InvalidArgument, match="replica groups"):
        load(text)(x, x.astype(np.int32))


# --- Host channels ----------------------------------------------------------

HOST_OPS = """
func.func @main(%x: tensor<2xi32>) -> (tensor<2xi32>, tensor<3xf32>) {
  %t = stablehlo.after_all : !stablehlo.token
  %t1 = "stablehlo.outfeed"(%x, %t) {outfeed_config = "cfg"} : (tensor<2xi32>, !stablehlo.token) -> !stablehlo.token
  %i:2 = "stablehlo.infeed"(%t1) {infeed_config = ""} : (!stablehlo.token) -> (tensor<2xi32>, !stablehlo.token)
  %t2 = "stablehlo.send"(%x, %i#1) {channel_handle = #stablehlo.channel_handle<handle = 5, type = 2>, is_host_transfer = true} : (tensor<2xi32>, !stablehlo.token) -> !stablehlo.token
  %r:2 = "stablehlo.recv"(%t2) {channel_handle = #stablehlo.channel_handle<handle = 6, type = 3>, is_host_transfer = true} : (!stablehlo.token) -> (tensor<3xf32>, !stablehlo.token)
  return %i#0, %r#0 : tensor<2xi32>, tensor<3xf32>
}
"""


class FakeHost:
    def __init__(self):
        self.log = []

    def infeed(self, config, result_types):
        self.log.append(("infeed", config))
        return [np.array([7, 8], np.int32)]

    def outfeed(self, config, values):
        self.log.append(("outfeed", config, [v.tolist() for v in values]))

    def send(self, channel_id, channel_type, is_host_transfer, values):
        self.log.append(("send", channel_id, is_host_transfer, [v.tolist() for v in values]))

    def recv(self, channel_id, channel_type, is_host_transfer, result_types):
        self.log.append(("recv", channel_id))
        return [np.ones(3, np.float32)]


def test_host_ops_without_a_host_channel_are_unavailable():
    program = load(HOST_OPS)
    with pytest.raises(Unavailable, match="outfeed.*no host channel"):
        program(np.array([1, 2], np.int32))


def test_host_ops_use_the_attached_host_channel_in_program_order():
    host = FakeHost()
    with attach_host_channel(host):
        infed, received = load(HOST_OPS)(np.array([1, 2], np.int32))
    np.testing.assert_array_equal(infed, [7, 8])
    np.testing.assert_array_equal(received, [1, 1, 1])
    assert host.log == [("outfeed", "cfg", [[1, 2]]), ("infeed", ""),
                        ("send", 5, True, [[1, 2]]), ("recv", 6)]


def test_host_channel_values_must_match_the_result_types():
    class WrongHost(FakeHost):
        def infeed(self, config, result_types):
            return [np.zeros(2, np.int64)]

    with attach_host_channel(WrongHost()), pytest.raises(InvalidArgument, match="expected"):
        load(HOST_OPS)(np.array([1, 2], np.int32))


def test_default_host_channel_serves_other_threads():
    host, results = FakeHost(), []
    program = load(HOST_OPS)
    set_default_host_channel(host)
    try:
        thread = threading.Thread(target=lambda: results.append(program(np.array([3, 4], np.int32))))
        thread.start()
        thread.join()
    finally:
        set_default_host_channel(None)
    np.testing.assert_array_equal(results[0][0], [7, 8])
    assert host.log[0] == ("outfeed", "cfg", [[3, 4]])
