"""The reference SPMD partitioner (pjrt_ref/spmd/partitioner.py), against JAX's cpu backend.

The oracle is JAX on its cpu backend with 4 forced host devices
(`tests/support/spmd_cases.py` in a subprocess): for each case it gives the lowered
StableHLO text (what JAX sends a plugin: one program with Shardy
annotations), each device's argument shards, and each device's output
shards with the output shardings.

- interpreter level: the lowered program on `make_partitioned_runner`, fed
  the cpu run's argument shards, must give the cpu run's output shards,
  shard shapes and shardings;
- end to end: the same script under `JAX_PLATFORMS=pjrt_ref` with
  `PJRT_REF_NUM_DEVICES=4` must give the cpu run's values, shardings and
  shard shapes.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from pjrt_ref.errors import InvalidArgument, Unimplemented
from pjrt_ref.interpreter import load
from pjrt_ref.spmd.partitioner import make_partitioned_runner
from pjrt_ref.spmd.layout import parse_hlo_sharding
from tests.support.repo_paths import SUPPORT

CASES = ["jit_rows_matmul", "jit_columns_reduce", "jit_mesh_2d", "jit_replicated_in",
         "jit_constraint", "jit_unspecified_out", "jit_unspecified_transposed_out",
         "jit_unspecified_dot_out", "jit_unspecified_stacked_out", "jit_partly_open_constraint",
         "jit_scan_constrained_out", "jit_unspecified_shard_alike_out",
         "jit_unspecified_uneven_out", "jit_unspecified_reshaped_out", "jit_open_parameter_alike",
         "jit_open_parameter_constrained", "jit_train_step",
         "shard_map_collectives",
         "shard_map_mesh_2d", "shard_map_inside_jit", "shard_map_reversed_mesh",
         "shard_map_all_to_all", "shard_map_loop", "shard_map_partial_manual",
         "shard_map_partial_manual_constrained", "shard_map_partial_manual_constrained_replicated",
         "shard_map_nested",
         "shard_map_outlined_by_grad", "pmap_out_axes_none"]
# Values agree; the output sharding does not, per partitioner spelling.
# shard_map_partial_manual: XLA's propagation fills the body's open
# dimensions with the free axis "b" of the shard_map's operand; the
# reference follows a manual body back to its own constraints only, not to
# its arguments, whose shapes are local. The constrained cases: in GSPMD's
# spelling (`@SPMDShardToFullShape`) the reference keeps the result's
# annotated sharding and does not look into the body.
# jit programs the per-device rewrite leaves whole: XLA pads a split its tiles
# do not divide (7 rows over 2 devices); the reference runs such a program whole.
KEPT_WHOLE = {"jit_unspecified_uneven_out"}
# Run end to end only: its program holds a callback of the process that lowered it.
END_TO_END_ONLY = ["jit_inspected_sharding"]
SHARDING_DIFFERS = {
    "shardy": {"shard_map_partial_manual"},
    "gspmd": {"shard_map_partial_manual_constrained", "shard_map_partial_manual_constrained_replicated"},
}


def run_cases(tmp_path_factory, name: str, **env: str) -> dict:
    """Run tests/support/spmd_cases.py in a fresh process with `env`; its pickled results."""
    return run_script(tmp_path_factory, "spmd_cases.py", name, **env)


def run_script(tmp_path_factory, script: str, name: str, **env: str) -> dict:
    """Run the case script tests/support/`script` in a fresh process with `env`
    (and no other JAX_/PJRT_/XLA_ variables); its pickled results."""
    out = tmp_path_factory.mktemp("spmd") / f"{name}.pkl"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PJRT_", "XLA_"))}
    clean.update(env)
    proc = subprocess.run([sys.executable, str(SUPPORT / script),
                           str(out)], env=clean, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(out, "rb") as handle:
        return pickle.load(handle)


CPU_4 = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
PJRT_REF_4 = {"JAX_PLATFORMS": "pjrt_ref", "PJRT_REF_NUM_DEVICES": "4"}
# JAX's default sends Shardy; this switch makes it send GSPMD's mhlo.sharding
# strings and @SPMDFullToShardShape / @SPMDShardToFullShape instead.
GSPMD = {"JAX_USE_SHARDY_PARTITIONER": "false"}


@pytest.fixture(scope="module")
def cpu_oracle(tmp_path_factory) -> dict:
    return run_cases(tmp_path_factory, "cpu", **CPU_4)


@pytest.fixture(scope="module")
def gspmd_cpu_oracle(tmp_path_factory) -> dict:
    return run_cases(tmp_path_factory, "gspmd_cpu", **CPU_4, **GSPMD)


@pytest.fixture(params=["shardy", "gspmd"])
def oracle(request, cpu_oracle, gspmd_cpu_oracle) -> dict:
    return cpu_oracle if request.param == "shardy" else gspmd_cpu_oracle


def assert_same_values(ours: list[np.ndarray], oracle: list[np.ndarray], name: str):
    for output, (got, expected) in enumerate(zip(ours, oracle)):
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5,
                                   err_msg=f"{name}: global value of output {output}")


def assert_same_shards(ours: list[list[np.ndarray]], oracle: list[list[np.ndarray]], name: str):
    """ours[device][output] against oracle[output][device]."""
    for output, per_device in enumerate(oracle):
        for device, expected in enumerate(per_device):
            got = ours[device][output]
            assert got.shape == expected.shape, (name, output, device, got.shape, expected.shape)
            np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5,
                                       err_msg=f"{name}: output {output} on device {device}")


def same_layout(ours: str, theirs: str, rank: int) -> bool:
    devices = range(4)
    return parse_hlo_sharding(ours, rank, devices) == parse_hlo_sharding(theirs, rank, devices)


def run_case(runner, program, case: dict, name: str):
    """(per-device outputs, global outputs) of `runner` on the case's argument
    shards; logical device p is JAX device case["device_order"][p]."""
    order = case["device_order"]
    outputs = runner([[shards[order[p]] for shards in case["arguments"]] for p in range(4)])
    whole = [layout.assemble({d: outputs[d][i] for d in range(4)}, tuple(t.shape), t.dtype, name)
             for i, (layout, t) in enumerate(zip(runner.result_layouts, program.output_types))]
    return outputs, whole


@pytest.mark.parametrize("per_device", [True, False], ids=["per_device", "global"])
@pytest.mark.parametrize("name", CASES)
def test_partitioned_runner_matches_jax_cpu(request, oracle, name, per_device, monkeypatch):
    """Both ways of running a partitioned program (PJRT_REF_SPMD_PER_DEVICE): the
    per-device program every device runs, and the global program run once."""
    monkeypatch.setenv("PJRT_REF_SPMD_PER_DEVICE", "1" if per_device else "0")
    case = oracle[name]
    program = load(case["text"])
    # As JAX compiles a jit: every parameter it gives no sharding is left to propagation.
    runner = make_partitioned_runner(program, num_partitions=4, num_replicas=1, parameters_left_open=(True,))
    if per_device and name.startswith("jit_") and name not in KEPT_WHOLE:
        assert runner.lowered is not None, runner.kept_whole_because
    if not per_device:
        assert runner.lowered is None
    for ours, theirs, t in zip(runner.argument_sharding_texts(), case["argument_hlo_shardings"],
                               program.input_types):
        assert same_layout(ours, theirs, len(t.shape)), (name, "argument", ours, theirs)
    outputs, whole = run_case(runner, program, case, name)
    assert_same_values(whole, case["globals"], name)
    if name in SHARDING_DIFFERS[request.node.callspec.params["oracle"]]:
        return
    order = case["device_order"]
    assert_same_shards(outputs, [[per_device[order[p]] for p in range(4)]
                                 for per_device in case["outputs"]], name)
    assert [tuple(s) for s in runner.output_shard_shapes(0)] == \
        [tuple(s) for s in case["shard_shapes"]]
    for ours, theirs, t in zip(runner.output_sharding_texts(), case["hlo_shardings"],
                               program.output_types):
        assert same_layout(ours, theirs, len(t.shape)), (name, ours, theirs)


def test_optimized_program_carries_the_shardings(cpu_oracle):
    """PJRT_Executable_OptimizedProgram's text parses and names the shardings
    JAX's cpu backend reports (the client reads them from there)."""
    for name in ("jit_mesh_2d", "shard_map_collectives"):
        case = cpu_oracle[name]
        runner = make_partitioned_runner(load(case["text"]), num_partitions=4, num_replicas=1)
        text = runner.optimized_program_text()
        assert "mhlo.spmd_output_sharding" in text and "mhlo.spmd_parameters_shardings" in text
        load(text)     # well-formed StableHLO


