"""One debugging file per process of a multi-process job.

Every process of a multi-controller job sees the same PJRT_REF_TRACE and
PJRT_REF_PROFILE settings; writing one file from all of them would mix
their lines. Once a client knows it is process i of a job
(`pjrt_ref.model.client.make_client`), `per_process("trace.json")` is
`trace.process1.json`, and `pjrt-ref profile` merges such files into one
Chrome trace with a row per process and device
(`pjrt_ref.debug.profile.merge`). It sits with the settings, below every
layer: the interpreter names its trace file with it, the client sets the
index, the debug package names its profile.
"""
from __future__ import annotations

import os

_PROCESS_INDEX: int | None = None


def set_process_index(index: int | None) -> None:
    """This process's index in its job (None: a single-process run)."""
    global _PROCESS_INDEX
    _PROCESS_INDEX = index


def process_index() -> int | None:
    return _PROCESS_INDEX


def per_process(path: str) -> str:
    """`path` with `.process<i>` before its extension in process i of a job; else `path`."""
    if _PROCESS_INDEX is None:
        return path
    root, extension = os.path.splitext(path)
    return f"{root}.process{_PROCESS_INDEX}{extension}"
