"""Helpers (no tests): the C API on a client of several virtual devices.

Shared by tests/model/test_multi_device.py and the child processes of
tests/capi/test_shim_gil.py, which run the same replicated steps in either
GIL state; they call the plugin through `capi_calls.Api`.
"""
from __future__ import annotations

import numpy as np

from tests.support.capi_calls import Api, ffi, lib

# An all_reduce over four replicas, and each replica's id: a program that
# completes only when every replica runs, each on its own device.
FOUR_REPLICAS = """
module attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @main(%x: tensor<3xi32>) -> (tensor<3xi32>, tensor<ui32>) {
    %s = "stablehlo.all_reduce"(%x) ({
      ^bb0(%a: tensor<i32>, %b: tensor<i32>):
        %t = stablehlo.add %a, %b : tensor<i32>
        stablehlo.return %t : tensor<i32>
    }) {replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<3xi32>) -> tensor<3xi32>
    %id = stablehlo.replica_id : tensor<ui32>
    return %s, %id : tensor<3xi32>, tensor<ui32>
  }
}
"""

TWO_REPLICAS = FOUR_REPLICAS.replace("mhlo.num_replicas = 4", "mhlo.num_replicas = 2").replace(
    "dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>", "dense<[[0, 1]]> : tensor<1x2xi64>")


def int64_named_values(values: dict):
    """(PJRT_NamedValue array, C memory to keep alive) for int64 create options."""
    array = ffi.new("PJRT_NamedValue[]", len(values))
    keep = [array]
    for item, (name, value) in zip(array, values.items()):
        c_name = ffi.new("char[]", name.encode())
        keep.append(c_name)
        item.struct_size = ffi.sizeof("PJRT_NamedValue")
        item.name, item.name_size = c_name, len(name)
        item.type, item.int64_value, item.value_size = lib.PJRT_NamedValue_kInt64, value, 1
    return array, keep


def client_with_devices(api: Api, num_devices: int):
    """A client created with the `num_devices` create option."""
    options, keep = int64_named_values({"num_devices": num_devices})
    api.keep += keep
    return api.call("PJRT_Client_Create", create_options=options, num_options=1).client


def addressable_devices(api: Api, client) -> list:
    args = api.call("PJRT_Client_AddressableDevices", client=client)
    return [args.addressable_devices[i] for i in range(args.num_addressable_devices)]


def buffer_on(api: Api, client, array: np.ndarray, device):
    """`array` copied to a buffer on `device`."""
    from pjrt_ref.model.dtypes import from_numpy
    array = np.ascontiguousarray(array)
    dims = ffi.new("int64_t[]", list(array.shape))
    api.keep += [dims, array]
    return api.call("PJRT_Client_BufferFromHostBuffer", client=client, data=ffi.cast("void*", array.ctypes.data),
                    type=int(from_numpy(array.dtype)), dims=dims, num_dims=array.ndim, device=device,
                    host_buffer_semantics=lib.PJRT_HostBufferSemantics_kImmutableOnlyDuringCall).buffer


def execute_on_devices(api: Api, loaded, rows: list[list], num_outputs: int) -> list[list]:
    """Execute with one argument row per device; await every device's
    completion event; each device's outputs."""
    c_rows = [ffi.new("PJRT_Buffer*[]", row) for row in rows]
    out_rows = [ffi.new("PJRT_Buffer*[]", num_outputs) for _ in rows]
    events = ffi.new("PJRT_Event*[]", len(rows))
    options = ffi.new("PJRT_ExecuteOptions*", {"struct_size": ffi.sizeof("PJRT_ExecuteOptions")})
    api.keep += [c_rows, out_rows, options, events]
    api.call("PJRT_LoadedExecutable_Execute", executable=loaded, options=options,
             argument_lists=ffi.new("PJRT_Buffer**[]", c_rows), num_devices=len(rows),
             num_args=len(rows[0]), output_lists=ffi.new("PJRT_Buffer**[]", out_rows),
             device_complete_events=events)
    for event in events:
        api.call("PJRT_Event_Await", event=event)
        api.call("PJRT_Event_Destroy", event=event)
    return [[row[j] for j in range(num_outputs)] for row in out_rows]
