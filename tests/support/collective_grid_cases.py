"""The 2 x 2 process grid (2 replicas x 2 partitions) with every collective in
each of the spec's process-group modes, shared by
tests/model/test_multi_device_collectives.py and
tests/distributed/test_collective_hosts.py: the cases, the module that runs
them, XLA CPU's results for it (4 host devices in a subprocess), and a
program in which one replica never reaches the collective.

In `cross_replica_and_partition` mode the spec (and the reference
interpreter's ProcessGrid::crossReplicaAndPartition) orders a process group
partition-major, `[(r, p) for p in partitions for r in replica_group]`;
XLA orders it replica-major. The two agree on all_reduce and on groups of
one replica, which is what the order-sensitive cases below use; pjrt-ref
follows the spec (docs/status.md, "Known differences from XLA").

XLA needs the module to say its values are per device ("manual" sharding),
otherwise its SPMD partitioner refuses `partition_id`; those annotations are
identities for pjrt-ref, which runs each process's program as written.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np

R, P = 2, 2
MANUAL = '{mhlo.sharding = "{manual}"}'
ADD = """({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
    })"""


def channel(handle: int) -> str:
    return f"channel_handle = #stablehlo.channel_handle<handle = {handle}, type = 1>"


def groups(rows: list[list[int]]) -> str:
    return f"dense<{rows}> : tensor<{len(rows)}x{len(rows[0])}xi64>"


# (result type, op text with X for the operand): every collective in every mode.
CASES = {
    # all_reduce: no channel = cross_replica; channel = cross_replica_and_partition;
    # channel + use_global_device_ids = flattened_ids.
    "all_reduce cross_replica": ("tensor<4x2xf32>", f'"stablehlo.all_reduce"(X) {ADD} {{replica_groups = {groups([[0, 1]])}}}'),
    "all_reduce cross_replica_and_partition": ("tensor<4x2xf32>", f'"stablehlo.all_reduce"(X) {ADD} {{replica_groups = {groups([[1, 0]])}, {channel(1)}}}'),
    "all_reduce flattened_ids": ("tensor<4x2xf32>", f'"stablehlo.all_reduce"(X) {ADD} {{replica_groups = {groups([[0, 3], [1, 2]])}, use_global_device_ids, {channel(2)}}}'),
    "all_gather cross_replica": ("tensor<8x2xf32>", f'"stablehlo.all_gather"(X) {{all_gather_dim = 0 : i64, replica_groups = {groups([[1, 0]])}}}'),
    "all_gather cross_replica_and_partition": ("tensor<4x4xf32>", f'"stablehlo.all_gather"(X) {{all_gather_dim = 1 : i64, replica_groups = {groups([[0], [1]])}, {channel(3)}}}'),
    "all_gather flattened_ids": ("tensor<16x2xf32>", f'"stablehlo.all_gather"(X) {{all_gather_dim = 0 : i64, replica_groups = {groups([[3, 1, 2, 0]])}, use_global_device_ids, {channel(4)}}}'),
    "reduce_scatter cross_replica": ("tensor<2x2xf32>", f'"stablehlo.reduce_scatter"(X) {ADD} {{scatter_dimension = 0 : i64, replica_groups = {groups([[0, 1]])}}}'),
    "reduce_scatter cross_replica_and_partition": ("tensor<2x2xf32>", f'"stablehlo.reduce_scatter"(X) {ADD} {{scatter_dimension = 0 : i64, replica_groups = {groups([[1], [0]])}, {channel(5)}}}'),
    "reduce_scatter flattened_ids": ("tensor<4x1xf32>", f'"stablehlo.reduce_scatter"(X) {ADD} {{scatter_dimension = 1 : i64, replica_groups = {groups([[2, 0], [1, 3]])}, use_global_device_ids, {channel(6)}}}'),
    # all_to_all, collective_permute, collective_broadcast: no channel =
    # cross_replica, channel = cross_partition.
    "all_to_all cross_replica": ("tensor<2x4xf32>", f'"stablehlo.all_to_all"(X) {{split_dimension = 0 : i64, concat_dimension = 1 : i64, split_count = 2 : i64, replica_groups = {groups([[0, 1]])}}}'),
    "all_to_all cross_partition": ("tensor<8x1xf32>", f'"stablehlo.all_to_all"(X) {{split_dimension = 1 : i64, concat_dimension = 0 : i64, split_count = 2 : i64, replica_groups = {groups([[1, 0]])}, {channel(7)}}}'),
    "collective_permute cross_replica": ("tensor<4x2xf32>", f'"stablehlo.collective_permute"(X) {{source_target_pairs = {groups([[1, 0]])}}}'),
    "collective_permute cross_partition": ("tensor<4x2xf32>", f'"stablehlo.collective_permute"(X) {{source_target_pairs = {groups([[0, 1], [1, 0]])}, {channel(8)}}}'),
    "replica_id": ("tensor<ui32>", f"stablehlo.replica_id {MANUAL} : tensor<ui32>"),
    "partition_id": ("tensor<ui32>", f"stablehlo.partition_id {MANUAL} : tensor<ui32>"),
}


def grid_program(cases: dict) -> str:
    """One module running `cases` in order; each result annotated as per device."""
    lines, types = [], []
    for i, (result_type, text) in enumerate(cases.values()):
        if "X)" in text:
            text = f"{text.replace('X', '%x')} : (tensor<4x2xf32>) -> {result_type}"
        lines.append(f"    %r{i} = {text}")
        types.append(result_type)
    results = ", ".join(f"{t} {MANUAL}" for t in types)
    return (f"module attributes {{mhlo.num_replicas = {R} : i32, mhlo.num_partitions = {P} : i32}} {{\n"
            f"  func.func @main(%x: tensor<4x2xf32> {MANUAL}) -> ({results}) {{\n"
            + "\n".join(lines) + "\n"
            f"    return {', '.join(f'%r{i}' for i in range(len(types)))} : {', '.join(types)}\n"
            "  }\n}\n")


# Runs a module on XLA cpu as R replicas x P partitions; argv: module, inputs, outputs.
# Device (r, p) is XLA's default placement p * R + r; XLA lists devices replica-major.
_XLA_SCRIPT = r"""
import sys
import numpy as np
import jax
from jax._src import xla_bridge
from jax._src.lib import xla_client as xc
from jax.sharding import Mesh, NamedSharding, PartitionSpec

