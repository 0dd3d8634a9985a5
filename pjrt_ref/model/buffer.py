"""`PJRT_Buffer`: an immutable numpy array on a device.

A buffer owns a read-only, aligned numpy array, dense in the buffer's
layout (C-contiguous unless a caller asked for another layout: layouts.py). `delete()`
(explicitly, or by donation to an executable) drops the array; the handle
stays valid and answers `is_deleted` until `PJRT_Buffer_Destroy`.

External references (pjrt_c_api.h `PJRT_Buffer_IncreaseExternalReferenceCount`)
let a framework alias the data in place: JAX's `np.asarray(y)` of a buffer
that is "on CPU" is a numpy view of our memory, not a copy. While any
external reference lives, the memory stays where it is and stays allocated:
`delete()` keeps it pinned until the last reference goes, and donation leaves
such a buffer live (as XLA CPU does: it runs with a copy instead). Destroying
the handle ends its references (XLA's C API keeps them in the `PJRT_Buffer`).

Contents can also be handed on (`on_contents`): to a reader that needs them
once they are here even if the buffer is deleted meanwhile
(PJRT_Buffer_CopyRawToHostFuture), or, donating the buffer, to another
buffer that takes them over (`successor`: PJRT_Buffer_Bitcast and
PJRT_Buffer_DonateWithControlDependency; an alias buffer's fulfilment).
A buffer whose contents have not arrived yet passes them on when they do.
"""
from __future__ import annotations

import threading
import weakref
from typing import Callable

import numpy as np

from pjrt_ref.model import layouts
from pjrt_ref.model.dtypes import BufferType, from_numpy
from pjrt_ref.errors import FailedPrecondition, InvalidArgument, PjrtRefError
from pjrt_ref.limits import nbytes
from pjrt_ref.model.event import COMPLETE, Event, Promise, join


def _read_only(array: np.ndarray, minor_to_major: layouts.MinorToMajor | None = None) -> np.ndarray:
    """`array` as a buffer keeps it: read-only, aligned, dense in its layout (row-major by default)."""
    array = np.asarray(array)
    if minor_to_major is not None:
        array = layouts.stored_in(array, minor_to_major)
    else:
        flags = array.flags
        if not (flags.c_contiguous and flags.aligned):   # frameworks may view it in place
            array = array.copy(order="C")    # (np.ascontiguousarray would make 0-d arrays 1-d)
    if array.flags.writeable:
        array = array.view()             # our own read-only view; the caller's array stays writable
        array.flags.writeable = False
    return array


# Who hears that a buffer's contents went (deleted, donated, destroyed): the
# C API layer, which keeps its C fast paths' facts in step (capi/handles.py).
DELETION_LISTENERS: list[Callable[["Buffer"], None]] = []


def _announce_deletion(buffer: "Buffer") -> None:
    for listener in DELETION_LISTENERS:
        listener(buffer)


