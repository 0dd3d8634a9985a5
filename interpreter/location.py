"""Readable MLIR locations.

JAX attaches the user's source position to each op, wrapped in name and
call-site locations: `loc("jit(f)/log"("/home/me/f.py":4:10))` or
`loc(callsite("f"("f.py":4:10) at "<module>"("f.py":9:1)))`. The innermost
frame comes first. `describe_location` returns the innermost frame that is
the user's (JAX normally filters its own frames out, but not always: e.g.
with JAX_TRACEBACK_FILTERING=off or code JAX does not recognise), followed
by the op's JAX name stack if there is one:
`/home/me/f.py:4:10 (jit(f)/log)`.
"""
from __future__ import annotations

import functools
import re

_FILE_LINE = re.compile(r'"([^"]+)":(\d+):(\d+)')
_NAME = re.compile(r'loc\("([^"]*)"')
# Frames from JAX itself or Python's own machinery, never the user's code.
_LIBRARY_PATH = re.compile(
    r"[/\\](site|dist)-packages[/\\](jax|jaxlib|flax|optax|equinox|haiku)[/\\]"
    r"|[/\\]jax[/\\]_src[/\\]|^<frozen |[/\\]lib[/\\]python3[.\d]*[/\\][^/\\]+\.py$")


def is_library_frame(path: str) -> bool:
    """True for a file of JAX (or a JAX library) or of Python's standard library."""
    return bool(_LIBRARY_PATH.search(path))


def describe_location(location) -> str:
    """`file:line:col` (plus the JAX name) for an MLIR location, or '<unknown>'."""
    return _describe_text(str(location))


@functools.lru_cache(maxsize=4096)
def _describe_text(text: str) -> str:
    """`describe_location` of a location's text. Cached: ops traced from one
    line share one location (W11's 1,539 ops have 103), and its regular
    expressions were a tenth of planning it."""
    files = _FILE_LINE.findall(text)
    name = _NAME.match(text)
    name_text = name.group(1) if name and not _FILE_LINE.match(text[4:]) else ""
    if files:
        user_frames = [frame for frame in files if not is_library_frame(frame[0])]
        path, line, col = (user_frames or files)[0]
        where = f"{path}:{line}:{col}"
        return f"{where} ({name_text})" if name_text and name_text != path else where
    if name_text:
        return name_text
    return "<unknown>"
