"""The bytecode checker process: `python -m pjrt_ref.interpreter.bytecode_checker`.

bytecode_guard.py, the parent side, starts this module in a fresh
interpreter and sends it untrusted bytecode; here each program is parsed,
verified and planned (`Program`), so that a crash or hang of MLIR's bytecode
reader kills this process and not the caller. The parent side is imported
by program.py and this side imports program.py, so they are two modules:
the guard stays below `Program`, the checker above it.

Why the checker plans and does not stop at the parse: a fuzzed input
(tests/data/fuzz_loader/crash-a45551153130.mlirbc) parses, verifies and
prints cleanly, then aborts the process (nanobind's uncaught conversion
error on a string that is not UTF-8) while the planner walks its ops. A
checker that only parsed (tried on 2026-11-27 to save a cold compile
~0.2 s of waiting) let it through to the caller.

Requests and answers follow the guard's protocol: REQUEST_HEADER (entry and
data lengths), the entry name, the bytes; a READ_ANSWER byte once they are
read, a SURVIVED_ANSWER byte once they are planned. The parent rejects a
program only if this process dies between the two.
"""
from __future__ import annotations

import os
import sys

from .bytecode_guard import READ_ANSWER, REQUEST_HEADER, SURVIVED_ANSWER
from .program import Program


def _read_exactly(stream, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# A small program of the kinds of ops models use, planned once at start: the
# checker starts with the client (bytecode_guard.start_checker) and does this
# while the framework traces, so the first real check does not pay for the
# first plan's one-time work (loading MLIR's dialects, importing op modules).
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


def _plan(data, entry: str) -> None:
    try:
        Program(data, entry, _checked=True)
    except Exception:
        pass                        # the in-process parse reports Python errors itself


def serve(requests, answers) -> None:
    """The checker's loop: parse and plan each request; answer OK unless we die first."""
    _plan(WARM_UP_PROGRAM, "main")
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
        _plan(data, entry.decode())
        answers.write(SURVIVED_ANSWER)
        answers.flush()


def main() -> None:
    """Answers go to the original stdout; anything else printed goes to stderr."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
