"""Host callbacks: `stablehlo.send` / `stablehlo.recv` served by the framework.

How JAX calls Python from a running program depends on the backend
(jax/_src/callback.py, `emit_python_callback`):

* cpu and gpu: a `stablehlo.custom_call @xla_ffi_python_cpu_callback` whose
  `index` attribute picks a Python callable that jaxlib hands to XLA's FFI
  through an in-process `ExecuteContext`. A PJRT C-API plugin never sees
  those callables: jaxlib forwards them only to its own cpu/gpu clients.
* tpu, which is a PJRT C-API plugin like us: the operands go out with
  `stablehlo.send` and the results come back with `stablehlo.recv`, both
  `is_host_transfer = true` on a channel of their own. At execute time
  jaxlib passes, in `PJRT_ExecuteOptions`, one `PJRT_SendCallbackInfo` per
  send channel and one `PJRT_RecvCallbackInfo` per recv channel
  (pjrt_c_api.h; xla/pjrt/c_api_client/pjrt_c_api_client.cc converts them,
  xla/pjrt/host_callback.cc runs the Python callable once the last operand
  of a call has arrived).

pjrt-ref uses the second mechanism: it is the one the PJRT C API defines, so
it works from any host (a C host passes its own callbacks), needs no
registry of Python objects in the plugin, and jaxlib keeps the callables
alive for as long as an execution that may call them runs. `frameworks/jax/plugin.py`
makes JAX lower its callbacks that way for platform "pjrt_ref".

This module is the runtime half, free of C: `HostTransfers` is the
interpreter's `HostChannel` for one execution on one device
(`DeviceHostTransfers` picks each device's own on several). Each send
hands the operand's bytes (dense, row-major: what
`use_major_to_minor_data_layout_for_callbacks` asks for) to the channel's
sender; each recv gives the channel's receiver a `CopyToDeviceStream` to fill
and turns the bytes into the result array. The interpreter runs ops in
program order, so callbacks run in program order, inside the step that
reaches them: a print before a long loop appears before the loop runs.
`pjrt_ref/capi/host_callbacks.py` builds senders and receivers from the C
function pointers and implements the PJRT_CopyToDeviceStream_* entry points.
"""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from pjrt_ref.errors import FailedPrecondition, InvalidArgument, Unimplemented
from pjrt_ref.interpreter.process_grid import current_process

# ChannelHandle types (StableHLO spec "send"/"recv": channel_type).
DEVICE_TO_HOST = 2
HOST_TO_DEVICE = 3

Sender = Callable[[bytes], None]


class CopyToDeviceStream:
    """`PJRT_CopyToDeviceStream`: the bytes a recv callback pushes for one recv.

    The plugin creates it with the size the recv expects; the framework adds
    chunks (PJRT_CopyToDeviceStream_AddChunk) and destroys it. The granule
    is one byte: any chunk size is allowed.
    """

    granule_bytes = 1

    def __init__(self, total_bytes: int, channel_id: int) -> None:
        self.total_bytes = int(total_bytes)
        self.channel_id = channel_id
        self._data = bytearray()
        self._lock = threading.Lock()

    @property
    def current_bytes(self) -> int:
        return len(self._data)

    def add_chunk(self, data: bytes) -> None:
        """Append `data`; past `total_bytes` is an error (pjrt_c_api.h AddChunk)."""
        with self._lock:
            if len(self._data) + len(data) > self.total_bytes:
                raise InvalidArgument(
                    f"PJRT_CopyToDeviceStream_AddChunk: recv channel {self.channel_id} expects "
                    f"{self.total_bytes} bytes; {len(self._data)} arrived, a chunk of "
                    f"{len(data)} more does not fit")
            self._data += data

    def contents(self) -> bytes:
        with self._lock:
            return bytes(self._data)


Receiver = Callable[[CopyToDeviceStream], None]


