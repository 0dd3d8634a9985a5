"""How the reference and the other backend's worker talk: messages on pipes.

A message is a JSON header followed by the raw bytes of its arrays. The
header lists each array's dtype name and shape; nothing is pickled, so a
confused or hostile worker can only send wrong numbers, never code.

    8 bytes   little-endian length of the JSON header
    N bytes   the header (UTF-8 JSON), with "arrays": [[dtype, shape], ...]
    for each array: its bytes, C order, exactly dtype.itemsize * prod(shape)
"""
from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import BinaryIO

import ml_dtypes
import numpy as np

_LENGTH = struct.Struct("<Q")


def dtype_from_name(name: str) -> np.dtype:
    """numpy's dtype for `name`, including ml_dtypes' (bfloat16, float8_*, int4...)."""
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(getattr(ml_dtypes, name))


def encode(header: dict, arrays=()) -> bytes:
    """The bytes of one message."""
    arrays = [np.asarray(a, order="C") for a in arrays]    # (ascontiguousarray makes 0-d arrays 1-d)
    header = dict(header, arrays=[[a.dtype.name, list(a.shape)] for a in arrays])
    text = json.dumps(header).encode()
    return b"".join([_LENGTH.pack(len(text)), text] + [a.tobytes() for a in arrays])


def write_message(stream: BinaryIO, header: dict, arrays=()) -> None:
    stream.write(encode(header, arrays))
    stream.flush()


class Reader:
    """Reads messages from a file descriptor, waiting at most `timeout`
    seconds for each (None: forever). EOFError when the other end is gone."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read_exact(self, size: int, deadline: float | None) -> bytes:
        chunks, remaining = [], size
        while remaining:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(self.fd, min(remaining, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def read_message(self, timeout: float | None = None) -> tuple[dict, list[np.ndarray]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        (length,) = _LENGTH.unpack(self.read_exact(_LENGTH.size, deadline))
        header = json.loads(self.read_exact(length, deadline))
        arrays = []
        for dtype_name, shape in header.pop("arrays"):
            dtype = dtype_from_name(dtype_name)
            size = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            data = self.read_exact(size, deadline)
            arrays.append(np.frombuffer(data, dtype=dtype).reshape(shape).copy())
        return header, arrays
