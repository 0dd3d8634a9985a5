"""`PJRT_Buffer`: an immutable numpy array on a device.

A buffer owns a read-only, C-contiguous numpy array. `delete()` (explicitly,
or by donation to an executable) drops the array; the handle stays valid and
answers `is_deleted` until `PJRT_Buffer_Destroy`.
"""
from __future__ import annotations

import threading

import numpy as np

from . import handles
from .dtypes import BufferType, from_numpy
from .errors import FailedPrecondition
from .event import COMPLETE, Event


def _read_only(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    if not array.flags.c_contiguous:     # (np.ascontiguousarray would make 0-d arrays 1-d)
        array = array.copy(order="C")
    if array.flags.writeable:
        array = array.view()             # our own read-only view; the caller's array stays writable
        array.flags.writeable = False
    return array


class Buffer:
    def __init__(self, array: np.ndarray, device, memory=None,
                 buffer_type: BufferType | None = None, ready_event: Event | None = None) -> None:
        array = _read_only(array)
        self._array: np.ndarray | None = array
        self.dtype = array.dtype
        self.dims: tuple[int, ...] = array.shape        # (a numpy shape is a tuple of ints)
        self.buffer_type = buffer_type if buffer_type is not None else from_numpy(array.dtype)
        self.device = device
        self.memory = memory if memory is not None else device.default_memory
        self.nbytes = int(array.nbytes)
        self.ready_event = ready_event if ready_event is not None else COMPLETE
        self.external_references = 0
        self.handle = None             # our PJRT_Buffer*
        self._lock = threading.Lock()

    @classmethod
    def pending(cls, dtype: np.dtype, dims: tuple[int, ...], device, memory=None) -> "Buffer":
        """A buffer whose contents arrive later (`fulfill`), e.g. by async transfer."""
        return cls(np.zeros(dims, dtype), device, memory, ready_event=Event())

    def fulfill(self, array: np.ndarray) -> None:
        """Provide a pending buffer's contents and mark it ready."""
        with self._lock:
            if self._array is not None:
                self._array = _read_only(array.reshape(self.dims))
        self.ready_event.set()

    @property
    def is_deleted(self) -> bool:
        return self._array is None

    @property
    def array(self) -> np.ndarray:
        """The contents (waiting until ready); FailedPrecondition once deleted or donated."""
        event = self.ready_event
        if event is not COMPLETE:        # contents that arrive later (an async transfer): wait
            error = event.wait()
            if error is not None:
                raise error
        array = self._array
        if array is None:
            raise FailedPrecondition("buffer has been deleted or donated")
        return array

    def delete(self) -> None:
        with self._lock:
            self._array = None
        handles.facts_changed(self)    # PJRT_Buffer_IsDeleted's C fast path reads it

    def __repr__(self) -> str:
        state = "deleted" if self.is_deleted else "live"
        return f"Buffer({self.buffer_type.name}{list(self.dims)}, {state})"