class HostTransfers:
    """The interpreter's host channel for one execution: send/recv through callbacks.

    `senders` and `receivers` map a channel id to the framework's callback
    for it. infeed/outfeed are not host callbacks and stay unavailable.
    """

    def __init__(self, senders: dict[int, Sender], receivers: dict[int, Receiver]) -> None:
        self.senders = senders
        self.receivers = receivers

    def send(self, channel_id: int, channel_type: int, is_host_transfer: bool, values: list) -> None:
        """One `stablehlo.send`: each operand's bytes to the channel's send callback."""
        _require_host_transfer("stablehlo.send", channel_id, is_host_transfer)
        sender = self.senders.get(channel_id)
        if sender is None:
            raise FailedPrecondition(_missing("send", channel_id, self.senders))
        for value in values:
            sender(np.ascontiguousarray(value).tobytes())

    def recv(self, channel_id: int, channel_type: int, is_host_transfer: bool,
             result_types: tuple) -> list:
        """One `stablehlo.recv`: the channel's recv callback fills a stream per result."""
        _require_host_transfer("stablehlo.recv", channel_id, is_host_transfer)
        receiver = self.receivers.get(channel_id)
        if receiver is None:
            raise FailedPrecondition(_missing("recv", channel_id, self.receivers))
        return [_receive_one(receiver, channel_id, ttype) for ttype in result_types]

    def infeed(self, config: str, result_types: tuple) -> list:
        raise Unimplemented("stablehlo.infeed: PJRT host callbacks serve send/recv only")

    def outfeed(self, config: str, values: list) -> None:
        raise Unimplemented("stablehlo.outfeed: PJRT host callbacks serve send/recv only")


class DeviceHostTransfers:
    """The host channel of one execution over several devices.

    Each device has its own send/recv callbacks (`PJRT_ExecuteOptions`
    gives one list per device, and jaxlib keeps one callback state per
    device that must be called by that device alone, in order). A device's
    ops run as the grid process with its logical id (`process_grid`:
    one thread per device, also inside a partitioned program's manual
    regions), so each send/recv goes to the callbacks of the process that
    runs it. Outside any grid (the global part of a partitioned program,
    where JAX pins callbacks to device 0) that is process (0, 0).
    """

    def __init__(self, by_process: dict[tuple[int, int], HostTransfers]) -> None:
        self.by_process = by_process

    def _current(self) -> HostTransfers:
        process_id = tuple(current_process().id)
        transfers = self.by_process.get(process_id)
        if transfers is None:
            raise FailedPrecondition(f"no host callbacks for the device with logical id {process_id}")
        return transfers

    def send(self, channel_id: int, channel_type: int, is_host_transfer: bool, values: list) -> None:
        self._current().send(channel_id, channel_type, is_host_transfer, values)

    def recv(self, channel_id: int, channel_type: int, is_host_transfer: bool,
             result_types: tuple) -> list:
        return self._current().recv(channel_id, channel_type, is_host_transfer, result_types)

    def infeed(self, config: str, result_types: tuple) -> list:
        return self._current().infeed(config, result_types)

    def outfeed(self, config: str, values: list) -> None:
        self._current().outfeed(config, values)


def _require_host_transfer(op: str, channel_id: int, is_host_transfer: bool) -> None:
    if not is_host_transfer:
        raise Unimplemented(f"{op} on channel {channel_id} has is_host_transfer = false: "
                            "device-to-device channels are not host callbacks")


def _missing(kind: str, channel_id: int, known: dict) -> str:
    channels = sorted(known) or "none"
    return (f"stablehlo.{kind} on host channel {channel_id}: PJRT_LoadedExecutable_Execute "
            f"was given no {kind} callback for it (PJRT_ExecuteOptions.{kind}_callbacks "
            f"has channels {channels}). A program with host callbacks runs only where the "
            "host supplies them, e.g. the JAX process that compiled it.")


def _receive_one(receiver: Receiver, channel_id: int, ttype) -> np.ndarray:
    """Run the recv callback for one result of type `ttype` and read its bytes."""
    dtype = np.dtype(ttype.dtype)
    shape = tuple(int(d) for d in ttype.shape)
    stream = CopyToDeviceStream(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, channel_id)
    receiver(stream)
    data = stream.contents()
    if len(data) != stream.total_bytes:
        raise InvalidArgument(f"stablehlo.recv on host channel {channel_id}: the recv callback "
                              f"delivered {len(data)} bytes, {ttype} needs {stream.total_bytes}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