def test_wrong_shard_shape_is_invalid_argument(cpu_oracle):
    case = cpu_oracle["jit_rows_matmul"]
    runner = make_partitioned_runner(load(case["text"]), num_partitions=4, num_replicas=1)
    arguments = [[shards[d] for shards in case["arguments"]] for d in range(4)]
    arguments[2][0] = np.zeros((3, 4), np.float32)
    with pytest.raises(InvalidArgument, match="device 2's shard has shape"):
        runner(arguments)


def test_reshape_groups_pair_merged_and_split_dimensions():
    """The dimension groups a reshape's sharding follows (`_reshape_layout`):
    size-1 dimensions belong to none, and an empty or dynamic shape (MLIR's
    negative size) has none, so nothing is split."""
    from pjrt_ref.spmd.op_kinds import reshape_groups

    assert reshape_groups((4, 4, 2), (4, 8)) == [([0], [0]), ([1, 2], [1])]
    assert reshape_groups((8, 4), (2, 4, 4)) == [([0], [0, 1]), ([1], [2])]
    assert reshape_groups((4, 1, 2), (4, 2)) == [([0], [0]), ([2], [1])]
    assert reshape_groups((2, 3), (3, 2)) == [([0, 1], [0, 1])]
    assert reshape_groups((0, 4), (4, 0)) == []
    assert reshape_groups((-9223372036854775808, 4), (4, -9223372036854775808)) == []


