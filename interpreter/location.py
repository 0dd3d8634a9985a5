"""Readable MLIR locations.

JAX attaches the user's source position to each op, wrapped in name and
call-site locations: `loc("jit(f)/log"("/home/me/f.py":4:10))` or
`loc(callsite("f"("f.py":4:10) at ...))`. `describe_location` returns the
innermost user file:line:col and the op's JAX name stack if there is one.
"""
from __future__ import annotations

import re

_FILE_LINE = re.compile(r'"([^"]+)":(\d+):(\d+)')
_NAME = re.compile(r'loc\("([^"]*)"')


def describe_location(location) -> str:
    """`file:line:col` (plus the JAX name) for an MLIR location, or '<unknown>'."""
    text = str(location)
    files = _FILE_LINE.findall(text)
    name = _NAME.match(text)
    name_text = name.group(1) if name and not _FILE_LINE.match(text[4:]) else ""
    if files:
        path, line, col = files[0]
        where = f"{path}:{line}:{col}"
        return f"{where} ({name_text})" if name_text and name_text != path else where
    if name_text:
        return name_text
    return "<unknown>"
