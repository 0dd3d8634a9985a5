"""Tokens and side effects: after_all, create_token, infeed, outfeed, send, recv.

Spec sections "after_all", "infeed", "outfeed", "send", "recv"
(docs/spec.md); `create_token` is the deprecated, argument-less form of
`after_all`.

Tokens only order side effects; the interpreter runs ops in program order,
so every token is the same value, `types.TOKEN`.

infeed/outfeed/send/recv talk to a host. A standalone interpreter has none,
so they fail with UNAVAILABLE unless a host has attached a `HostChannel`:
for the current thread or task with `attach_host_channel`, or for every
thread with `set_default_host_channel` (a future PJRT host fills this in;
nothing in pjrt-ref does yet). Under `interpreter.run_parallel` the process
grid is the processes' host channel (see `process_grid`).
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Protocol

import numpy as np

from pjrt_ref.errors import InvalidArgument, PjrtRefError, Unavailable
from pjrt_ref.interpreter.registry import register
from pjrt_ref.interpreter.types import TOKEN, TensorType
from pjrt_ref.interpreter.ops.control import as_results


class HostChannel(Protocol):
    """What a host provides to serve the ops that leave the device.

    `result_types` are `types.TensorType`s; every method returns numpy
    arrays of exactly those types (or nothing).
    """

    def infeed(self, config: str, result_types: tuple) -> list: ...

    def outfeed(self, config: str, values: list) -> None: ...

    def send(self, channel_id: int, channel_type: int, is_host_transfer: bool,
             values: list) -> None: ...

    def recv(self, channel_id: int, channel_type: int, is_host_transfer: bool,
             result_types: tuple) -> list: ...


_HOST_CHANNEL: contextvars.ContextVar = contextvars.ContextVar("pjrt_ref_host_channel",
                                                              default=None)


_DEFAULT_HOST_CHANNEL: HostChannel | None = None


def set_default_host_channel(channel: HostChannel | None) -> None:
    """Serve infeed/outfeed/send/recv with `channel` in every thread that has
    not attached its own (None detaches)."""
    global _DEFAULT_HOST_CHANNEL
    _DEFAULT_HOST_CHANNEL = channel


@contextlib.contextmanager
def attach_host_channel(channel: HostChannel):
    """Serve infeed/outfeed/send/recv with `channel` inside the `with` block."""
    reset = _HOST_CHANNEL.set(channel)
    try:
        yield channel
    finally:
        _HOST_CHANNEL.reset(reset)


def host_channel(op) -> HostChannel:
    """The attached host channel, or an UNAVAILABLE error naming `op`."""
    channel = _HOST_CHANNEL.get() or _DEFAULT_HOST_CHANNEL
    if channel is None:
        raise op.error("no host channel is attached: a standalone interpreter has no "
                       "infeed/outfeed queue or send/recv peer (under PJRT, host send/recv are "
                       "served by PJRT_ExecuteOptions' send/recv callbacks, and none were given)",
                       cls=Unavailable)
    return channel


@register("stablehlo.after_all")
def after_all(op, *inputs):
    """Spec "after_all": a token that depends on `inputs`; does nothing."""
    return TOKEN


@register("stablehlo.create_token")
def create_token(op):
    """Deprecated `create_token`: `after_all` with no inputs."""
    return TOKEN


def _payload_types(op) -> tuple:
    """The tensor results before the trailing token."""
    return op.result_types[:-1]


def _checked_payload(op, values) -> list:
    """The host's `values` as arrays of the op's payload result types."""
    expected = _payload_types(op)
    values = list(values)
    if len(values) != len(expected):
        raise op.error(f"host channel returned {len(values)} value(s), "
                       f"expected {len(expected)}", cls=InvalidArgument)
    checked = []
    for value, ttype in zip(values, expected):
        array = np.asarray(value)
        if isinstance(ttype, TensorType) and (array.dtype != ttype.dtype
                                              or array.shape != tuple(ttype.shape)):
            raise op.error(f"host channel returned {array.dtype}{list(array.shape)}, "
                           f"expected {ttype}", cls=InvalidArgument)
        checked.append(array)
    return checked


def _channel(op) -> tuple[int, int]:
    handle = op.attrs.get("channel_handle")
    return (handle.handle, handle.channel_type) if handle is not None else (0, 0)


@register("stablehlo.infeed")
def infeed(op, token):
    """Spec "infeed": read the payload from the host's infeed, then a token."""
    values = host_channel(op).infeed(op.attrs.get("infeed_config", ""), _payload_types(op))
    return as_results(op, [*_checked_payload(op, values), TOKEN])


@register("stablehlo.outfeed")
def outfeed(op, *inputs_and_token):
    """Spec "outfeed": write `inputs` to the host's outfeed; return a token."""
    host_channel(op).outfeed(op.attrs.get("outfeed_config", ""), list(inputs_and_token[:-1]))
    return TOKEN


@contextlib.contextmanager
def _located(op):
    """A host channel's errors (e.g. a failing host callback) name `op` and its location."""
    try:
        yield
    except PjrtRefError as error:
        if error.op is not None:
            raise
        try:
            located = op.error(str(error), cls=type(error))
        except TypeError:          # a subclass with its own constructor: keep it as it is
            raise error from None
        located.code = error.code
        raise located from error


@register("stablehlo.send")
def send(op, *inputs_and_token):
    """Spec "send": send `inputs` on the channel `channel_id`; return a token."""
    channel_id, channel_type = _channel(op)
    with _located(op):
        host_channel(op).send(channel_id, channel_type, bool(op.attrs.get("is_host_transfer")),
                              list(inputs_and_token[:-1]))
    return TOKEN


@register("stablehlo.recv")
def recv(op, token):
    """Spec "recv": receive the payload from channel `channel_id`, then a token."""
    channel_id, channel_type = _channel(op)
    with _located(op):
        values = host_channel(op).recv(channel_id, channel_type,
                                       bool(op.attrs.get("is_host_transfer")), _payload_types(op))
    return as_results(op, [*_checked_payload(op, values), TOKEN])
