"""The bytecode checker process: `python -m pjrt_ref.interpreter.bytecode_checker`.

bytecode_guard.py, the parent side, starts this module in a fresh
interpreter and sends it untrusted bytecode; here each program is parsed,
verified and read into records (records.py), so that a crash or hang of
MLIR's bytecode reader, or of the bindings that read what it parsed, kills
this process and not the caller. The records go back to the caller, which
plans from them and never parses the untrusted bytes itself.

Why reading and not only parsing: a fuzzed input
(tests/data/fuzz_loader/crash-a45551153130.mlirbc) parses, verifies and
prints cleanly, then aborts the process (nanobind's uncaught conversion
error on a string that is not UTF-8) while its ops are read.

Requests and answers follow the guard's protocol: REQUEST_HEADER (entry and
data lengths), the entry name, the bytes; a READ_ANSWER byte once they are
read, then, once the program is read, a SURVIVED_ANSWER byte, ANSWER_LENGTH
and the answer: a pickle of ("record", ModuleRecord), ("error", the
PjrtRefError that reading raised) or ("bug", text of any other exception).
The parent rejects a program only if this process dies or hangs between
READ_ANSWER and SURVIVED_ANSWER.
"""
from __future__ import annotations

import io
import os
import pickle
import sys

import numpy as np

from pjrt_ref.errors import PjrtRefError
from pjrt_ref.interpreter.attributes import splat_array, splat_parts
from pjrt_ref.interpreter.bytecode_guard import ANSWER_LENGTH, READ_ANSWER, REQUEST_HEADER, SURVIVED_ANSWER
from pjrt_ref.interpreter.records import read_program


def _read_exactly(stream, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# A small program of the kinds of ops models use, read once at start: the
# checker starts with the client (bytecode_guard.start_checker) and does this
# while the framework traces, so the first real check does not pay for the
# first read's one-time work (loading MLIR's dialects, importing modules).
WARM_UP_PROGRAM = """
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4xf32> {
  %p = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
      : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %e = stablehlo.exponential %p : tensor<4x8xf32>
  %c = stablehlo.constant dense<1.0> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<4x8xf32>
  %s = stablehlo.add %e, %b : tensor<4x8xf32>
  %t = chlo.erf %s : tensor<4x8xf32> -> tensor<4x8xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%t init: %z) applies stablehlo.add across dimensions = [1]
      : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
"""


def answer(data) -> bytes:
    """The pickled answer for one program (module docstring)."""
    try:
        reply = ("record", read_program(data)[1])
    except PjrtRefError as error:
        reply = ("error", error)
    except Exception as error:      # a bug of the reader: the caller reports it, never a verdict
        reply = ("bug", f"{type(error).__name__}: {error}")
    try:
        return _pickled(reply)
    except Exception as error:      # a value the reader should not have kept
        return pickle.dumps(("bug", f"cannot send what was read: {type(error).__name__}: {error}"))


class _SplatPickler(pickle.Pickler):
    """Sends a splat constant as its one value and shape (attributes.splat_array
    builds it again on the other side)."""

    def reducer_override(self, obj):
        parts = splat_parts(obj) if isinstance(obj, np.ndarray) else None
        return NotImplemented if parts is None else (splat_array, parts)


def _pickled(reply) -> bytes:
    buffer = io.BytesIO()
    _SplatPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(reply)
    return buffer.getvalue()


def serve(requests, answers) -> None:
    """The checker's loop: read each request's program and send back what it read."""
    answer(WARM_UP_PROGRAM)
    while True:
        header = _read_exactly(requests, REQUEST_HEADER.size)
        if header is None:
            return                      # our parent closed the pipe (or died)
        entry_size, data_size = REQUEST_HEADER.unpack(header)
        entry = _read_exactly(requests, entry_size)
        data = _read_exactly(requests, data_size)
        if entry is None or data is None:
            return
        answers.write(READ_ANSWER)      # from here on, dying is this program's doing
        answers.flush()
        reply = answer(data)
        answers.write(SURVIVED_ANSWER + ANSWER_LENGTH.pack(len(reply)) + reply)
        answers.flush()


def main() -> None:
    """Answers go to the original stdout; anything else printed goes to stderr."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
