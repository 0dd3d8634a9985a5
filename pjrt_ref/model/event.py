"""`PJRT_Event`: completion of asynchronous work, with an optional error.

pjrt-ref computes synchronously, so almost every event is born complete.
Events made by `PJRT_Event_Create` stay pending until `PJRT_Event_Set`.
Callbacks registered with `on_ready` run once, on the thread that completes
the event, or immediately if it is already complete.

A complete event never changes, so all work born complete without error
shares one: `COMPLETE` (buffers' ready events, and what a C-only ready event
handle stands for; see pjrt_ref/capi/fast_paths.py).

A `Promise` is an event that also carries a value (a buffer's contents, a
destination the caller gives later); `join` waits for several events, failing
at the first error: together they express "copy once both the data and the
destination are here" (PJRT_Buffer_CopyRawToHostFuture) or "ready once the
contents and the control dependency are" (PJRT_Buffer_DonateWithControlDependency).
"""
from __future__ import annotations

import threading
from typing import Callable

from pjrt_ref.errors import PjrtRefError


class Event:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._callbacks: list[Callable[[PjrtRefError | None], None]] = []
        self.error: PjrtRefError | None = None

    @classmethod
    def ready(cls, error: PjrtRefError | None = None) -> "Event":
        event = cls()
        event.set(error)
        return event

    @property
    def is_ready(self) -> bool:
        return self._done.is_set()

    def set(self, error: PjrtRefError | None = None) -> None:
        """Complete the event (once; later calls are ignored) and run callbacks."""
        with self._lock:
            if self._done.is_set():
                return
            self.error = error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(error)

    def on_ready(self, callback: Callable[[PjrtRefError | None], None]) -> None:
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self.error)

    def wait(self, timeout: float | None = None) -> PjrtRefError | None:
        if not self._done.is_set():
            self._done.wait(timeout)
        return self.error


COMPLETE = Event.ready()


class Promise:
    """A value that arrives later, once: `set(value)` or `fail(error)`; `event` completes then."""

    def __init__(self) -> None:
        self.event = Event()
        self.value = None

    def set(self, value=None) -> None:
        if not self.event.is_ready:
            self.value = value
        self.event.set()

    def fail(self, error: PjrtRefError) -> None:
        self.event.set(error)


def join(events: list[Event], done: Callable[[PjrtRefError | None], None]) -> None:
    """Call `done(None)` once every event has completed without error, or
    `done(error)` as soon as one fails (once either way; at once if they are done)."""
    lock = threading.Lock()
    state = {"left": len(events), "fired": False}

    def one(error: PjrtRefError | None) -> None:
        with lock:
            if state["fired"]:
                return
            state["left"] -= 1
            if error is None and state["left"] > 0:
                return
            state["fired"] = True
        done(error)

    if not events:
        done(None)
    for event in events:
        event.on_ready(one)
