"""The PJRT Layouts and Shardings extensions (capi_shim/pjrt_layouts_shardings.h).

The ABI is checked against pypjrt's layout-checked 0.114 description; the
functions are called from C through the extension structs, bad handles
included; and the host that matters, jaxlib's C API client, must get what
it used to read from an HloModule without converting the program any more
(no PJRT_Executable_OptimizedProgram call during a compile), with the same
shardings and layouts as XLA CPU reports.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from tests.support.capi_calls import Api, PjrtCallError, assert_layout_matches, extension
from tests.support.jax_support import run_jax
from pjrt_ref.capi_shim._pjrt_ref_shim import ffi, lib
from pjrt_ref.errors import ErrorCode

abi = pytest.importorskip("pypjrt._abi.pjrt_0_114")

STRUCTS = ("PJRT_Layouts_Extension", "PJRT_Shardings_Extension",
           "PJRT_Layouts_MemoryLayout_Destroy_Args", "PJRT_Layouts_MemoryLayout_Serialize_Args",
           "PJRT_Layouts_PJRT_Client_GetDefaultLayout_Args", "PJRT_Layouts_PJRT_Buffer_MemoryLayout_Args",
           "PJRT_Layouts_PJRT_Topology_GetDefaultLayout_Args",
           "PJRT_Layouts_PJRT_Executable_GetOutputLayouts_Args",
           "PJRT_Layouts_PJRT_Executable_GetParameterLayouts_Args",
           "PJRT_Shardings_PJRT_Executable_ParameterShardings_Args",
           "PJRT_Shardings_PJRT_Executable_OutputShardings_Args")

PROGRAM = """
func.func @main(%x: tensor<2x3xf32>, %s: tensor<f32>) -> (tensor<3x2xf32>, tensor<f32>, tensor<2x3x1xi32>) {
  %t = stablehlo.transpose %x, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %i = stablehlo.convert %x : (tensor<2x3xf32>) -> tensor<2x3xi32>
  %r = stablehlo.reshape %i : (tensor<2x3xi32>) -> tensor<2x3x1xi32>
  return %t, %s, %r : tensor<3x2xf32>, tensor<f32>, tensor<2x3x1xi32>
}
"""


def layouts():
    return extension(lib.PJRT_Extension_Type_Layouts, "PJRT_Layouts_Extension")


def shardings():
    return extension(lib.PJRT_Extension_Type_Shardings, "PJRT_Shardings_Extension")


def call(api: Api, extension, name: str, **fields):
    """Call extension function `name` with fresh Args; raise its error as PjrtCallError."""
    args = ffi.new(f"{name}_Args*")
    args.struct_size = ffi.sizeof(f"{name}_Args")
    for field, value in fields.items():
        setattr(args, field, value)
    error = getattr(extension, name)(args)
    if error != ffi.NULL:
        raise PjrtCallError(name, *api.take_error(error))
    return args


def serialized(api: Api, layout) -> str:
    args = call(api, layouts(), "PJRT_Layouts_MemoryLayout_Serialize", layout=layout)
    text = bytes(ffi.buffer(args.serialized_bytes, args.serialized_bytes_size)).decode()
    args.serialized_layout_deleter(args.serialized_layout)
    call(api, layouts(), "PJRT_Layouts_MemoryLayout_Destroy", layout=layout)
    return text


@pytest.fixture(scope="module")
def loaded(api, client):
    executable = api.call("PJRT_LoadedExecutable_GetExecutable",
                          loaded_executable=api.compile(client, PROGRAM)).executable
    return api, client, executable


@pytest.mark.parametrize("name", STRUCTS)
def test_struct_layout_matches_pypjrt(name):
    assert_layout_matches(name, getattr(abi, name))


def test_both_extensions_are_announced_with_every_function():
    for found, struct in ((layouts(), "PJRT_Layouts_Extension"),
                          (shardings(), "PJRT_Shardings_Extension")):
        assert found.base.struct_size == ffi.sizeof(struct)
        for field, *_ in ffi.typeof(struct).fields[1:]:
            assert getattr(found, field) != ffi.NULL, field


def test_every_layout_is_row_major_in_xlas_text_form(loaded):
    api, client, executable = loaded
    dims = ffi.new("int64_t[]", [4, 5, 6])
    default = call(api, layouts(), "PJRT_Layouts_PJRT_Client_GetDefaultLayout", client=client,
                   type=lib.PJRT_Buffer_Type_BF16, dims=dims, num_dims=3)
    assert serialized(api, default.layout) == "{2,1,0}"
    buffer = api.buffer(client, np.zeros((2, 7), np.int8))
    of_buffer = call(api, layouts(), "PJRT_Layouts_PJRT_Buffer_MemoryLayout", buffer=buffer)
    assert serialized(api, of_buffer.layout) == "{1,0}"
    outputs = call(api, layouts(), "PJRT_Layouts_PJRT_Executable_GetOutputLayouts", executable=executable)
    assert [serialized(api, outputs.layouts[i]) for i in range(outputs.num_outputs)] == \
        ["{1,0}", "{}", "{2,1,0}"]
    parameters = call(api, layouts(), "PJRT_Layouts_PJRT_Executable_GetParameterLayouts",
                      executable=executable)
    assert [serialized(api, parameters.layouts[i]) for i in range(parameters.num_parameters)] == \
        ["{1,0}", "{}"]


def test_a_program_for_one_device_has_no_shardings(loaded):
    api, _, executable = loaded
    outputs = call(api, shardings(), "PJRT_Shardings_PJRT_Executable_OutputShardings", executable=executable)
    parameters = call(api, shardings(), "PJRT_Shardings_PJRT_Executable_ParameterShardings",
                      executable=executable)
    assert (outputs.num_outputs, parameters.num_parameters) == (3, 2)
    assert outputs.shardings == ffi.NULL and outputs.sharding_sizes == ffi.NULL
    assert parameters.shardings == ffi.NULL and parameters.sharding_sizes == ffi.NULL


NO_RESULTS_ON_2 = """
module attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  func.func @main(%x: tensor<4xf32>) -> () {
    return
  }
}
"""


def test_a_program_over_partitions_without_results_has_one_output_sharding(api, monkeypatch):
    """As XLA keeps an empty tuple's sharding (one element); jaxlib fails the
    compile on zero ("the output sharding has 0 elements")."""
    from jax._src.lib import xla_client

    monkeypatch.setenv("PJRT_REF_NUM_DEVICES", "2")
    two_devices = api.client()          # the module's client has one device; this program needs two
    executable = api.call("PJRT_LoadedExecutable_GetExecutable",
                          loaded_executable=api.compile(two_devices, NO_RESULTS_ON_2)).executable
    outputs = call(api, shardings(), "PJRT_Shardings_PJRT_Executable_OutputShardings", executable=executable)
    parameters = call(api, shardings(), "PJRT_Shardings_PJRT_Executable_ParameterShardings",
                      executable=executable)
    assert (outputs.num_outputs, parameters.num_parameters) == (1, 1)
    for args in (outputs, parameters):
        proto = xla_client.OpSharding()
        proto.ParseFromString(bytes(ffi.buffer(args.shardings[0], args.sharding_sizes[0])))
        assert xla_client.HloSharding.from_proto(proto).is_replicated()
    api.call("PJRT_Client_Destroy", client=two_devices)


def test_bad_handles_and_arguments_are_errors_not_crashes(loaded):
    api, client, _ = loaded
    bogus = ffi.cast("PJRT_Layouts_MemoryLayout*", 0x40)
    for name in ("PJRT_Layouts_MemoryLayout_Serialize", "PJRT_Layouts_MemoryLayout_Destroy"):
        with pytest.raises(PjrtCallError) as error:
            call(api, layouts(), name, layout=bogus)
        assert error.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(PjrtCallError, match="PJRT_Buffer_Type 999"):
        call(api, layouts(), "PJRT_Layouts_PJRT_Client_GetDefaultLayout", client=client, type=999,
             dims=ffi.NULL, num_dims=0)
    with pytest.raises(PjrtCallError, match="dims is NULL"):
        call(api, layouts(), "PJRT_Layouts_PJRT_Client_GetDefaultLayout", client=client,
             type=lib.PJRT_Buffer_Type_F32, dims=ffi.NULL, num_dims=2)
    for name, field in (("PJRT_Layouts_PJRT_Buffer_MemoryLayout", "buffer"),
                        ("PJRT_Layouts_PJRT_Executable_GetOutputLayouts", "executable"),
                        ("PJRT_Shardings_PJRT_Executable_OutputShardings", "executable")):
        extension = shardings() if "Shardings" in name else layouts()
        with pytest.raises(PjrtCallError):
            call(api, extension, name, **{field: ffi.cast("void*", 0x40)})


COMPILE_SCRIPT = """
import sys
from jax.sharding import NamedSharding, PartitionSpec as P
x = np.arange(24.0, dtype=np.float32).reshape(4, 6)
sys.stderr.write("COMPILE-START\\n"); sys.stderr.flush()
one = jax.jit(lambda a: (a.T * 2, a.sum())).lower(x).compile()
mesh = jax.make_mesh((2,), ("x",))
sharded = jax.jit(lambda a: (a * 2, a.sum(0)), in_shardings=NamedSharding(mesh, P("x")),
                  out_shardings=(NamedSharding(mesh, P("x")), NamedSharding(mesh, P()))).lower(x).compile()
