"""PJRT_Program formats other than StableHLO: an HloModuleProto ("hlo", what
PyTorch/XLA sends) compiles through XLA's own importer (pjrt_ref/model/program_formats.py).

Programs come from JAX (`compiler_ir("hlo")`), and the expected values from
JAX's cpu backend on the same function.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.support.capi_calls import Api, PjrtCallError, ffi


def _hlo_module(fn, *args) -> bytes:
    return jax.jit(fn).lower(*args).compiler_ir("hlo").as_serialized_hlo_module_proto()


def _run(api: Api, client, program: bytes, fmt: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    loaded = api.compile(client, program, fmt=fmt)
    exe = api.call("PJRT_LoadedExecutable_GetExecutable", loaded_executable=loaded).executable
    dims = api.call("PJRT_Executable_OutputDimensions", executable=exe)
    shapes, at = [], 0
    for i in range(dims.num_outputs):
        rank = dims.dim_sizes[i]
        shapes.append(tuple(dims.dims[at + k] for k in range(rank)))
        at += rank
    api.call("PJRT_Executable_Destroy", executable=exe)
    outputs = api.execute(loaded, [api.buffer(client, x) for x in inputs], len(shapes))
    return outputs, shapes


def test_an_hlo_module_runs_like_jax_cpu(api, client):
    def fn(x, w):
        return jnp.tanh(x @ w).sum(axis=0), jnp.argmax(x, axis=1)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    w = np.linspace(0, 2, 8, dtype=np.float32).reshape(4, 2)
    expected = [np.asarray(r) for r in jax.jit(fn)(x, w)]       # JAX's cpu backend
    outputs, shapes = _run(api, client, _hlo_module(fn, x, w), "hlo", [x, w])
    assert shapes == [e.shape for e in expected]
    for buffer, want in zip(outputs, expected):
        np.testing.assert_allclose(api.to_host(buffer, want.dtype, want.shape), want, rtol=1e-6)


def _with_buffer_donors(module: bytes, parameters: list[int]) -> bytes:
    """`module` with an HloModuleProto `buffer_donor` (field 18) naming `parameters`:
    what PyTorch/XLA sends for a donated tensor (JAX writes the field only
    for some sharded programs). Appending a field to a serialized message
    sets it (protobuf merges). Written out by hand, parameters < 128 (one-byte varints)."""
    entries = b"".join(b"\x0a\x02\x08" + bytes([p]) for p in parameters)  # entries {parameter_number: p}
    return module + b"\x92\x01" + bytes([len(entries)]) + entries      # field 18 (LEN)


def _is_deleted(api: Api, buffer) -> bool:
    return bool(api.call("PJRT_Buffer_IsDeleted", buffer=buffer).is_deleted)


@pytest.mark.parametrize("how", ["input_output_alias", "buffer_donor"])
def test_an_hlo_modules_donated_parameters_are_deleted_by_execute(how, api, client):
    # As on JAX's cpu backend: a donated argument's buffer is gone after the
    # execution, the others stay, and the result is the same.
    fn = lambda x, y: x * 2 + y                                           # noqa: E731
    x, y = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
    if how == "input_output_alias":        # JAX writes `input_output_alias` for tf.aliasing_output
        module = jax.jit(fn, donate_argnums=0).lower(x, y).compiler_ir("hlo").as_serialized_hlo_module_proto()
    else:
        module = _with_buffer_donors(_hlo_module(fn, x, y), [0])
    on_cpu = [jax.device_put(v, jax.devices("cpu")[0]) for v in (x, y)]
    expected = np.asarray(jax.jit(fn, donate_argnums=0)(*on_cpu))
    assert on_cpu[0].is_deleted() and not on_cpu[1].is_deleted()        # XLA CPU's behaviour
    arguments = [api.buffer(client, v) for v in (x, y)]
    loaded = api.compile(client, module, fmt="hlo")
    [result] = api.execute(loaded, arguments, 1)
    assert [_is_deleted(api, b) for b in arguments] == [True, False]
    np.testing.assert_array_equal(api.to_host(result, np.float32, (4,)), expected)


def test_optimized_program_of_an_hlo_module_is_stablehlo_text(api, client):
    # PyTorch/XLA reads this after every compile (PjRtCApiExecutable::GetHloModules
    # accepts "mlir" and converts it to HLO with its own XLA).
    loaded = api.compile(client, _hlo_module(lambda x: x * 2, np.ones(3, np.float32)), fmt="hlo")
    exe = api.call("PJRT_LoadedExecutable_GetExecutable", loaded_executable=loaded).executable
    program = ffi.new("PJRT_Program*", {"struct_size": ffi.sizeof("PJRT_Program")})
    size = api.call("PJRT_Executable_OptimizedProgram", executable=exe, program=program).program.code_size
    code = ffi.new("char[]", size)
    program.code = code
    api.call("PJRT_Executable_OptimizedProgram", executable=exe, program=program)
    assert ffi.string(program.format, program.format_size) == b"mlir"
    assert "stablehlo.multiply" in ffi.string(code, size).decode()
    api.call("PJRT_Executable_Destroy", executable=exe)


@pytest.mark.parametrize("fmt, code, says", [
    ("hlo_with_config", 12, "'hlo_with_config' is not accepted"),
    ("tosa", 3, "unknown PJRT_Program format 'tosa'"),
])
def test_other_formats_are_refused_naming_what_is_accepted(fmt, code, says, api, client):
    with pytest.raises(PjrtCallError) as caught:
        api.compile(client, b"\x08\x01", fmt=fmt)
    assert caught.value.code == code and says in caught.value.message
    assert "'mlir' and 'hlo'" in caught.value.message


def test_what_xlas_hlo_importer_leaves_in_stablehlo_runs(api, client):
    # HLO's erf has no StableHLO op (the importer writes mhlo.erf), and a
    # transpose into a non-default layout carries a `result_layout` of index
    # type (a physical layout: the logical result is the same). Expected values
    # from JAX's cpu backend.
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    erf = _hlo_module(jax.scipy.special.erf, x)
    outputs, _ = _run(api, client, erf, "hlo", [x])
    np.testing.assert_allclose(api.to_host(outputs[0], np.float32, x.shape),
                               np.asarray(jax.jit(jax.scipy.special.erf)(x)), atol=2e-7)
    transpose = """
    func.func @main(%x: tensor<3x4xf32>) -> tensor<4x3xf32> {
      %0 = stablehlo.transpose %x, dims = [1, 0] {result_layout = dense<[0, 1]> : tensor<2xindex>,
                                                   xla_shape = "f32[4,3]{0,1}"} : (tensor<3x4xf32>) -> tensor<4x3xf32>
      return %0 : tensor<4x3xf32>
    }
    """
    outputs, _ = _run(api, client, transpose.encode(), "mlir", [x])
    np.testing.assert_array_equal(api.to_host(outputs[0], np.float32, (4, 3)), x.T)