class Buffer:
    def __init__(self, array: np.ndarray, device, memory=None,
                 buffer_type: BufferType | None = None, ready_event: Event | None = None,
                 minor_to_major: layouts.MinorToMajor | None = None) -> None:
        if minor_to_major is not None and tuple(minor_to_major) != layouts.row_major(len(minor_to_major)):
            minor_to_major = layouts.checked(minor_to_major, np.ndim(array))
        else:
            minor_to_major = None
        # The layout the buffer is stored in and reports (model/layouts.py); None: row-major.
        self.minor_to_major = minor_to_major
        array = _read_only(array, minor_to_major)
        self._array: np.ndarray | None = array
        self.dtype = array.dtype
        self.dims: tuple[int, ...] = array.shape        # (a numpy shape is a tuple of ints)
        self.buffer_type = buffer_type if buffer_type is not None else from_numpy(array.dtype)
        self.device = device
        self.memory = memory if memory is not None else device.default_memory
        self.nbytes = int(array.nbytes)
        self.ready_event = ready_event if ready_event is not None else COMPLETE
        # Whether the contents are here (a pending buffer's arrive with `fulfill`).
        self._arrived = self.ready_event is COMPLETE or (self.ready_event.is_ready and self.ready_event.error is None)
        self._readers: list[Callable[[np.ndarray], None]] = []   # `on_contents` callers still waiting
        self.external_references = 0   # PJRT_Buffer_Increase- minus DecreaseExternalReferenceCount
        self._pinned: np.ndarray | None = None   # memory kept after delete for external references
        self.handle = None             # our PJRT_Buffer*
        self._lock = threading.Lock()

    @classmethod
    def pending(cls, dtype: np.dtype, dims: tuple[int, ...], device, memory=None,
                buffer_type: BufferType | None = None) -> "Buffer":
        """A buffer whose contents arrive later (`fulfill`), e.g. by async transfer."""
        return cls(np.zeros(dims, dtype), device, memory, buffer_type, ready_event=Event())

    def fulfill(self, array: np.ndarray) -> None:
        """Provide a pending buffer's contents, hand them to its waiting readers, mark it ready."""
        contents = _read_only(array.reshape(self.dims), self.minor_to_major)
        with self._lock:
            if self._array is not None:
                self._array = contents
            self._arrived = True
            readers, self._readers = self._readers, []
        for deliver in readers:
            deliver(contents)
        self.ready_event.set()

    def fail(self, error: PjrtRefError) -> None:
        """A pending buffer's contents will never come: it becomes ready with `error`."""
        self.ready_event.set(error)

    def on_contents(self, deliver: Callable[[np.ndarray], None], fail: Callable[[PjrtRefError], None],
                    donate: bool = False) -> None:
        """`deliver(contents)` once they are here (now, if they are), or `fail(error)` if they never come.

        They reach `deliver` even if the buffer is deleted meanwhile: PjRtBuffer
        keeps the memory of a pending read alive. With `donate` the buffer
        gives them up now (it is deleted, as by an execution that donates
        it); XLA refuses to donate a buffer with external references, and so
        do we. A deleted or donated buffer has nothing to give:
        FAILED_PRECONDITION.
        """
        with self._lock:
            if self._array is None:
                raise FailedPrecondition("buffer has been deleted or donated")
            if donate and self.external_references:
                raise FailedPrecondition(f"buffer has {self.external_references} external reference(s) "
                                         "(a framework views its memory): it cannot be donated")
            contents = self._array if self._arrived else None
            if contents is None:
                self._readers.append(deliver)
            if donate:
                self._array = None
        if donate:
            _announce_deletion(self)
        if contents is not None:
            deliver(contents)
        else:
            self.ready_event.on_ready(lambda error: None if error is None else fail(error))

    def successor(self, buffer_type: BufferType, dtype: np.dtype, dims: tuple[int, ...],
                  dependency: Event | None = None) -> "Buffer":
        """Donate this buffer to a new one on its memory that takes over its bytes,
        read as `dtype[dims]`, and is ready once they are here and `dependency`
        (a control dependency) has completed; an error in either becomes its error.

        The byte sizes must match (pjrt-ref keeps one byte per element of a
        sub-byte type, as everywhere). No byte is copied.
        """
        size = nbytes(dtype, dims)
        if size != self.nbytes:
            raise InvalidArgument(f"{buffer_type.name}{list(dims)} has {size} bytes, the buffer "
                                  f"({self.buffer_type.name}{list(self.dims)}) has {self.nbytes}: "
                                  "the new shape must have the same byte size")
        out = Buffer.pending(dtype, dims, self.device, self.memory, buffer_type)
        contents = Promise()
        self.on_contents(contents.set, contents.fail, donate=True)
        events = [contents.event] + ([dependency] if dependency is not None else [])
        join(events, lambda error: out.fail(error) if error is not None else
             out.fulfill(reinterpret(contents.value, dtype, dims)))
        return out

    @property
    def layout(self) -> layouts.MinorToMajor:
        """The buffer's minor_to_major (PJRT_Buffer_GetMemoryLayout)."""
        return self.minor_to_major if self.minor_to_major is not None else layouts.row_major(len(self.dims))

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
        _announce_deletion(self)    # (PJRT_Buffer_IsDeleted's C fast path reads it)

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
        with self._lock:
            self._array = None
            self.external_references = 0
            self._pinned = None
        _announce_deletion(self)

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

    def copy_raw_later(self, offset: int, size: int, destination: Promise) -> Event:
        """Bytes [offset, offset+size) of the contents (in the buffer's layout), written by
        `destination.value(bytes)` once both the contents and the destination
        are here (PJRT_Buffer_CopyRawToHostFuture). The returned event completes
        then, with the buffer's or the destination's error if either has one."""
        if offset < 0 or size < 0 or offset + size > self.nbytes:
            raise InvalidArgument(f"range [{offset}, {offset + size}) outside the buffer's {self.nbytes} bytes")
        contents, done = Promise(), Event()
        self.on_contents(contents.set, contents.fail)

        def copy(error: PjrtRefError | None) -> None:
            if error is None:
                try:
                    destination.value(raw_bytes(contents.value)[offset:offset + size])
                except PjrtRefError as failure:
                    error = failure
            done.set(error)
        join([contents.event, destination.event], copy)
        return done

    def __repr__(self) -> str:
        state = "deleted" if self.is_deleted else "live"
        return f"Buffer({self.buffer_type.name}{list(self.dims)}, {state})"


def raw_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of `array` in memory order (a buffer's layout), as uint8 (a view: no copy)."""
    return layouts.physical(array).reshape(-1).view(np.uint8)


def reinterpret(array: np.ndarray, dtype: np.dtype, dims: tuple[int, ...]) -> np.ndarray:
    """The same bytes read as `dtype[dims]` (a view; the byte counts must match)."""
    return raw_bytes(array).view(dtype).reshape(dims)


# Foreign memory must be aligned to this many bytes: what XLA's CPU client asks
# (CpuRawBuffer::ImportForeignMemory, cpu::MinAlign()) and what every pjrt-ref
# buffer, and every numpy allocation, has.
FOREIGN_ALIGNMENT = 16


class ForeignMemory:
    """Memory a caller owns, seen by numpy in place (read-only, no copy).

    `on_delete()` runs once no array uses the memory any more: the buffer
    was deleted or destroyed, and every reader that held its contents (an
    external reference's pin, a pending raw copy, a bitcast successor) is
    done. It never runs at interpreter exit: the caller still owns the memory.
    """

    def __init__(self, address: int, size: int, on_delete: Callable[[], None] | None) -> None:
        if address % FOREIGN_ALIGNMENT:
            raise InvalidArgument(f"memory at 0x{address:x} is not aligned to {FOREIGN_ALIGNMENT} bytes "
                                  "(as XLA's CPU client, pjrt-ref views only aligned memory)")
        if address == 0 and size:
            raise InvalidArgument(f"device_buffer_ptr is NULL but the shape has {size} bytes")
        self.__array_interface__ = {"data": (address, True), "shape": (size,), "typestr": "|u1", "version": 3}
        if on_delete is not None:
            weakref.finalize(self, on_delete).atexit = False

    def array(self, dtype: np.dtype, dims: tuple[int, ...]) -> np.ndarray:
        """The memory as a read-only `dtype[dims]` array whose base is this object."""
        return np.asarray(self).view(dtype).reshape(dims)