def test_uneven_sharding_is_unimplemented():
    text = """
    module attributes {mhlo.num_partitions = 4 : i32} {
      sdy.mesh @mesh = <["x"=4]>
      func.func public @main(%arg0: tensor<6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})
          -> tensor<6xf32> {
        return %arg0 : tensor<6xf32>
      }
    }"""
    with pytest.raises(Unimplemented, match="not divisible into 4 tiles"):
        make_partitioned_runner(load(text), num_partitions=4, num_replicas=1)


def test_an_inspect_sharding_callback_of_another_process_is_refused_not_called(cpu_oracle):
    """The callback's bytes are pointers into the process that lowered the program:
    here they point at nothing, and calling them would crash this process."""
    program = load(cpu_oracle["jit_inspected_sharding"]["text"])
    with pytest.raises(InvalidArgument, match="callback was not made in this process"):
        make_partitioned_runner(program, num_partitions=4, num_replicas=1)


def assert_same_end_to_end(ours: dict, oracle: dict, partitioner: str) -> None:
    for name in CASES + END_TO_END_ONLY:
        assert_same_values(ours[name]["globals"], oracle[name]["globals"], name)
        assert ours[name]["inspected"] == oracle[name]["inspected"], name
        if name in SHARDING_DIFFERS[partitioner]:
            continue
        assert ours[name]["argument_hlo_shardings"] == oracle[name]["argument_hlo_shardings"], name
        assert ours[name]["specs"] == oracle[name]["specs"], name
        assert ours[name]["shard_shapes"] == oracle[name]["shard_shapes"], name
        per_device = [list(row) for row in zip(*ours[name]["outputs"])]
        assert_same_shards(per_device, oracle[name]["outputs"], name)


