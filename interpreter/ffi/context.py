"""What an execution tells the FFI handlers it calls.

XLA_FFI_ExecutionContext answers a handler's questions about the run it is
part of: the device ordinal (XLA_FFI_DeviceOrdinal_Get), the run id
(XLA_FFI_RunId_Get) and the user data the host attached to the execution
(XLA_FFI_ExecutionContext_Get; the PJRT FFI extension's user_data_add on a
PJRT_ExecuteContext). The layer that executes (pjrt_ref/model) knows them
and attaches them here for the duration of a run; a program run on its own
has device 0, run id 0 and no user data.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ExecutionInfo:
    device_ordinal: int = 0
    run_id: int = 0
    user_data: tuple = field(default_factory=tuple)   # (type_id, address) pairs


_CURRENT: contextvars.ContextVar = contextvars.ContextVar("pjrt_ref_ffi_execution",
                                                          default=ExecutionInfo())


def current() -> ExecutionInfo:
    return _CURRENT.get()


@contextlib.contextmanager
def attach(info: ExecutionInfo):
    """Serve FFI calls made inside the `with` block with `info`."""
    reset = _CURRENT.set(info)
    try:
        yield info
    finally:
        _CURRENT.reset(reset)
