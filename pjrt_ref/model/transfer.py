"""`PJRT_AsyncHostToDeviceTransferManager`: buffers allocated first, filled in chunks.

The caller gets pending buffers (`RetrieveBuffer`) at once and streams bytes
into each (`TransferData`, any order of chunks); the chunk marked last makes
the buffer ready. Or it sends a buffer's whole contents at once, as a host
literal (`TransferLiteral`). An execution that reads a pending buffer waits
for it.
"""
from __future__ import annotations

import threading

import numpy as np

from pjrt_ref.model.buffer import Buffer
from pjrt_ref.errors import InvalidArgument, PjrtRefError


class TransferManager:
    def __init__(self, client, specs: list[tuple[np.dtype, tuple[int, ...]]], device, memory) -> None:
        self.client = client
        self.device = device
        self.memory = memory
        self.buffers = [Buffer.pending(dtype, dims, device, memory) for dtype, dims in specs]
        self._staging = [bytearray(b.nbytes) for b in self.buffers]
        self._retrieved: set[int] = set()
        self._completed: set[int] = set()      # buffers whose last bytes came (fulfilled or about to be)
        self.metadata: dict = {}
        self._lock = threading.Lock()
        self.handle = None

    def _index(self, index: int) -> int:
        if not 0 <= index < len(self.buffers):
            raise InvalidArgument(f"buffer index {index} out of range (the manager has {len(self.buffers)})")
        return index

    def buffer_size(self, index: int) -> int:
        return self.buffers[self._index(index)].nbytes

    def transfer(self, index: int, data: bytes, offset: int, is_last: bool) -> None:
        """Copy one chunk into buffer `index`; the last chunk makes the buffer ready."""
        buffer = self.buffers[self._index(index)]
        staging = self._staging[index]
        if offset < 0 or offset + len(data) > len(staging):
            raise InvalidArgument(
                f"chunk [{offset}, {offset + len(data)}) outside buffer {index}'s {len(staging)} bytes")
        with self._lock:
            self._check_open(index)
            staging[offset:offset + len(data)] = data
            if is_last:
                self._completed.add(index)
        if is_last:
            buffer.fulfill(np.frombuffer(bytes(staging), buffer.dtype).reshape(buffer.dims))

    def check_literal(self, index: int, dtype: np.dtype, dims: tuple[int, ...]) -> None:
        """INVALID_ARGUMENT unless a `dtype[dims]` literal is exactly buffer `index`'s shape."""
        buffer = self.buffers[self._index(index)]
        if dtype != buffer.dtype or tuple(dims) != buffer.dims:
            raise InvalidArgument(f"literal {dtype}{list(dims)} does not match buffer {index}, "
                                  f"{buffer.dtype}{list(buffer.dims)}")

    def transfer_literal(self, index: int, array: np.ndarray) -> None:
        """Buffer `index`'s whole contents at once (a host literal of its exact shape): it is then ready."""
        self.check_literal(index, array.dtype, array.shape)
        buffer = self.buffers[index]
        with self._lock:
            self._check_open(index)
            self._completed.add(index)
        buffer.fulfill(array)

    def _check_open(self, index: int) -> None:
        """(Under the lock.) INVALID_ARGUMENT once buffer `index` got its last bytes or an error."""
        if index in self._completed or self.buffers[index].ready_event.is_ready:
            raise InvalidArgument(f"buffer {index} was already completed")

    def retrieve(self, index: int) -> Buffer:
        """Hand out buffer `index` (once: the caller then owns it)."""
        with self._lock:
            if self._index(index) in self._retrieved:
                raise InvalidArgument(f"buffer {index} was already retrieved")
            self._retrieved.add(index)
        return self.buffers[index]

    def set_error(self, index: int, error: PjrtRefError) -> None:
        self.buffers[self._index(index)].ready_event.set(error)