def test_end_to_end_on_four_pjrt_ref_devices(cpu_oracle, tmp_path_factory):
    assert_same_end_to_end(run_cases(tmp_path_factory, "pjrt_ref", **PJRT_REF_4), cpu_oracle, "shardy")


def test_end_to_end_gspmd_on_four_pjrt_ref_devices(gspmd_cpu_oracle, tmp_path_factory):
    assert_same_end_to_end(run_cases(tmp_path_factory, "gspmd_pjrt_ref", **PJRT_REF_4, **GSPMD),
                           gspmd_cpu_oracle, "gspmd")


def test_gspmd_manual_region_alone_is_an_error(gspmd_cpu_oracle):
    """Called as one process, a shard-shape marker that changes the shape is
    UNIMPLEMENTED naming the op, not a silently wrong shape."""
    program = load(gspmd_cpu_oracle["shard_map_collectives"]["text"])
    x = np.zeros((8, 4), np.float32)
    with pytest.raises(Unimplemented, match="SPMDFullToShardShape changes the shape"):
        program(x)


def test_wrong_shard_dtype_is_invalid_argument(cpu_oracle):
    case = cpu_oracle["jit_rows_matmul"]
    runner = make_partitioned_runner(load(case["text"]), num_partitions=4, num_replicas=1)
    arguments = [[shards[d] for shards in case["arguments"]] for d in range(4)]
    arguments[0][0] = arguments[0][0].astype(np.float64)
    with pytest.raises(InvalidArgument, match="element type float64, the program takes float32"):
        runner(arguments)


def test_maximal_result_is_whole_on_every_device():
    """`@maximal_mesh_0 = <[], device_ids=[0]>` (what JAX gives host callbacks)
    holds the whole value; an identity program returns the whole argument."""
    text = """
    module attributes {mhlo.num_partitions = 4 : i32} {
      sdy.mesh @mesh = <["x"=4]>
      sdy.mesh @maximal_mesh_0 = <[], device_ids=[0]>
      func.func public @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>})
          -> (tensor<8xf32> {sdy.sharding = #sdy.sharding<@maximal_mesh_0, []>}) {
        return %arg0 : tensor<8xf32>
      }
    }"""
    runner = make_partitioned_runner(load(text), num_partitions=4, num_replicas=1)
    shards = [np.arange(2 * d, 2 * d + 2, dtype=np.float32) for d in range(4)]
    for outputs in runner([[shard] for shard in shards]):
        np.testing.assert_array_equal(outputs[0], np.concatenate(shards))


def test_sub_axes_follow_the_shardy_spec():
    """openxla/shardy docs/sharding_representation.md: `"x":(m)k` is the middle
    axis of x reshaped to [m, k, n/(m*k)], and its example says
    <@mesh_full, [{"devices":(1)4}, {"devices":(4)2}]> with mesh_full = <"devices"=8>
    is the same sharding as <@mesh_xy, [{"x"}, {"y"}]> with mesh_xy = <"x"=4, "y"=2>."""
    from pjrt_ref.spmd.layout import parse_mesh, parse_tensor_sharding

    meshes = {"mesh_full": parse_mesh('<["devices"=8]>'),
              "mesh_xy": parse_mesh('<["x"=4, "y"=2]>')}
    split = parse_tensor_sharding('#sdy.sharding<@mesh_full, [{"devices":(1)4}, {"devices":(4)2}]>')
    named = parse_tensor_sharding('#sdy.sharding<@mesh_xy, [{"x"}, {"y"}]>')
    assert split.layout(meshes) == named.layout(meshes)


@pytest.mark.parametrize("name", ["shard_map_collectives", "shard_map_nested",
                                  "shard_map_partial_manual"])
