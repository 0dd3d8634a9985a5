"""The bytecode checker process: `python -m pjrt_ref.interpreter.bytecode_checker`.

bytecode_guard.py, the parent side, starts this module in a fresh
interpreter and sends it untrusted bytecode; here each program is read as
the caller will read it with MLIR (`read_like_the_caller`), so that a crash
or hang of MLIR's bytecode reader kills this process and not the caller.

Why reading is enough, and planning is not repeated here: every crash and
hang the loader fuzzer found (tests/data/fuzz_loader/) happens while MLIR
parses the bytes, and none of its inputs that parse crashes later: the
replay (tests/interpreter/test_fuzz_loader_corpus.py) loads each one in
a process guarded only by this check.
After the parse, the caller's plan reads a verified module through the
Python bindings, whose failures are Python exceptions it reports itself.
Planning here as well cost a cold compile of W11's program 0.2 s of
waiting (benchmarks/README.md, W11).

Requests and answers follow the guard's protocol: REQUEST_HEADER (data
length), the bytes; one SURVIVED_ANSWER byte each.
"""
from __future__ import annotations

import io
import sys

from .bytecode_guard import REQUEST_HEADER, SURVIVED_ANSWER
from .loader import make_context, parse_module


# A program using the dialects programs use (func, stablehlo, chlo), read once at start.
WARM_UP_PROGRAM = (b"func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {"
                   b" %y = chlo.erf %x : tensor<2xf32> -> tensor<2xf32>"
                   b" %z = stablehlo.add %x, %y : tensor<2xf32> return %z : tensor<2xf32> }")


def _read_exactly(stream, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_like_the_caller(data: bytes) -> None:
    """What `Program` does with MLIR before planning: parse (a portable
    artifact is deserialized and upgraded), verify, print the module and
    write it back as bytecode. Python exceptions are not verdicts: the
    caller's own parse raises them again, with their own message."""
    try:
        module = parse_module(data, make_context())
        str(module)
        module.operation.write_bytecode(io.BytesIO())
    except Exception:
        pass


def serve(requests, answers) -> None:
    """The checker's loop: read each request; answer OK unless we die first."""
    read_like_the_caller(WARM_UP_PROGRAM)   # loads MLIR's dialects before the first request
    while True:
        header = _read_exactly(requests, REQUEST_HEADER.size)
        if header is None:
            return                      # our parent closed the pipe (or died)
        data = _read_exactly(requests, REQUEST_HEADER.unpack(header)[0])
        if data is None:
            return
        read_like_the_caller(data)
        answers.write(SURVIVED_ANSWER)
        answers.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
