"""Async host-to-device transfers: pending buffers, chunked data, errors (via pypjrt)."""
from __future__ import annotations

from test_capi_errors import PYPJRT_PRELUDE
from jax_support import run_python


def test_chunked_transfer_then_execute():
    run_python(PYPJRT_PRELUDE + """
from pypjrt.client import Device
from pypjrt.transfer import ShapeSpec
dev = Device(plugin, client._addressable()[0])
exe = client.compile(ADD)
with client.async_transfer([ShapeSpec(11, (4,)), ShapeSpec(11, (4,))], device=dev) as t:
    assert len(t) == 2 and t.buffer_size(0) == 16
    a = t.retrieve(0)                      # retrieved before its data arrives
    t.transfer(0, array.array("f", [1, 2]), offset=0, last=False)
    t.transfer(0, array.array("f", [3, 4]), offset=8, last=True)
    t.transfer(1, array.array("f", [10, 20, 30, 40]))
    b = t.retrieve(1)
    expect(errors.InvalidArgument, lambda: t.retrieve(1), "already retrieved")
    expect(errors.InvalidArgument, lambda: t.transfer(1, array.array("f", [1]), offset=16), "outside")
(out,) = exe(a, b)
got = array.array("f"); got.frombytes(out.to_host())
assert list(got) == [11, 22, 33, 44], got
print("ok")
""")