def test_gspmd_per_device_fallback_matches_jax_cpu(gspmd_cpu_oracle, monkeypatch, name):
    """A GSPMD manual region that gspmd.py cannot make into a manual call
    runs the whole program on every device; force that path for JAX's own
    programs and check it against JAX cpu too."""
    import pjrt_ref.spmd.partitioner as spmd

    monkeypatch.setattr(spmd, "make_manual_calls", lambda text: (text, True))
    case = gspmd_cpu_oracle[name]
    program = load(case["text"])
    runner = make_partitioned_runner(program, num_partitions=4, num_replicas=1)
    assert runner.per_device_program is not None
    _, whole = run_case(runner, program, case, name)
    assert_same_values(whole, case["globals"], name)


UNANNOTATED_SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType

mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))
with jax.set_mesh(mesh):    # jnp.array's convert runs over the mesh's 2 devices, unannotated
    y = jnp.array(np.array([0.0, 1.0, 2.0, 3.0]))
    exe = jax.jit(lambda v: v + 1).lower(np.arange(4.0, dtype=np.float32)).compile()
    result = {"value": np.asarray(y).tolist(), "spec": str(y.sharding.spec),
              "parameters": str(exe.input_shardings), "outputs": str(exe.output_shardings)}

mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
with jax.set_mesh(mesh):    # shard_map_test's test_smap_nested_psum: JAX's C++ jit path
    @jax.smap(axis_name="x", in_axes=0, out_axes=0)   # once raised std::bad_cast here
    def f(v):
        return jax.smap(lambda u: jax.lax.psum(u, "y"), axis_name="y", in_axes=0,
                        out_axes=None)(jnp.sin(v))
    result["smap"] = [np.asarray(f(jnp.arange(4.0))).tolist(),
                      np.asarray(jax.jit(f)(jnp.arange(4.0))).tolist()]
with open(sys.argv[1], "w") as handle:
    json.dump(result, handle)
"""


def run_inline(tmp_path, script: str, **env: str) -> dict:
    """Run `script` (which writes JSON to argv[1]) in a fresh process with `env`."""
    import json

    path, out = tmp_path / "script.py", tmp_path / f"{env['JAX_PLATFORMS']}.json"
    path.write_text(script)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PJRT_", "XLA_"))}
    proc = subprocess.run([sys.executable, str(path), str(out)], env={**clean, **env},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_unannotated_program_over_partitions_reports_replicated_shardings(tmp_path):
    """A program over 2 partitions without sharding annotations: XLA reports
    its parameters and results `{replicated}` and JAX, which left them
    unspecified, uses those; PJRT_Executable_OptimizedProgram must say so too.
    Without them JAX keeps an UnspecifiedValue as an input sharding: Python's
    dispatch fails on it (AttributeError) and the C++ one with std::bad_cast."""
    ours = run_inline(tmp_path, UNANNOTATED_SCRIPT, **PJRT_REF_4)
    assert ours == run_inline(tmp_path, UNANNOTATED_SCRIPT, **CPU_4)


def test_a_program_without_results_reports_xlas_empty_tuple_sharding():
    """XLA keeps an empty tuple's sharding as one element; its C API client
    refuses `{}` ("HLO module output is an empty tuple, but the output
    sharding has 0 elements"), which JAX's shard_map tests met on unannotated
    programs over several partitions."""
    from pjrt_ref.spmd import partitioner as spmd

    assert spmd._output_sharding_text([]) == "{{replicated}}"
    assert spmd._output_sharding_text(["{replicated}"]) == "{replicated}"
    assert spmd._output_sharding_text(["{replicated}", "{maximal device=0}"]) == \
        "{{replicated}, {maximal device=0}}"


def _shared_chain(length: int) -> str:
    """A sharded argument through `length` element-wise ops that each read the
    previous value twice (2^length paths back to the argument), result unannotated."""
    lines = [f"      %v{i + 1} = stablehlo.add %v{i}, %v{i} : tensor<8xf32>" for i in range(length)]
    return f"""
    module attributes {{mhlo.num_partitions = 4 : i32}} {{
      sdy.mesh @mesh = <["x"=4]>
      func.func public @main(%v0: tensor<8xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}]>}})
          -> tensor<8xf32> {{
    {chr(10).join(lines)}
        return %v{length} : tensor<8xf32>
      }}
    }}"""


def test_inherited_layouts_visit_each_value_once_on_a_shared_chain():
    """The layout walk (`_inherited_layout`) follows a result back through
    element-wise ops; on values read by several ops it visits each once, so its
    work grows with the op count (it once walked every path: 2^n for this chain),
    and a chain deeper than Python's recursion limit still finds the argument."""
    visits = {}
    for length in (10, 100, 2000):
        runner = make_partitioned_runner(load(_shared_chain(length)), num_partitions=4, num_replicas=1)
        visits[length] = runner.layout_visits
        assert runner.result_layouts[0] == runner.argument_layouts[0]     # x's sharding, inherited
    assert all(visits[n] <= n + 1 for n in visits), visits
    shards = [np.full(2, d, np.float32) for d in range(4)]
    runner = make_partitioned_runner(load(_shared_chain(10)), num_partitions=4, num_replicas=1)
    for shard, outputs in zip(shards, runner([[shard] for shard in shards])):
        np.testing.assert_array_equal(outputs[0], shard * 2 ** 10)     # each device keeps its shard


