"""The serialized-executable format of `PJRT_Executable_Serialize` / `PJRT_Executable_DeserializeAndLoad`.

A serialized pjrt-ref executable is plain data: the program exactly as the
caller gave it to `PJRT_Client_Compile` (StableHLO text, MLIR bytecode or a
portable artifact) plus the CompileOptionsProto bytes, framed by a fixed
header and closed by a SHA-256 digest. All integers are little-endian.

    offset  size  field
    ------  ----  ---------------------------------------------------------
         0     8  magic               b"PJRTREF\\x00"
         8     4  format version      uint32, currently 2
        12     4  flags               uint32, must be 0
        16     8  options_size (N)    uint64, CompileOptionsProto bytes
        24     8  program_size (M)    uint64, program bytes (M >= 1)
        32     N  compile options     as given; read like PJRT_Client_Compile's
                                      (pjrt_ref/model/compile_options.py)
      32+N     M  program             as given to PJRT_Client_Compile
    32+N+M    32  digest              SHA-256 of bytes [0, 32+N+M)

The total size is exactly 64 + N + M. `decode` checks, in this order and
before anything else looks at the payload: minimum size, magic, version,
flags, that the two sizes add up to the blob's size, then the digest. Any
failure is INVALID_ARGUMENT naming what was wrong. Only then is the program
handed to the same loader `PJRT_Client_Compile` uses.

Safety: deserialization never unpickles, never evaluates, never imports
anything named by the input; the only interpretation of the payload is
`struct.unpack` of the header, the protobuf wire-format reader of the
compile options' counts and device assignment (pjrt_ref/model/compile_options.py),
and the StableHLO parser. The digest is not a
signature: it catches truncation, bit rot and careless edits, and anyone can
recompute it. A blob is therefore exactly as trusted as a program passed to
`PJRT_Client_Compile`, no more.

Version 1 (b"pjrt-ref executable v1\\n", no digest) is no longer accepted.
"""
from __future__ import annotations

import hashlib
import struct

from pjrt_ref.errors import InvalidArgument

MAGIC = b"PJRTREF\x00"
VERSION = 2
_HEADER = struct.Struct("<8sIIQQ")          # magic, version, flags, options_size, program_size
HEADER_SIZE = _HEADER.size                   # 32
DIGEST_SIZE = hashlib.sha256().digest_size   # 32


def encode(program: bytes, compile_options: bytes) -> bytes:
    """Frame `program` and `compile_options` as a version-2 blob (layout in the module docstring)."""
    program, compile_options = bytes(program), bytes(compile_options)
    body = _HEADER.pack(MAGIC, VERSION, 0, len(compile_options), len(program)) + compile_options + program
    return body + hashlib.sha256(body).digest()


def decode(blob: bytes) -> tuple[bytes, bytes]:
    """(program, compile_options) of a blob made by `encode`; InvalidArgument if it is not one."""
    blob = bytes(blob)
    if len(blob) < HEADER_SIZE + DIGEST_SIZE:
        raise _corrupt(f"{len(blob)} bytes is shorter than the {HEADER_SIZE + DIGEST_SIZE}-byte minimum")
    magic, version, flags, n_options, n_program = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise _corrupt(f"bad magic {magic!r} (expected {MAGIC!r})")
    if version != VERSION:
        raise _corrupt(f"format version {version} is not supported (this pjrt-ref reads {VERSION})")
    if flags != 0:
        raise _corrupt(f"unknown flags 0x{flags:x}")
    expected = HEADER_SIZE + n_options + n_program + DIGEST_SIZE
    if expected != len(blob):
        raise _corrupt(f"header describes {expected} bytes, blob has {len(blob)} (truncated or padded)")
    if n_program == 0:
        raise _corrupt("empty program")
    body, digest = blob[:-DIGEST_SIZE], blob[-DIGEST_SIZE:]
    if hashlib.sha256(body).digest() != digest:
        raise _corrupt("SHA-256 digest mismatch (the blob was modified or damaged)")
    options = body[HEADER_SIZE:HEADER_SIZE + n_options]
    program = body[HEADER_SIZE + n_options:]
    return program, options


def _corrupt(detail: str) -> InvalidArgument:
    return InvalidArgument(f"not a valid serialized pjrt-ref executable: {detail}")
