"""`PJRT_Buffer`: an immutable numpy array on a device.

A buffer owns a read-only, C-contiguous, aligned numpy array. `delete()`
(explicitly, or by donation to an executable) drops the array; the handle
stays valid and answers `is_deleted` until `PJRT_Buffer_Destroy`.

External references (pjrt_c_api.h `PJRT_Buffer_IncreaseExternalReferenceCount`)
let a framework alias the data in place: JAX's `np.asarray(y)` of a buffer
that is "on CPU" is a numpy view of our memory, not a copy. While any
external reference lives, the memory stays where it is and stays allocated:
`delete()` keeps it pinned until the last reference goes, and donation leaves
such a buffer live (as XLA CPU does: it runs with a copy instead). Destroying
the handle ends its references (XLA's C API keeps them in the `PJRT_Buffer`).
"""
from __future__ import annotations

import threading

import numpy as np

from . import handles
from .dtypes import BufferType, from_numpy
from ..errors import FailedPrecondition, InvalidArgument
from .event import COMPLETE, Event


def _read_only(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    if not (array.flags.c_contiguous and array.flags.aligned):   # frameworks may view it in place
        array = array.copy(order="C")    # (np.ascontiguousarray would make 0-d arrays 1-d)
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
        self.external_references = 0   # PJRT_Buffer_Increase- minus DecreaseExternalReferenceCount
        self._pinned: np.ndarray | None = None   # memory kept after delete for external references
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
        """Drop the contents. Memory that external references point to stays pinned until they go."""
        with self._lock:
            if self.external_references and self._array is not None:
                self._pinned = self._array
            self._array = None
        handles.facts_changed(self)    # PJRT_Buffer_IsDeleted's C fast path reads it

    def donate(self) -> bool:
        """Give the contents up to an execution (delete), unless external references hold them.

        XLA CPU refuses the donation hold of a buffer with external references
        and runs with a usage hold instead (a copy): the buffer stays live and
        the caller's views stay valid. Returns whether the buffer was given up.
        (A reference taken between the check and the delete still pins the memory.)
        """
        if self.external_references:
            return False
        self.delete()
        return True

    def destroy(self) -> None:
        """PJRT_Buffer_Destroy: the contents and any external references' hold on them go."""
        self.delete()
        with self._lock:
            self.external_references = 0
            self._pinned = None

    def acquire_external_reference(self) -> None:
        """PJRT_Buffer_IncreaseExternalReferenceCount: keep the data in place and alive.

        pjrt_c_api.h: a positive count means the data is shared with another
        framework (NumPy, DLPack) and must not be deleted or moved. A deleted
        or donated buffer has no data to share: an error (XLA answers
        INVALID_ARGUMENT "Buffer has been deleted or donated."; pjrt-ref
        FAILED_PRECONDITION, as for every read of a deleted buffer's data).
        """
        with self._lock:
            if self._array is None:
                raise FailedPrecondition("buffer has been deleted or donated: no data to reference")
            self.external_references += 1

    def release_external_reference(self) -> None:
        """PJRT_Buffer_DecreaseExternalReferenceCount: one reference ends; at zero, memory
        pinned by a delete is let go. Below zero is INVALID_ARGUMENT (pjrt_c_api.h)."""
        with self._lock:
            if self.external_references <= 0:
                raise InvalidArgument("external reference count is already 0: "
                                      "no PJRT_Buffer_IncreaseExternalReferenceCount to match")
            self.external_references -= 1
            if self.external_references == 0:
                self._pinned = None

    def __repr__(self) -> str:
        state = "deleted" if self.is_deleted else "live"
        return f"Buffer({self.buffer_type.name}{list(self.dims)}, {state})"
