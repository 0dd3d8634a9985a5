"""Virtual devices (issue 6): N devices with their own memories, and JAX's
multi-device programs on them, compared with JAX's cpu backend on 4 forced
host devices (`--xla_force_host_platform_device_count=4`).

JAX runs in subprocesses (the plugin must be JAX's backend there); the
C-API checks run in process through the shim (tests/support/capi_calls.py,
tests/support/multi_device_calls.py).
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from tests.support.capi_calls import Api, PjrtCallError
from tests.support.collective_grid_cases import MISMATCH
from tests.support.jax_support import run_jax, run_python
from tests.support.multi_device_calls import (FOUR_REPLICAS, TWO_REPLICAS, addressable_devices, buffer_on,
                                              client_with_devices, execute_on_devices, int64_named_values)
from pjrt_ref.capi_shim._pjrt_ref_shim import ffi, lib

# ------------------------------------------------------------ JAX vs JAX cpu
# Each case is computed by the same code on pjrt_ref and on cpu and saved
# under its name; a case JAX rejects saves its error text instead.
CASES_SCRIPT = r"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

assert len(jax.devices()) == 4, jax.devices()
f = np.arange(12, dtype=np.float32).reshape(4, 3) / 4 - 1
g = np.arange(32, dtype=np.float32).reshape(4, 4, 2) - 7
ring = [(j, (j + 1) % 4) for j in range(4)]

def pmap(body, *args, **kw):
    return jax.pmap(body, axis_name="i", **kw)(*args)

cases = {
    "psum (issue 6 example)": lambda: pmap(lambda x: x + lax.psum(x, "i"), jnp.arange(4)),
    "pmean": lambda: pmap(lambda v: lax.pmean(v, "i"), f),
    "pmax pmin axis_index": lambda: pmap(lambda v: lax.pmax(v, "i") - lax.pmin(v, "i") * lax.axis_index("i"), f),
    "all_gather": lambda: pmap(lambda v: lax.all_gather(v, "i"), f),
    "all_gather tiled axis 1": lambda: pmap(lambda v: lax.all_gather(v, "i", axis=1, tiled=True), g),
    "ppermute ring": lambda: pmap(lambda v: lax.ppermute(v, "i", perm=ring), f),
    "ppermute partial (zeros elsewhere)": lambda: pmap(lambda v: lax.ppermute(v, "i", perm=[(0, 2), (2, 0)]), f),
    "all_to_all": lambda: pmap(lambda v: lax.all_to_all(v, "i", 0, 0), g),
    "all_to_all tiled": lambda: pmap(lambda v: lax.all_to_all(v, "i", 0, 1, tiled=True), g),
    "psum_scatter tiled": lambda: pmap(lambda v: lax.psum_scatter(v, "i", scatter_dimension=0, tiled=True), g),
    "psum_scatter": lambda: pmap(lambda v: lax.psum_scatter(v, "i"), g),
    "psum axis_index_groups": lambda: pmap(lambda v: lax.psum(v, "i", axis_index_groups=[[0, 1], [2, 3]]), f),
    "pmap in_axes None": lambda: pmap(lambda v, w: lax.psum(v * w, "i"), f, np.float32(3), in_axes=(0, None)),
    "pmap on 2 devices": lambda: pmap(lambda v: lax.psum(v, "i") + v, f[:2]),
    "sharded device_put reassembles": lambda: np.asarray(jax.device_put(
        np.arange(16.0).reshape(4, 4), NamedSharding(jax.make_mesh((2, 2), ("a", "b")), P("a", "b")))),
    "replicated device_put": lambda: np.asarray(jax.device_put(
        np.arange(6), NamedSharding(jax.make_mesh((4,), ("a",)), P()))),
}

saved = {}
for name, case in cases.items():
    try:
        saved[name] = np.asarray(case())
    except Exception as error:   # JAX rejects it: both backends must reject it
        saved[name] = np.asarray(f"error: {type(error).__name__}")
np.savez(sys.argv[1], **saved)
print("saved", len(saved))
"""

CASE_NAMES = ["psum (issue 6 example)", "pmean", "pmax pmin axis_index", "all_gather",
              "all_gather tiled axis 1", "ppermute ring", "ppermute partial (zeros elsewhere)",
              "all_to_all", "all_to_all tiled", "psum_scatter tiled", "psum_scatter",
              "psum axis_index_groups", "pmap in_axes None", "pmap on 2 devices",
              "sharded device_put reassembles", "replicated device_put"]


def _run_cases(**env: str) -> dict[str, np.ndarray]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cases.npz")
        run_python(CASES_SCRIPT.replace("sys.argv[1]", repr(path)), timeout=300, **env)
        data = np.load(path)
        return {name: data[name] for name in data.files}


