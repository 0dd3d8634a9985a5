"""Memory kinds as a C host sees them (pjrt_ref/model/memory.py): every device
addresses a `device`, a `pinned_host` and an `unpinned_host` memory; buffers
move between them; a program's `mhlo.memory_kind` decides where its
parameters and results live."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.capi_calls import ffi, lib

INVALID, UNIMPLEMENTED = lib.PJRT_Error_Code_INVALID_ARGUMENT, lib.PJRT_Error_Code_UNIMPLEMENTED
KINDS = [b"device", b"pinned_host", b"unpinned_host"]

OFFLOAD = """func.func @main(%x: tensor<4xf32> {mhlo.memory_kind = "pinned_host"}, %y: tensor<4xf32>)
    -> (tensor<4xf32> {mhlo.memory_kind = "unpinned_host"}, tensor<4xf32>, tensor<4xf32> {mhlo.memory_kind = "pinned_host"}) {
  %0 = stablehlo.add %x, %y : tensor<4xf32>
  %1 = stablehlo.custom_call @annotate_device_placement(%0) {has_side_effect = true,
         mhlo.frontend_attributes = {_xla_buffer_placement = "pinned_host"}} : (tensor<4xf32>) -> tensor<4xf32>
  %2 = stablehlo.multiply %1, %y : tensor<4xf32>
  return %0, %2, %1 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}"""


def _text(args, field: str) -> bytes:
    return ffi.string(getattr(args, field), getattr(args, f"{field}_size"))


def _kind(api, memory) -> bytes:
    return _text(api.call("PJRT_Memory_Kind", memory=memory), "kind")


def _memories_of(api, device) -> list:
    args = api.call("PJRT_Device_AddressableMemories", device=device)
    return [args.memories[i] for i in range(args.num_memories)]


def _buffer_memory_kind(api, buffer) -> bytes:
    return _kind(api, api.call("PJRT_Buffer_Memory", buffer=buffer).memory)


def test_each_device_addresses_one_memory_of_each_kind_and_the_default_is_device(api, client):
    device = api.device(client)
    memories = _memories_of(api, device)
    assert [_kind(api, m) for m in memories] == KINDS
    kind_ids = [api.call("PJRT_Memory_Kind_Id", memory=m).kind_id for m in memories]
    assert len(set(kind_ids)) == 3
    default = api.call("PJRT_Device_DefaultMemory", device=device).memory
    assert _kind(api, default) == b"device"
    for memory in memories:
        owners = api.call("PJRT_Memory_AddressableByDevices", memory=memory)
        assert owners.num_devices == 1 and owners.devices[0] == device
    client_memories = api.call("PJRT_Client_AddressableMemories", client=client)
    assert client_memories.num_addressable_memories == 3
    ids = {api.call("PJRT_Memory_Id", memory=m).id for m in memories}
    assert len(ids) == 3


@pytest.mark.parametrize("kind", [1, 2])
def test_a_buffer_made_in_or_copied_to_a_host_memory_reports_it_and_keeps_its_values(api, client, kind):
    memory = _memories_of(api, api.device(client))[kind]
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    on_device = api.buffer(client, values)
    assert _buffer_memory_kind(api, on_device) == b"device"
    moved = api.call("PJRT_Buffer_CopyToMemory", buffer=on_device, dst_memory=memory).dst_buffer
    assert _buffer_memory_kind(api, moved) == KINDS[kind]
    np.testing.assert_array_equal(api.to_host(moved, np.float32, (2, 3)), values)
    back = api.call("PJRT_Buffer_CopyToMemory", buffer=moved,
                    dst_memory=api.call("PJRT_Device_DefaultMemory", device=api.device(client)).memory).dst_buffer
    assert _buffer_memory_kind(api, back) == b"device"
    for buffer in (on_device, moved, back):
        api.call("PJRT_Buffer_Destroy", buffer=buffer)


def test_a_program_s_memory_kinds_are_its_executable_s_and_its_results_live_there(api, client):
    loaded = api.compile(client, OFFLOAD)
    exe = api.call("PJRT_LoadedExecutable_GetExecutable", loaded_executable=loaded).executable
    try:
        outputs = api.call("PJRT_Executable_OutputMemoryKinds", executable=exe)
        assert [ffi.string(outputs.memory_kinds[i], outputs.memory_kind_sizes[i])
                for i in range(outputs.num_outputs)] == [b"unpinned_host", b"device", b"pinned_host"]
        parameters = api.call("PJRT_Executable_ParameterMemoryKinds", executable=exe)
        assert [ffi.string(parameters.memory_kinds[i], parameters.memory_kind_sizes[i])
                for i in range(parameters.num_parameters)] == [b"pinned_host", b"device"]
    finally:
        api.call("PJRT_Executable_Destroy", executable=exe)
    x, y = np.arange(4, dtype=np.float32), np.full(4, 3, np.float32)
    host = _memories_of(api, api.device(client))[1]
    x_buffer = api.call("PJRT_Buffer_CopyToMemory", buffer=api.buffer(client, x), dst_memory=host).dst_buffer
    results = api.execute(loaded, [x_buffer, api.buffer(client, y)], 3)
    assert [_buffer_memory_kind(api, b) for b in results] == [b"unpinned_host", b"device", b"pinned_host"]
    expected = [x + y, (x + y) * y, x + y]
    for buffer, value in zip(results, expected):
        np.testing.assert_array_equal(api.to_host(buffer, np.float32, (4,)), value)


@pytest.mark.parametrize("where, bad", [
    ("{mhlo.memory_kind = \"hbm\"}", "hbm"),
    ("{mhlo.memory_kind = \"device\"}", None),
])
def test_a_parameter_kind_pjrt_ref_has_no_memory_of_fails_the_compile_naming_it(api, client, where, bad):
    program = f"""func.func @main(%x: tensor<2xf32> {where}) -> tensor<2xf32> {{
      return %x : tensor<2xf32>
    }}"""
    if bad is None:
        api.compile(client, program)
        return
    code, message = api.error("PJRT_Client_Compile", **_program_fields(api, client, program))
    assert code == INVALID and repr(bad) in message and "pinned_host" in message


def test_a_placement_to_an_unknown_memory_fails_the_compile_naming_the_op(api, client):
    program = """func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = stablehlo.custom_call @annotate_device_placement(%x) {has_side_effect = true,
             mhlo.frontend_attributes = {_xla_buffer_placement = "tape"}} : (tensor<2xf32>) -> tensor<2xf32>
      return %0 : tensor<2xf32>
    }"""
    code, message = api.error("PJRT_Client_Compile", **_program_fields(api, client, program))
    assert code == INVALID and "'tape'" in message and "annotate_device_placement" in message


def _program_fields(api, client, text: str) -> dict:
    code, fmt = text.encode(), b"mlir"
    c_code, c_fmt = ffi.new("char[]", code), ffi.new("char[]", fmt)
    program = ffi.new("PJRT_Program*", {"struct_size": ffi.sizeof("PJRT_Program"), "code": c_code,
                                        "code_size": len(code), "format": c_fmt, "format_size": len(fmt)})
    api.keep += [c_code, c_fmt, program]
    return {"client": client, "program": program, "compile_options": ffi.NULL, "compile_options_size": 0}


def test_the_interpreter_s_placement_kinds_are_the_model_s_memory_kinds():
    """interpreter/ops/placement.py keeps its own copy (the interpreter does not import the model)."""
    from pjrt_ref.interpreter.ops import placement
    from pjrt_ref.model import memory

    assert placement.MEMORY_KINDS == memory.KINDS
