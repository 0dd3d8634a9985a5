"""Read untrusted MLIR bytecode in another process before this one does.

MLIR's bytecode reader trusts its input: fuzzing (tests/scripts/fuzz_loader.py)
found bytecode that makes it abort (an uncaught C++ exception), corrupt the
heap or loop forever. None of that can be caught in-process, so bytecode
(and portable artifacts) is first parsed, verified and planned by a checker
process; only if the checker survives does the caller parse it again
in-process. A checker that dies by a signal, exits, or takes longer than
PJRT_REF_BYTECODE_CHECK_TIMEOUT seconds (default 60) gets the input rejected
with INVALID_ARGUMENT. Python exceptions in the checker are not verdicts:
the in-process parse raises them again, with their own message.
PJRT_REF_BYTECODE_CHECK=0 turns the check off.

The checker is a fresh interpreter (`python -m pjrt_ref.interpreter.bytecode_checker`)
started once and reused, never a `fork()` of this process: JAX runs many
threads, and a forked child inherits the locks they hold at that instant,
so it could crash or hang on good programs, which were then turned away.
A fresh interpreter inherits nothing. It reads requests from its stdin
(entry name and bytes, length-prefixed) and answers each with one byte.

This module is the parent side only; the checker's loop is
bytecode_checker.py. `Program` calls `check_bytecode`, and the checker
builds `Program`s, so this side imports nothing of the interpreter.
"""
from __future__ import annotations

import atexit
import collections
import hashlib
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading

from .. import settings
from ..errors import InvalidArgument

# The protocol, shared with bytecode_checker.py: a request is REQUEST_HEADER
# then the entry name and the bytes; the checker answers SURVIVED_ANSWER.
REQUEST_HEADER = struct.Struct("<II")     # entry length, data length
SURVIVED_ANSWER = b"\x01"
# The checker's module, named (not imported: it imports program.py, which imports this).
CHECKER_MODULE = f"{__package__}.bytecode_checker"


def check_enabled() -> bool:
    """PJRT_REF_BYTECODE_CHECK, read per load."""
    return settings.get("PJRT_REF_BYTECODE_CHECK")


def timeout_seconds() -> float:
    """PJRT_REF_BYTECODE_CHECK_TIMEOUT, read per load."""
    return settings.get("PJRT_REF_BYTECODE_CHECK_TIMEOUT")


class Checker:
    """One checker process: `verdict(entry, data)` is None (survived) or why not."""

    def __init__(self):
        self.stderr = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                   PJRT_REF_OPTIMIZE="0", PJRT_REF_BYTECODE_CHECK="0")
        self.process = subprocess.Popen(
            [sys.executable, "-m", CHECKER_MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, env=env, close_fds=True)
        self.owner = os.getpid()

    def verdict(self, entry: str, data: bytes, timeout: float) -> str | None:
        name = entry.encode()
        try:
            self.process.stdin.write(REQUEST_HEADER.pack(len(name), len(data)) + name + data)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._death()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.close()
            return f"parsing it did not finish within {timeout:g} s (PJRT_REF_BYTECODE_CHECK_TIMEOUT)"
        if self.process.stdout.read(1) == SURVIVED_ANSWER:
            return None
        return self._death()

    def _death(self) -> str:
        code = self.process.wait()
        self.stderr.seek(0)
        last = [line for line in self.stderr.read().decode(errors="replace").splitlines() if line.strip()]
        said = f": {last[-1][:300]}" if last else ""
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"it crashes MLIR's bytecode reader ({name}){said}"
        return f"it crashes MLIR's bytecode reader (exit {code}){said}"

    @property
    def alive(self) -> bool:
        return self.owner == os.getpid() and self.process.poll() is None

    def close(self) -> None:
        if self.owner != os.getpid():   # a forked copy: the process is our parent's
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.stderr):
            try:
                stream.close()
            except OSError:     # a pipe the killed checker left unflushed
                pass


_LOCK = threading.Lock()
_CHECKER: Checker | None = None


# Digests of (entry, bytecode) the checker survived, most recent last: a
# program compiled again (a warm recompile, a framework that compiles the
# same module per device) is not parsed a third time. The verdict depends
# on the bytes alone, so a survivor stays one.
_SURVIVED: "collections.OrderedDict[bytes, None]" = collections.OrderedDict()
_SURVIVED_KEEP = 256


def _digest(entry: str, data: bytes) -> bytes:
    return hashlib.sha256(entry.encode() + b"\0" + data).digest()


def start_checker() -> None:
    """Start the checker process now, without waiting for it (PJRT_Client_Create
    calls this): its interpreter starts and imports the interpreter's modules
    while the framework traces and lowers, instead of during the first compile
    (about 0.3 s of a cold compile here, benchmarks/README.md W11)."""
    global _CHECKER
    if not check_enabled():
        return
    with _LOCK:
        if _CHECKER is None or not _CHECKER.alive:
            try:
                _CHECKER = Checker()
            except OSError:
                pass        # no process now: the first check tries again and reports it


def check_bytecode(data: bytes, entry: str) -> None:
    """Raise InvalidArgument if parsing `data` crashes or hangs the checker
    process (bytes it survived before are not sent again)."""
    global _CHECKER
    if not check_enabled():
        return
    timeout = timeout_seconds()
    digest = _digest(entry, data)
    with _LOCK:
        if digest in _SURVIVED:
            _SURVIVED.move_to_end(digest)
            return
        if _CHECKER is None or not _CHECKER.alive:
            _CHECKER = Checker()
        why = _CHECKER.verdict(entry, data, timeout)
        if why is not None:
            _CHECKER.close()
            _CHECKER = None
        else:
            _SURVIVED[digest] = None
            if len(_SURVIVED) > _SURVIVED_KEEP:
                _SURVIVED.popitem(last=False)
    if why is not None:
        raise InvalidArgument(f"MLIR bytecode rejected: {why}")


@atexit.register
def _stop_checker() -> None:
    if _CHECKER is not None:
        _CHECKER.close()