@pytest.fixture(scope="module")
def cpu_results():
    return _run_cases(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")


@pytest.fixture(scope="module")
def pjrt_ref_results():
    return _run_cases(JAX_PLATFORMS="pjrt_ref", PJRT_REF_NUM_DEVICES="4")


@pytest.mark.parametrize("name", CASE_NAMES)
def test_multi_device_jax_program_matches_jax_cpu(name, pjrt_ref_results, cpu_results):
    ours, theirs = pjrt_ref_results[name], cpu_results[name]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, (ours, theirs)
    np.testing.assert_array_equal(ours, theirs)


def test_issue_example_gives_6_7_8_9(pjrt_ref_results):
    # The value the issue (and JAX's integration guide) states.
    np.testing.assert_array_equal(pjrt_ref_results["psum (issue 6 example)"], [6, 7, 8, 9])


def test_four_devices_in_jax_each_with_its_memory():
    run_jax("""
        devices = jax.devices()
        assert [d.id for d in devices] == [0, 1, 2, 3], devices
        assert all(d.platform == "pjrt_ref" for d in devices)
        memories = [d.default_memory() for d in devices]
        assert len(set(memories)) == 4, memories
        for i, d in enumerate(devices):
            x = jax.device_put(np.arange(5.0) * i, d)
            assert x.devices() == {d}
            np.testing.assert_array_equal(np.asarray(x), np.arange(5.0) * i)
            y = jax.jit(lambda v: v + 1)(x)            # runs on the device its input is on
            assert y.devices() == {d}, (y.devices(), d)
            z = jax.device_put(x, devices[(i + 1) % 4])  # PJRT_Buffer_CopyToDevice
            assert z.devices() == {devices[(i + 1) % 4]}
            np.testing.assert_array_equal(np.asarray(z), np.arange(5.0) * i)
        del x, y, z
        big = jax.device_put(np.zeros(1000, np.float32), devices[2])
        in_use = [d.memory_stats()["bytes_in_use"] for d in devices]
        assert in_use[2] - max(in_use[:2] + in_use[3:]) >= 4000, in_use   # each memory counts its own
        print("ok")
    """, PJRT_REF_NUM_DEVICES="4")


def test_jax_plugin_options_set_the_device_count():
    # JAX passes register_plugin's `options` to PJRT_Client_Create.
    run_python("""
        import jax, pjrt_ref
        from jax._src import xla_bridge
        xla_bridge.register_plugin("pjrt_ref_opts", library_path=pjrt_ref.library_path(),
                                   options={"num_devices": 3})
        assert [d.id for d in jax.devices()] == [0, 1, 2], jax.devices()
        print(jax.pmap(lambda x: x + jax.lax.psum(x, "i"), axis_name="i")(jax.numpy.arange(3)))
    """, JAX_PLATFORMS="pjrt_ref_opts")


def test_default_is_one_device():
    run_jax("""
        assert len(jax.devices()) == 1, jax.devices()
    """)


# ------------------------------------------------------------ the C API
def _device_id(api: Api, device) -> int:
    description = api.call("PJRT_Device_GetDescription", device=device).device_description
    return api.call("PJRT_DeviceDescription_Id", device_description=description).id


def test_num_devices_create_option_gives_devices_with_their_own_memory(api):
    client = client_with_devices(api, 3)
    devices = addressable_devices(api, client)
    assert [_device_id(api, d) for d in devices] == [0, 1, 2]
    assert api.call("PJRT_Client_Devices", client=client).num_devices == 3
    for i, device in enumerate(devices):
        assert api.call("PJRT_Client_LookupDevice", client=client, id=i).device == device
        assert api.call("PJRT_Client_LookupAddressableDevice", client=client,
                        local_hardware_id=i).addressable_device == device
        memory = api.call("PJRT_Device_DefaultMemory", device=device).memory
        owners = api.call("PJRT_Memory_AddressableByDevices", memory=memory)
        assert [owners.devices[k] for k in range(owners.num_devices)] == [device]
    memories = api.call("PJRT_Client_AddressableMemories", client=client)
    assert memories.num_addressable_memories == 3 * 3     # device, pinned_host, unpinned_host each
    with pytest.raises(PjrtCallError, match="no device with id 3"):
        api.call("PJRT_Client_LookupDevice", client=client, id=3)
    topology = api.call("PJRT_Client_TopologyDescription", client=client).topology
    assert api.call("PJRT_TopologyDescription_GetDeviceDescriptions",
                    topology=topology).num_descriptions == 3
    api.call("PJRT_Client_Destroy", client=client)


def test_bad_device_counts_are_invalid_argument(api):
    for count in (0, -2, 5000):
        with pytest.raises(PjrtCallError) as caught:
            client_with_devices(api, count)
        assert caught.value.code == 3 and "num_devices" in caught.value.message


def test_default_device_assignment_is_xlas_placement(api):
    # XLA's ComputationPlacer::AssignDevices (xla/service/computation_placer.cc)
    # puts (replica, partition) on device `partition * num_replicas + replica`;
    # PjRtCApiClient reads the array replica-major. For 2 x 2: [[0, 2], [1, 3]].
    client = client_with_devices(api, 4)
    out = ffi.new("int[]", 4)
    api.call("PJRT_Client_DefaultDeviceAssignment", client=client, num_replicas=2, num_partitions=2,
             default_assignment_size=4, default_assignment=out)
    assert list(out) == [0, 2, 1, 3]
    with pytest.raises(PjrtCallError, match="need 8 devices"):
        api.call("PJRT_Client_DefaultDeviceAssignment", client=client, num_replicas=4, num_partitions=2,
                 default_assignment_size=8, default_assignment=ffi.new("int[]", 8))
    api.call("PJRT_Client_Destroy", client=client)


def test_execute_runs_every_replica_on_its_device_through_the_c_api(api):
    # The same sums as jnp.sum over the replicas' inputs (computed by numpy).
    client = client_with_devices(api, 4)
    devices = addressable_devices(api, client)
    loaded = api.compile(client, FOUR_REPLICAS)
    listed = api.call("PJRT_LoadedExecutable_AddressableDevices", executable=loaded)
    assert [listed.addressable_devices[i] for i in range(listed.num_addressable_devices)] == devices
    ids = api.call("PJRT_LoadedExecutable_AddressableDeviceLogicalIds", executable=loaded)
    assert [(ids.addressable_device_logical_ids[i].replica, ids.addressable_device_logical_ids[i].partition)
            for i in range(4)] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    inputs = [np.array([1, 2, 3], np.int32) * (10 ** d) for d in range(4)]
    rows = [[buffer_on(api, client, x, device)] for x, device in zip(inputs, devices)]
    outputs = execute_on_devices(api, loaded, rows, 2)
    for d, (total, replica) in enumerate(outputs):
        assert api.call("PJRT_Buffer_Device", buffer=total).device == devices[d]
        np.testing.assert_array_equal(api.to_host(total, np.int32, (3,)), np.sum(inputs, axis=0))
        assert api.to_host(replica, np.uint32, ()) == d
    with pytest.raises(PjrtCallError, match="4 device"):
        execute_on_devices(api, loaded, rows[:2], 2)
    api.call("PJRT_Client_Destroy", client=client)


def test_a_device_that_never_arrives_fails_execute_with_deadline_exceeded(api, monkeypatch):
    # Replica 1 skips the all_reduce replica 0 waits in (see MISMATCH in collective_grid_cases).
    monkeypatch.setenv("PJRT_REF_COLLECTIVE_TIMEOUT", "0.5")
    client = client_with_devices(api, 2)
    devices = addressable_devices(api, client)
    loaded = api.compile(client, MISMATCH)
    rows = [[buffer_on(api, client, np.ones(3, np.float32), device)] for device in devices]
    with pytest.raises(PjrtCallError) as caught:
        execute_on_devices(api, loaded, rows, 1)
    assert caught.value.code == 4                       # DEADLINE_EXCEEDED
    assert "stablehlo.all_reduce" in caught.value.message and "model.py" in caught.value.message
    api.call("PJRT_Client_Destroy", client=client)


def test_execute_device_runs_one_device_of_a_replicated_executable(api):
    # PyTorch/XLA compiles every computation for all devices as replicas and
    # runs it on one (ExecuteSharded: one argument list plus execute_device).
    client = client_with_devices(api, 3)
    devices = addressable_devices(api, client)
    loaded = api.compile(client, TWO_REPLICAS_NO_COLLECTIVES)
    x = np.array([1, 2, 3], np.int32)
    row = ffi.new("PJRT_Buffer*[]", [buffer_on(api, client, x, devices[1])])
    out_row = ffi.new("PJRT_Buffer*[]", 1)
    options = ffi.new("PJRT_ExecuteOptions*", {"struct_size": ffi.sizeof("PJRT_ExecuteOptions")})
    api.keep += [row, out_row, options]
    call = dict(executable=loaded, options=options, argument_lists=ffi.new("PJRT_Buffer**[]", [row]),
                num_devices=1, num_args=1, output_lists=ffi.new("PJRT_Buffer**[]", [out_row]))
    api.call("PJRT_LoadedExecutable_Execute", execute_device=devices[1], **call)
    assert api.call("PJRT_Buffer_Device", buffer=out_row[0]).device == devices[1]
    np.testing.assert_array_equal(api.to_host(out_row[0], np.int32, (3,)), x * 2)
    with pytest.raises(PjrtCallError, match=r"execute_device \(id 2\) is not one of the executable's devices"):
        api.call("PJRT_LoadedExecutable_Execute", execute_device=devices[2], **call)
    api.call("PJRT_Client_Destroy", client=client)


TWO_REPLICAS_NO_COLLECTIVES = """
module attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @main(%x: tensor<3xi32>) -> tensor<3xi32> {
    %0 = stablehlo.add %x, %x : tensor<3xi32>
    return %0 : tensor<3xi32>
  }
}
"""


def _compile_options(num_replicas: int, num_partitions: int, assignment) -> tuple[bytes, bytes | None]:
    """(CompileOptionsProto, DeviceAssignmentProto) bytes as jaxlib writes them (XLA's encoder)."""
    from jax._src.lib import xla_client as xc
    options = xc.CompileOptions()
    build = options.executable_build_options
    build.num_replicas, build.num_partitions = num_replicas, num_partitions
    if assignment is not None:
        build.device_assignment = xc.DeviceAssignment.create(np.array(assignment, np.int32))
    return options.SerializeAsString(), (build.device_assignment.serialize() if assignment is not None else None)


def test_compile_options_device_assignment_chooses_the_devices(api):
    client = client_with_devices(api, 4)
    devices = addressable_devices(api, client)
    options, assignment_proto = _compile_options(2, 1, [[3], [1]])   # replica 0 on 3, replica 1 on 1
    loaded = api.compile(client, TWO_REPLICAS, options)
    listed = api.call("PJRT_LoadedExecutable_AddressableDevices", executable=loaded)
    assert [listed.addressable_devices[i] for i in range(2)] == [devices[3], devices[1]]
    blob = api.call("PJRT_LoadedExecutable_GetDeviceAssignment", executable=loaded)
    assert bytes(ffi.buffer(blob.serialized_bytes, blob.serialized_bytes_size)) == assignment_proto
    blob.serialized_device_assignment_deleter(blob.serialized_device_assignment)
    inputs = [np.array([1, 2, 3], np.int32), np.array([10, 20, 30], np.int32)]
    rows = [[buffer_on(api, client, inputs[0], devices[3])], [buffer_on(api, client, inputs[1], devices[1])]]
    (total0, replica0), (total1, replica1) = execute_on_devices(api, loaded, rows, 2)
    assert api.call("PJRT_Buffer_Device", buffer=total0).device == devices[3]
    np.testing.assert_array_equal(api.to_host(total1, np.int32, (3,)), [11, 22, 33])
    assert (api.to_host(replica0, np.uint32, ()), api.to_host(replica1, np.uint32, ())) == (0, 1)
    api.call("PJRT_Client_Destroy", client=client)


def test_compile_options_that_contradict_the_module_or_client_are_invalid_argument(api):
    client = client_with_devices(api, 2)
    for options, match in [(_compile_options(3, 1, None)[0], "3 replicas"),
                           (_compile_options(2, 1, [[0], [7]])[0], "no device with id 7"),
                           (_compile_options(2, 1, [[1], [1]])[0], "uses a device twice")]:
        with pytest.raises(PjrtCallError, match=match) as caught:
            api.compile(client, TWO_REPLICAS, options)
        assert caught.value.code == 3
    api.call("PJRT_Client_Destroy", client=client)


def test_topology_create_takes_the_device_count_and_gives_coords(api):
    options, keep = int64_named_values({"num_devices": 2})
    api.keep += keep
    topology = api.call("PJRT_TopologyDescription_Create", create_options=options, num_options=1).topology
    described = api.call("PJRT_TopologyDescription_GetDeviceDescriptions", topology=topology)
    assert described.num_descriptions == 2
    second = api.call("PJRT_DeviceDescription_Attributes", device_description=described.descriptions[1])
    attributes = {ffi.string(second.attributes[i].name, second.attributes[i].name_size).decode(): second.attributes[i]
                  for i in range(second.num_attributes)}
    coords = attributes["coords"]
    assert coords.type == lib.PJRT_NamedValue_kInt64List
    assert [coords.int64_array_value[i] for i in range(coords.value_size)] == [1]
    api.call("PJRT_TopologyDescription_Destroy", topology=topology)