nothing = jax.jit(lambda a: None, in_shardings=NamedSharding(mesh, P("x"))).lower(x).compile()
sys.stderr.write("COMPILE-END\\n"); sys.stderr.flush()
y = one(x)
print(repr((str(one.input_formats), str(one.output_formats), str(one.output_shardings),
            str(sharded.input_shardings), str(sharded.output_shardings), str(nothing.output_shardings),
            np.asarray(y[0]).tolist(), float(y[1]), np.asarray(sharded(x)[0]).tolist())))
"""


def test_jax_compiles_without_converting_the_program_and_sees_xlas_answers():
    """jaxlib asks the extensions instead of fetching the optimized program;
    the layouts, formats and shardings it then reports are XLA CPU's (one
    device, two, and a program with no results)."""
    ours = run_jax(COMPILE_SCRIPT, PJRT_REF_LOG_API="1", PJRT_REF_NUM_DEVICES="2")
    assert ours.returncode == 0, ours.stderr[-3000:]
    compiling = ours.stderr.split("COMPILE-START")[1].split("COMPILE-END")[0]
    assert "-> PJRT_Client_Compile" in compiling
    assert "-> PJRT_Layouts_PJRT_Executable_GetOutputLayouts" in compiling
    assert "PJRT_Executable_OptimizedProgram" not in compiling
    xla = run_jax(COMPILE_SCRIPT, JAX_PLATFORMS="cpu",
                  XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert xla.returncode == 0, xla.stderr[-3000:]
    # Only the devices' names differ: PjrtRefDevice(id=0, kind=cpu) / CpuDevice(id=0).
    normalised = [re.sub(r"\w*Device\(id=(\d+)[^)]*\)", r"Device(\1)", run.stdout.strip().splitlines()[-1])
                  for run in (ours, xla)]
    assert normalised[0] == normalised[1]
