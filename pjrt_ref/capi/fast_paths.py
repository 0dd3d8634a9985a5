"""Feeding the C fast paths (capi_shim/fast_paths.c): facts about handles, and C-only ready events.

Per jitted call, JAX asks a dozen questions whose answers are fixed when a
handle is made: an executable's replica/partition/output counts, a buffer's
device and memory (and that it is on CPU: every buffer is), a memory's
kind, whether a just-born event is ready.
Entering Python for each costs microseconds, so the shim answers them in C
from a table that this module fills:

- `CFacts.added` (called by `handles.add`) records the facts of an
  Executable, Buffer or Memory under its handle's address; `removed`
  (`handles.remove`) forgets them before Python does, so C never knows a
  handle Python has dropped; `buffer_deleted` (`Buffer.delete`) updates the
  one fact that changes.
- `new_ready_event` makes a C-only `PJRT_Event*` for work already complete
  without error; the Event_* fast paths answer for it. Python's own lookups
  (`handles.get`) see such a handle as the shared `pjrt_ref.model.event.COMPLETE`,
  so every Python entry point still works on it (with the fast paths off,
  for instance).
- `PJRT_Buffer_Destroy` is answered in C: the handle leaves the C table at
  once and is queued; `finish_buffer_destroys`, run at the start of every
  Python entry point (and by `handles.count`), drops Python's entry and the
  buffer's data as PJRT_Buffer_Destroy does in Python (buffer_destroy.py).
  So no Python code ever sees a destroyed handle as live,
  and a later use of it is the usual "not a live handle" error.
- `read_plain_execute` reads PJRT_LoadedExecutable_Execute's Args in one C
  call when the call is plain (one argument list, nothing chosen or
  attached); Python still runs the execution (capi/executable.py
  `_execute_plain`), and reads any other call's Args itself.

The Python entry points remain the reference for what each call means;
tests/capi/test_capi_fast_paths.py checks the C answers against them.

Fast paths are off, so that every call enters Python, when PJRT_REF_LOG_API
(the API log must see each call) or PJRT_REF_STRICT (strict mode checks
each call) is set, or with PJRT_REF_FAST_PATHS=0.
"""
from __future__ import annotations

from typing import Any

from pjrt_ref.capi import handles
from pjrt_ref import settings
from pjrt_ref.capi import strict
from pjrt_ref.model.buffer import Buffer
from pjrt_ref.errors import InvalidArgument, PjrtRefError
from pjrt_ref.model.event import COMPLETE, Event
from pjrt_ref.model.executable import Executable
from pjrt_ref.model.memory import Memory
from pjrt_ref.capi.buffer_destroy import destroy_buffer
from pjrt_ref.capi.cdata import owned_text

ffi: Any = None
lib: Any = None
enabled = False      # mirrors the C switch; read by `new_ready_event`


def wanted() -> bool:
    """Whether this process should use the fast paths (see the module docstring)."""
    return (settings.get("PJRT_REF_FAST_PATHS") and not settings.get("PJRT_REF_LOG_API")
            and not strict.ENABLED)


def bind(shim_ffi, shim_lib) -> None:
    """Called by `_boundary.bind`: mirror handle facts into C from now on; switch on if wanted."""
    global ffi, lib
    ffi, lib = shim_ffi, shim_lib
    handles.c_facts = CFacts()
    set_enabled(wanted())


def set_enabled(on: bool) -> None:
    """Switch the C fast paths on or off (tests compare both; the facts are kept either way)."""
    global enabled
    enabled = bool(on)
    lib.pjrt_ref_fast_set_enabled(int(enabled))


def new_ready_event():
    """A C-only `PJRT_Event*`, complete without error; None when the fast paths are off."""
    if not enabled:
        return None
    event = lib.pjrt_ref_ready_event_new()
    return None if event == ffi.NULL else event


def read_plain_execute(raw) -> Any:
    """PJRT_LoadedExecutable_Execute's Args, read in C when the call is plain
    (one argument list, no execute_device, no execute context, every array
    present: capi_shim/fast_paths.c `pjrt_ref_read_plain_execute`); None otherwise,
    and Python reads the struct itself. A fresh struct per call: a host
    callback may execute again on this thread before the caller's is done."""
    call = ffi.new("pjrt_ref_plain_execute*")
    return call if lib.pjrt_ref_read_plain_execute(raw, call) else None


def argument_keys(call) -> list[int]:
    """The argument handles' addresses of a plain execution (`read_plain_execute`)."""
    return ffi.unpack(call.arguments, call.num_args)


def finish_buffer_destroys() -> None:
    """Complete the PJRT_Buffer_Destroy calls the C fast path answered (see the module docstring)."""
    if lib is None or not lib.pjrt_ref_destroyed_pending():
        return
    while True:
        key = lib.pjrt_ref_take_destroyed()
        if not key:
            return
        try:
            destroy_buffer(key)
        except InvalidArgument:    # the caller raced two destroys of one handle: already gone
            pass


class CFacts:
    """The hooks `pjrt_ref.capi.handles` calls to keep the C table in step with its own."""

    def settle(self) -> None:
        """Before counting or listing handles: finish the destroys C answered."""
        finish_buffer_destroys()

    def added(self, key: int, obj: Any) -> None:
        record = _RECORDERS.get(type(obj))
        if record is not None:
            try:
                record(key, obj)
            except PjrtRefError:    # a query Python answers with an error (bad replica count): leave it to Python
                pass

    def removed(self, key: int) -> None:
        lib.pjrt_ref_fact_forget(key)

    def buffer_deleted(self, key: int) -> None:
        lib.pjrt_ref_fact_buffer_deleted(key)

    def c_only(self, key: int) -> Event | None:
        """The object a C-only handle stands for (a ready event: COMPLETE), or None."""
        return COMPLETE if lib.pjrt_ref_is_ready_event(key) else None

    def destroy_c_only(self, key: int) -> bool:
        return bool(lib.pjrt_ref_ready_event_destroy(key))

    def c_only_count(self) -> int:
        return int(lib.pjrt_ref_ready_event_count())


def _record_executable(key: int, exe: Executable) -> None:
    lib.pjrt_ref_fact_executable(key, exe.num_replicas, exe.num_partitions, exe.num_outputs)


def _record_buffer(key: int, buffer: Buffer) -> None:
    device, memory = buffer.device.handle, buffer.memory.handle
    if device is None or memory is None:     # objects made outside the C API: nothing to answer
        return
    event = buffer.ready_event
    born_ready = event is COMPLETE or (event.is_ready and event.error is None)
    lib.pjrt_ref_fact_buffer(key, device, memory, buffer.is_deleted, born_ready)


def _record_memory(key: int, memory: Memory) -> None:
    kind, size = owned_text(memory, "kind", memory.kind)   # the pointer PJRT_Memory_Kind hands out
    lib.pjrt_ref_fact_memory(key, kind, size)


_RECORDERS = {Executable: _record_executable, Buffer: _record_buffer, Memory: _record_memory}
