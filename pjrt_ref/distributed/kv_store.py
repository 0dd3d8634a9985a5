"""The key-value store a framework shares between its processes.

JAX's distributed runtime (`jax.distributed.initialize`) runs a coordination
service with a key-value store and hands it to a plugin as three callbacks
of `PJRT_Client_Create` (pjrt_c_api.h: `PJRT_KeyValueGetCallback`,
`..._TryGetCallback`, `..._PutCallback`). `pjrt_ref/capi/kv_store.py` turns
them into an object with the three methods below; everything in this
package talks to that object only, so it can be tested with a dict.

The header leaves key collisions between plugins to the caller; pjrt-ref
still keeps its keys under one prefix (`scoped`) so that they are easy to
recognise in the coordinator's logs.
"""
from __future__ import annotations

import threading
import time
from typing import Protocol

from pjrt_ref.errors import DeadlineExceeded


class KeyValueStore(Protocol):
    def get(self, key: str, timeout_seconds: float) -> bytes:
        """The value of `key`, waiting for it to be put; DeadlineExceeded after the timeout."""

    def try_get(self, key: str) -> bytes | None:
        """The value of `key` if it is there now, else None."""

    def put(self, key: str, value: bytes) -> None:
        """Set `key` (once: the store may refuse to overwrite)."""


class ScopedStore:
    """`store` with every key under `prefix` (e.g. `pjrt_ref/client0/`)."""

    def __init__(self, store: KeyValueStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def get(self, key: str, timeout_seconds: float) -> bytes:
        return self.store.get(self.prefix + key, timeout_seconds)

    def try_get(self, key: str) -> bytes | None:
        return self.store.try_get(self.prefix + key)

    def put(self, key: str, value: bytes) -> None:
        self.store.put(self.prefix + key, value)


class LocalStore:
    """A key-value store inside one process: for tests of this package, and
    for threads that stand in for processes."""

    def __init__(self) -> None:
        self._values: dict[str, bytes] = {}
        self._condition = threading.Condition()

    def get(self, key: str, timeout_seconds: float) -> bytes:
        deadline = time.monotonic() + timeout_seconds
        with self._condition:
            if not self._condition.wait_for(lambda: key in self._values,
                                            max(0.0, deadline - time.monotonic())):
                raise DeadlineExceeded(f"key-value store: no key {key!r} after {timeout_seconds:g} s")
            return self._values[key]

    def try_get(self, key: str) -> bytes | None:
        with self._condition:
            return self._values.get(key)

    def put(self, key: str, value: bytes) -> None:
        with self._condition:
            self._values[key] = bytes(value)
            self._condition.notify_all()
