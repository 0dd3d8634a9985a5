"""Collectives on grids of several processes (`interpreter.run_parallel`),
against the StableHLO reference interpreter, which runs the same harness op
when its `interpreter` dialect is registered.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.interpreter import load

from tests.support import oracle

_REFERENCE_SCRIPT = r"""
import sys
import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo
from pjrt_ref.interpreter.loader import make_context
args = np.load(sys.argv[2])
context = make_context()
stablehlo.register_interpreter_dialect(context)
with context, ir.Location.unknown():
    module = ir.Module.parse(open(sys.argv[1]).read())
    inputs = [ir.DenseElementsAttr.get(args[f"arg{i}"]) for i in range(len(args.files))]
    results = stablehlo.eval_module(module, inputs)
    np.savez(sys.argv[3], **{f"out{i}": np.array(r) for i, r in enumerate(results)})
"""


def run_reference_with_run_parallel(text: str, args) -> list[np.ndarray]:
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, name) for name in ("p.mlir", "in.npz", "out.npz")]
        with open(paths[0], "w") as f:
            f.write(text)
        np.savez(paths[1], **{f"arg{i}": np.asarray(a) for i, a in enumerate(args)})
        proc = subprocess.run([sys.executable, "-c", _REFERENCE_SCRIPT, *paths],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        data = np.load(paths[2])
        return [data[f"out{i}"] for i in range(len(data.files))]


# The reference interpreter runs a grid's processes at once on a thread pool
# with one thread per usable CPU; with fewer CPUs than processes they never
# meet ("LLVM ERROR: rendezvous timed out").
needs_two_cpus = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2,
    reason="the reference interpreter needs a CPU per grid process (2) to run the oracle")


def assert_same_as_reference(text: str, *args):
    """oracle.assert_same_as_reference against the reference interpreter's run_parallel."""
    return oracle.assert_same_as_reference(text, *args, reference=run_reference_with_run_parallel)


TWO_REPLICAS = """
module {
  func.func @process(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4x4xf32>, tensor<1x4xf32>,
      tensor<4x2xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<ui32>) {
    %sum = "stablehlo.all_reduce"(%x) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %gathered = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64,
        replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>} : (tensor<2x4xf32>) -> tensor<4x4xf32>
    %scattered = "stablehlo.reduce_scatter"(%x) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %c = stablehlo.compare GT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %m = stablehlo.select %c, %a, %b : tensor<i1>, tensor<f32>
        %n = stablehlo.reshape %m : (tensor<f32>) -> tensor<f32>
        stablehlo.return %n : tensor<f32>
    }) {scatter_dimension = 0 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2x4xf32>) -> tensor<1x4xf32>
    %swapped = "stablehlo.all_to_all"(%x) {split_dimension = 1 : i64, concat_dimension = 0 : i64,
        split_count = 2 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
    %permuted = "stablehlo.collective_permute"(%x) {source_target_pairs = dense<[[0, 1]]> : tensor<1x2xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 0, type = 0>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %broadcast = "stablehlo.collective_broadcast"(%x) {replica_groups = dense<[[1]]> : tensor<1x1xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %id = stablehlo.replica_id : tensor<ui32>
    return %sum, %gathered, %scattered, %swapped, %permuted, %broadcast, %id : tensor<2x4xf32>, tensor<4x4xf32>, tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<ui32>
  }
  func.func @main(%x0: tensor<2x4xf32>, %x1: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4x4xf32>, tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<ui32>, tensor<2x4xf32>, tensor<4x4xf32>, tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<ui32>) {
    %r:14 = "interpreter.run_parallel"(%x0, %x1) {programs = [[@process], [@process]]} : (tensor<2x4xf32>, tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4x4xf32>, tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<ui32>, tensor<2x4xf32>, tensor<4x4xf32>, tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<ui32>)
    return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6, %r#7, %r#8, %r#9, %r#10, %r#11, %r#12, %r#13 : tensor<2x4xf32>, tensor<4x4xf32>, tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<ui32>, tensor<2x4xf32>, tensor<4x4xf32>, tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<ui32>
  }
}
"""


@needs_two_cpus
def test_collectives_across_two_replicas():
    # reduce_scatter's body has a reshape: it runs element by element.
    x0 = np.arange(8, dtype=np.float32).reshape(2, 4)
    x1 = np.array([[7, -1, 2.5, 0], [-3, 9, 1, 4]], np.float32)
    assert_same_as_reference(TWO_REPLICAS, x0, x1)


