"""`PJRT_Buffer`: an immutable numpy array on a device.

A buffer owns a read-only, C-contiguous numpy array. `delete()` (explicitly,
or by donation to an executable) drops the array; the handle stays valid and
answers `is_deleted` until `PJRT_Buffer_Destroy`.
"""
from __future__ import annotations

import threading

import numpy as np

from .dtypes import BufferType, from_numpy
from .errors import FailedPrecondition
from .event import Event


class Buffer:
    def __init__(self, array: np.ndarray, device, memory=None,
                 buffer_type: BufferType | None = None) -> None:
        array = np.asarray(array)
        if not array.flags.c_contiguous:     # (np.ascontiguousarray would make 0-d arrays 1-d)
            array = array.copy(order="C")
        if array.flags.writeable:
            array = array.view()             # our own read-only view; the caller's array stays writable
            array.flags.writeable = False
        self._array: np.ndarray | None = array
        self.dtype = array.dtype
        self.dims: tuple[int, ...] = tuple(int(d) for d in array.shape)
        self.buffer_type = buffer_type if buffer_type is not None else from_numpy(array.dtype)
        self.device = device
        self.memory = memory if memory is not None else device.default_memory
        self.nbytes = int(array.nbytes)
        self.ready_event = Event.ready()
        self.external_references = 0
        self.handle = None             # our PJRT_Buffer*
        self._lock = threading.Lock()

    @property
    def is_deleted(self) -> bool:
        return self._array is None

    @property
    def array(self) -> np.ndarray:
        """The contents; FailedPrecondition once deleted or donated."""
        array = self._array
        if array is None:
            raise FailedPrecondition("buffer has been deleted or donated")
        return array

    def delete(self) -> None:
        with self._lock:
            self._array = None

    def donate(self) -> np.ndarray:
        """Hand the array to an execution and mark the buffer deleted."""
        with self._lock:
            array = self.array
            self._array = None
        return array

    def __repr__(self) -> str:
        state = "deleted" if self.is_deleted else "live"
        return f"Buffer({self.buffer_type.name}{list(self.dims)}, {state})"
