"""Dense layouts other than row-major, as a C host sees them (pjrt_ref/model/layouts.py):
a buffer is stored in the layout it was asked for and reports it; raw bytes
come in that order; a program's `mhlo.layout_mode` decides its parameters'
and results' layouts ("auto" results that are transposed parameters get the
layout that makes the transpose free)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.capi_calls import ffi, lib

INVALID, UNIMPLEMENTED = lib.PJRT_Error_Code_INVALID_ARGUMENT, lib.PJRT_Error_Code_UNIMPLEMENTED
VALUES = np.arange(12, dtype=np.int32).reshape(3, 4)


def _buffer_in_layout(api, client, array: np.ndarray, minor_to_major):
    array = np.ascontiguousarray(array)
    dims = api.dims(array.shape)
    api.keep.append(array)
    args = api.call("PJRT_Client_BufferFromHostBuffer", client=client, data=ffi.cast("void*", array.ctypes.data),
                    type=lib.PJRT_Buffer_Type_S32, dims=dims, num_dims=array.ndim,
                    host_buffer_semantics=lib.PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
                    device_layout=api.tiled_layout(minor_to_major))
    api.call("PJRT_Event_Destroy", event=args.done_with_host_buffer)
    return args.buffer


def _minor_to_major(api, buffer) -> list[int]:
    tiled = api.call("PJRT_Buffer_GetMemoryLayout", buffer=buffer).layout.tiled
    return [tiled.minor_to_major[i] for i in range(tiled.minor_to_major_size)]


def _raw(api, buffer, size: int) -> bytes:
    out = ffi.new("char[]", size)
    args = api.call("PJRT_Buffer_CopyRawToHost", buffer=buffer, dst=out, offset=0, transfer_size=size)
    api.call("PJRT_Event_Await", event=args.event)
    api.call("PJRT_Event_Destroy", event=args.event)
    return ffi.buffer(out, size)[:]


def test_a_column_major_buffer_reports_its_layout_keeps_its_values_and_its_bytes_are_column_major(api, client):
    buffer = _buffer_in_layout(api, client, VALUES, [0, 1])
    assert _minor_to_major(api, buffer) == [0, 1]
    np.testing.assert_array_equal(api.to_host(buffer, np.int32, (3, 4)), VALUES)
    assert _raw(api, buffer, VALUES.nbytes) == VALUES.tobytes(order="F")
    copy = api.call("PJRT_Buffer_CopyToDevice", buffer=buffer, dst_device=api.device(client)).dst_buffer
    assert _minor_to_major(api, copy) == [0, 1]
    np.testing.assert_array_equal(api.to_host(copy, np.int32, (3, 4)), VALUES)
    for b in (buffer, copy):
        api.call("PJRT_Buffer_Destroy", buffer=b)


def test_a_rank_3_layout_orders_the_raw_bytes_by_its_dimensions(api, client):
    values = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    buffer = _buffer_in_layout(api, client, values, [1, 2, 0])      # dim 1 fastest, then 2, then 0
    expected = np.ascontiguousarray(values.transpose(0, 2, 1)).tobytes()
    assert _raw(api, buffer, values.nbytes) == expected
    np.testing.assert_array_equal(api.to_host(buffer, np.int32, (2, 3, 4)), values)
    api.call("PJRT_Buffer_Destroy", buffer=buffer)


def test_a_layout_that_is_not_a_permutation_is_refused(api, client):
    array = np.ascontiguousarray(VALUES)
    api.keep.append(array)
    code, message = api.error("PJRT_Client_BufferFromHostBuffer", client=client,
                              data=ffi.cast("void*", array.ctypes.data), type=lib.PJRT_Buffer_Type_S32,
                              dims=api.dims(array.shape), num_dims=2,
                              host_buffer_semantics=lib.PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
                              device_layout=api.tiled_layout([1, 1]))
    assert code == INVALID and "not a permutation" in message


LAYOUT_PROGRAM = """func.func @main(%x: tensor<3x4xi32> {mhlo.layout_mode = "{0,1}"}, %y: tensor<3x4xi32>)
    -> (tensor<3x4xi32> {mhlo.layout_mode = "{0,1}"}, tensor<4x3xi32> {mhlo.layout_mode = "auto"},
        tensor<4x3xi32> {mhlo.layout_mode = "auto"}, tensor<3x4xi32>) {
  %0 = stablehlo.add %x, %y : tensor<3x4xi32>
  %1 = stablehlo.transpose %y, dims = [1, 0] : (tensor<3x4xi32>) -> tensor<4x3xi32>
  %2 = stablehlo.transpose %0, dims = [1, 0] : (tensor<3x4xi32>) -> tensor<4x3xi32>
  return %0, %1, %2, %0 : tensor<3x4xi32>, tensor<4x3xi32>, tensor<4x3xi32>, tensor<3x4xi32>
}"""


def test_a_program_s_layout_modes_decide_its_executable_s_layouts_and_its_results(api, client):
    loaded = api.compile(client, LAYOUT_PROGRAM)
    x = _buffer_in_layout(api, client, VALUES, [0, 1])
    y = api.buffer(client, VALUES * 10)
    results = api.execute(loaded, [x, y], 4)
    # "{0,1}" as asked; "auto" of a transposed row-major parameter: free, so column-major;
    # "auto" of anything else: row-major; no layout_mode: row-major.
    assert [_minor_to_major(api, r) for r in results] == [[0, 1], [0, 1], [1, 0], [1, 0]]
    expected = [VALUES * 11, (VALUES * 10).T, (VALUES * 11).T, VALUES * 11]
    for buffer, value in zip(results, expected):
        np.testing.assert_array_equal(api.to_host(buffer, np.int32, value.shape), value)
    assert _raw(api, results[0], VALUES.nbytes) == (VALUES * 11).tobytes(order="F")


@pytest.mark.parametrize("mode", ['"{0,1:T(8,128)}"', '"{0,0}"', '"rows"'])
def test_a_layout_mode_pjrt_ref_cannot_store_fails_the_compile_naming_it(api, client, mode):
    program = f"""func.func @main(%x: tensor<3x4xi32> {{mhlo.layout_mode = {mode}}}) -> tensor<3x4xi32> {{
      return %x : tensor<3x4xi32>
    }}"""
    code_text = program.encode()
    c_code, c_fmt = ffi.new("char[]", code_text), ffi.new("char[]", b"mlir")
    prog = ffi.new("PJRT_Program*", {"struct_size": ffi.sizeof("PJRT_Program"), "code": c_code,
                                     "code_size": len(code_text), "format": c_fmt, "format_size": 4})
    api.keep += [c_code, c_fmt, prog]
    code, message = api.error("PJRT_Client_Compile", client=client, program=prog,
                              compile_options=ffi.NULL, compile_options_size=0)
    assert code == INVALID and "layout" in message