# One replica, two partitions: channel ids > 0 select the strategies that
# cross partitions. (A 2x2 grid would need four threads at once, more than
# the reference interpreter's thread pool has on a two-core machine.)
TWO_PARTITIONS = """
module {
  func.func @process(%x: tensor<4xi32>) -> (RESULT_TYPES) {
    %both = "stablehlo.all_reduce"(%x) ({
      ^bb0(%a: tensor<i32>, %b: tensor<i32>):
        %s = stablehlo.add %a, %b : tensor<i32>
        stablehlo.return %s : tensor<i32>
    }) {replica_groups = dense<[[0]]> : tensor<1x1xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>} : (tensor<4xi32>) -> tensor<4xi32>
    %flattened = "stablehlo.all_reduce"(%x) ({
      ^bb0(%a: tensor<i32>, %b: tensor<i32>):
        %s = stablehlo.multiply %a, %b : tensor<i32>
        stablehlo.return %s : tensor<i32>
    }) {replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>, use_global_device_ids,
        channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>} : (tensor<4xi32>) -> tensor<4xi32>
    %gathered = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64, use_global_device_ids,
        replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>} : (tensor<4xi32>) -> tensor<8xi32>
    %swapped = "stablehlo.all_to_all"(%x) {split_dimension = 0 : i64, concat_dimension = 0 : i64,
        split_count = 2 : i64, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 4, type = 1>} : (tensor<4xi32>) -> tensor<4xi32>
    %permuted = "stablehlo.collective_permute"(%x) {source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 5, type = 1>} : (tensor<4xi32>) -> tensor<4xi32>
    %broadcast = "stablehlo.collective_broadcast"(%x) {replica_groups = dense<[[1, 0]]> : tensor<1x2xi64>,
        channel_handle = #stablehlo.channel_handle<handle = 6, type = 1>} : (tensor<4xi32>) -> tensor<4xi32>
    %r = stablehlo.replica_id : tensor<ui32>
    %p = stablehlo.partition_id : tensor<ui32>
    return %both, %flattened, %gathered, %swapped, %permuted, %broadcast, %r, %p : RESULT_TYPES
  }
  func.func @main(%x: tensor<4xi32>, %y: tensor<4xi32>) -> (TYPES) {
    %r:16 = "interpreter.run_parallel"(%x, %y) {programs = [[@process, @process]]} : (tensor<4xi32>, tensor<4xi32>) -> (TYPES)
    return RESULTS : TYPES
  }
}
"""


@needs_two_cpus
def test_collectives_across_two_partitions():
    result_types = ", ".join(["tensor<4xi32>", "tensor<4xi32>", "tensor<8xi32>", "tensor<4xi32>",
                              "tensor<4xi32>", "tensor<4xi32>", "tensor<ui32>", "tensor<ui32>"])
    text = (TWO_PARTITIONS.replace("RESULT_TYPES", result_types)
            .replace("TYPES", f"{result_types}, {result_types}")
            .replace("RESULTS", ", ".join(f"%r#{i}" for i in range(16))))
    assert_same_as_reference(text, np.array([1, 2, 3, 4], np.int32),
                             np.array([-5, 0, 7, 2], np.int32))


SEND_RECV_INFEED = """
module {
  func.func @sender(%x: tensor<3xi64>, %t: !stablehlo.token) -> tensor<2xi64> {
    %t1 = "stablehlo.send"(%x, %t) {channel_handle = #stablehlo.channel_handle<handle = 4, type = 2>,
        is_host_transfer = true} : (tensor<3xi64>, !stablehlo.token) -> !stablehlo.token
    %in:2 = "stablehlo.infeed"(%t1) : (!stablehlo.token) -> (tensor<2xi64>, !stablehlo.token)
    return %in#0 : tensor<2xi64>
  }
  func.func @receiver(%x: tensor<3xi64>, %t: !stablehlo.token) -> tensor<3xi64> {
    %r:2 = "stablehlo.recv"(%t) {channel_handle = #stablehlo.channel_handle<handle = 4, type = 3>,
        is_host_transfer = true} : (!stablehlo.token) -> (tensor<3xi64>, !stablehlo.token)
    %s = stablehlo.add %r#0, %x : tensor<3xi64>
    return %s : tensor<3xi64>
  }
  func.func @queue() -> tensor<2xi64> {
    %c = stablehlo.constant dense<[40, 2]> : tensor<2xi64>
    return %c : tensor<2xi64>
  }
  func.func @main(%x: tensor<3xi64>) -> (tensor<2xi64>, tensor<3xi64>) {
    %t = stablehlo.after_all : !stablehlo.token
    %r:2 = "interpreter.run_parallel"(%x, %t, %x, %t) {infeed = [@queue], programs = [[@sender], [@receiver]]} : (tensor<3xi64>, !stablehlo.token, tensor<3xi64>, !stablehlo.token) -> (tensor<2xi64>, tensor<3xi64>)
    return %r#0, %r#1 : tensor<2xi64>, tensor<3xi64>
  }
}
"""


@needs_two_cpus
def test_send_recv_and_infeed_between_processes():
    assert_same_as_reference(SEND_RECV_INFEED, np.array([1, 2, 3], np.int64))


def test_a_failing_process_fails_the_whole_grid_without_hanging():
    text = TWO_REPLICAS.replace("replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>",
                                "replica_groups = dense<[[0, 2]]> : tensor<1x2xi64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>", 1)
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(InvalidArgument, match="replica groups"):
        load(text)(x, x)
