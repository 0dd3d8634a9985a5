"""Destroying a PJRT_Buffer handle: the work of PJRT_Buffer_Destroy, whichever side answered the call.

Python's entry point (capi/buffer.py) does it at once; for a destroy the C
fast path answered, `fast_paths.finish_buffer_destroys` does it at the next
entry into Python. Both import it from here, below them, so that neither
needs the other.
"""
from __future__ import annotations

from pjrt_ref.capi import handles
from pjrt_ref.capi import strict
from pjrt_ref.model.buffer import Buffer


def destroy_buffer(key: int) -> None:
    """Drop the buffer handle at address `key`, the buffer's data and its external references.

    PJRT_Buffer_Destroy's work; also run for the destroys the C fast path
    answered (pjrt_ref/capi/fast_paths.py `finish_buffer_destroys`).
    Destroying a buffer whose external references are still held ends them
    (as XLA's C API does: they live in the PJRT_Buffer): strict mode logs it,
    since the pointers they guarded are then invalid.
    """
    buffer = handles.remove_address(key, Buffer, "PJRT_Buffer")
    buffer.handle = None
    if buffer.external_references and strict.ENABLED:
        strict.report(f"PJRT_Buffer 0x{key:x} destroyed with {buffer.external_references} external "
                      "reference(s) still held: the data pointers they guarded are now invalid", error=None)
    buffer.destroy()