R, P = int(sys.argv[4]), int(sys.argv[5])
backend = xla_bridge.get_backend("cpu")
devices = [backend.devices()[p * R + r] for r in range(R) for p in range(P)]
options = xc.CompileOptions()
build = options.executable_build_options
build.num_replicas, build.num_partitions = R, P
build.use_spmd_partitioning = P > 1
build.device_assignment = xc.DeviceAssignment.create(
    np.array([[p * R + r for p in range(P)] for r in range(R)], np.int32))
exe = backend.compile_and_load(open(sys.argv[1]).read(), xc.DeviceList(tuple(devices)), options)
inputs = np.load(sys.argv[2])
mesh = Mesh(np.array(devices), ("d",))
args = [jax.device_put(np.concatenate(list(inputs[name])), NamedSharding(mesh, PartitionSpec("d")))
        for name in sorted(inputs.files)]
outputs = exe.execute_sharded(args).disassemble_into_single_device_arrays()
order = {d.id: i for i, d in enumerate(devices)}
saved = {}
for k, per_device in enumerate(outputs):
    by_position = sorted(per_device, key=lambda a: order[next(iter(a.devices())).id])
    saved[f"out{k}"] = np.stack([np.asarray(a) for a in by_position])
np.savez(sys.argv[3], **saved)
"""


def run_on_xla_cpu(text: str, per_device_args: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """Per-device outputs of `text` on XLA cpu, devices in logical (replica-major) order."""
    with tempfile.TemporaryDirectory() as tmp:
        module, inputs, outputs = (os.path.join(tmp, n) for n in ("m.mlir", "in.npz", "out.npz"))
        with open(module, "w") as f:
            f.write(text)
        np.savez(inputs, **{f"arg{i}": np.stack([row[i] for row in per_device_args])
                            for i in range(len(per_device_args[0]))})
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_", "PJRT_"))}
        env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
        proc = subprocess.run([sys.executable, "-c", _XLA_SCRIPT, module, inputs, outputs, str(R), str(P)],
                              env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-3000:]
        data = np.load(outputs)
        stacked = [data[f"out{k}"] for k in range(len(data.files))]
    return [[s[d] for s in stacked] for d in range(len(per_device_args))]


LOGICAL_IDS = [(r, p) for r in range(R) for p in range(P)]
ARGS = [[(np.arange(8, dtype=np.float32).reshape(4, 2) * (d + 1) - 3 * d)] for d in range(R * P)]


# A device that never reaches the collective its peers wait in: replica 1
# skips the all_reduce (it is inside a branch only replica 0 takes).
MISMATCH = """
module attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
    %id = stablehlo.replica_id : tensor<ui32>
    %zero = stablehlo.constant dense<0> : tensor<ui32>
    %first = stablehlo.compare EQ, %id, %zero : (tensor<ui32>, tensor<ui32>) -> tensor<i1>
    %r = "stablehlo.if"(%first) ({
      %s = "stablehlo.all_reduce"(%x) ({
        ^bb0(%a: tensor<f32>, %b: tensor<f32>):
          %t = stablehlo.add %a, %b : tensor<f32>
          stablehlo.return %t : tensor<f32>
      }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<3xf32>) -> tensor<3xf32> loc("model.py":12:4)
      stablehlo.return %s : tensor<3xf32>
    }, {
      stablehlo.return %x : tensor<3xf32>
    }) : (tensor<i1>) -> tensor<3xf32>
    return %r : tensor<3xf32>
  }
}
"""