def test_an_ordered_callback_without_results_inside_shard_map_runs_as_on_cpu(tmp_path):
    """The manual region carries a token (the ordered effect) in and out: it
    passes every device whole, and the region's results come back as on cpu."""
    script = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax import shard_map
from jax.sharding import Mesh, PartitionSpec as P
calls = []
mesh = Mesh(np.array(jax.devices()[:4]), ("i",))
def body(x, y):
    jax.experimental.io_callback(lambda v: calls.append(v.shape), (), x, ordered=True)
    return x + y[..., jnp.newaxis]
f = jax.jit(shard_map(body, mesh=mesh, in_specs=(P(None, "i"), P(None)), out_specs=P(None, "i")))
out = f(jnp.arange(32.0).reshape(2, 16), jnp.ones(2))
jax.effects_barrier()
with open(sys.argv[1], "w") as handle:
    json.dump({"out": np.asarray(out).tolist(), "calls": sorted(map(list, calls))}, handle)
"""
    ours = run_inline(tmp_path, script, **{**PJRT_REF_4, "JAX_PLATFORMS": "pjrt_ref,cpu"})  # cpu: callback inputs
    assert ours == run_inline(tmp_path, script, **CPU_4)
    assert len(ours["calls"]) == 4


def test_a_constant_jaxlib_cannot_hand_to_python_is_passed_over():
    """jaxlib cannot turn a complex splat of NaNs (what jnp.linalg's complex kernels
    start from) into a Python attribute ("Can't cast unknown element type"); the
    propagation reads no constant's value, and the result still follows the argument,
    as in `jit_unspecified_out`."""
    text = """
    module attributes {mhlo.num_partitions = 2 : i32} {
      sdy.mesh @mesh = <["i"=2]>
      func.func public @main(%arg0: tensor<4xcomplex<f32>> {sdy.sharding = #sdy.sharding<@mesh, [{"i"}]>})
          -> tensor<4xcomplex<f32>> {
        %nan = stablehlo.constant dense<(0x7FC00000,0x7FC00000)> : tensor<complex<f32>>
        %0 = stablehlo.broadcast_in_dim %nan, dims = [] : (tensor<complex<f32>>) -> tensor<4xcomplex<f32>>
        %1 = stablehlo.add %0, %arg0 : tensor<4xcomplex<f32>>
        return %1 : tensor<4xcomplex<f32>>
      }
    }"""
    runner = make_partitioned_runner(load(text), num_partitions=2, num_replicas=1)
    assert runner.output_sharding_texts() == runner.argument_sharding_texts() != ["{replicated}"]
