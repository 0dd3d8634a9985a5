"""Read untrusted MLIR bytecode in another process, never in this one.

MLIR's bytecode reader trusts its input: fuzzing (tests/scripts/fuzz_loader.py)
found bytecode that makes it abort (an uncaught C++ exception), corrupt the
heap or loop forever, and bytecode that parses cleanly and then aborts the
process while its ops are read. None of that can be caught in-process, so
bytecode (and portable artifacts) is parsed, verified and read into records
(records.py) by a checker process, which sends the records back: this
process plans from them and never parses the untrusted bytes. A checker
that has received the program and then dies by a signal or takes longer
than PJRT_REF_BYTECODE_CHECK_TIMEOUT seconds (default 60) gets the input
rejected with INVALID_ARGUMENT. Anything else is not a verdict: a checker
that cannot start or ends before it has read the program (a missing module,
no processes or file descriptors left) fails the compile with
FAILED_PRECONDITION and the checker's own stderr; errors reading raises in
the checker (a program that does not parse or verify) are raised here with
their own message. PJRT_REF_BYTECODE_CHECK=0 turns the check off, and bytes
a checker survived before are read in-process (see `_SURVIVED`).

The answer is a pickle, and a checker whose heap the input corrupted could
send anything: it is unpickled by `_RecordUnpickler`, which builds nothing
but plain values, numpy arrays and dtypes, the interpreter's data classes
and pjrt-ref's errors, so no answer can make this process call anything else.

The checker is a fresh interpreter (`python -m pjrt_ref.interpreter.bytecode_checker`,
importing this very pjrt_ref wherever the caller runs: package_home.py)
started once and reused, never a `fork()` of this process: JAX runs many
threads, and a forked child inherits the locks they hold at that instant,
so it could crash or hang on good programs, which were then turned away.
A fresh interpreter inherits nothing. It reads requests from its stdin
(entry name and bytes, length-prefixed) and answers each on its stdout.

This module is the parent side only; the checker's loop is
bytecode_checker.py. `Program` calls `read_checked`, and the checker
reads with records.py, so this side imports nothing of the interpreter.
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import hashlib
import io
import os
import pickle
import select
import signal
import struct
import subprocess
import tempfile
import threading

import numpy as np

from pjrt_ref import __version__, package_home, settings
from pjrt_ref.errors import FailedPrecondition, Internal, InvalidArgument, PjrtRefError

# The protocol, shared with bytecode_checker.py: a request is REQUEST_HEADER
# then the entry name and the bytes; the checker answers READ_ANSWER once it
# has received them all, then SURVIVED_ANSWER once it has read the program,
# followed by ANSWER_LENGTH and the pickled answer.
REQUEST_HEADER = struct.Struct("<II")     # entry length, data length
READ_ANSWER = b"\x02"
SURVIVED_ANSWER = b"\x01"
ANSWER_LENGTH = struct.Struct("<Q")
# The checker's module, named (not imported: it imports program.py, which imports this).
CHECKER_MODULE = f"{__package__}.bytecode_checker"


def check_enabled() -> bool:
    """PJRT_REF_BYTECODE_CHECK, read per load."""
    return settings.get("PJRT_REF_BYTECODE_CHECK")


def timeout_seconds() -> float:
    """PJRT_REF_BYTECODE_CHECK_TIMEOUT, read per load."""
    return settings.get("PJRT_REF_BYTECODE_CHECK_TIMEOUT")


class CheckerFailure(Exception):
    """The checker failed for a reason that is not the program: no verdict."""


class Checker:
    """One checker process: `verdict(entry, data)` is (None, its answer) if it
    survived reading the program, or (why not, b"").

    Raises CheckerFailure when the process cannot start, or ends before it
    has read the whole request, or exits without a signal: those say nothing
    about the program (a missing module, no file descriptors left, killed
    while starting). Only a checker that acknowledged reading the program
    (READ_ANSWER) and then died by a signal or hung gives a verdict.
    """

    def __init__(self):
        self.stderr = tempfile.TemporaryFile()
        try:
            self.process = subprocess.Popen(
                package_home.python_command(CHECKER_MODULE), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self.stderr, close_fds=True,
                env=package_home.python_environment())
        except OSError as error:
            self.stderr.close()
            raise CheckerFailure(f"it could not be started ({error})") from error
        self.owner = os.getpid()

    def verdict(self, entry: str, data: bytes, timeout: float) -> tuple[str | None, bytes]:
        name = entry.encode()
        try:
            self.process.stdin.write(REQUEST_HEADER.pack(len(name), len(data)) + name + data)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise CheckerFailure(f"it ended before reading the program{self._ending()}") from None
        answer = self._answer(timeout)
        if answer is None:
            raise CheckerFailure(f"it did not start and read the program within {timeout:g} s "
                                 "(PJRT_REF_BYTECODE_CHECK_TIMEOUT)")
        if answer != READ_ANSWER:
            raise CheckerFailure(f"it ended before reading the program{self._ending()}")
        answer = self._answer(timeout)
        if answer is None:
            return f"parsing it did not finish within {timeout:g} s (PJRT_REF_BYTECODE_CHECK_TIMEOUT)", b""
        if answer == SURVIVED_ANSWER:
            return None, self._reply(timeout)
        code = self.process.wait()
        if code >= 0:       # a clean exit is Python's own, not a crash of the reader
            raise CheckerFailure(f"it exited while reading the program{self._ending()}")
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"it crashes MLIR's bytecode reader ({name}){self._said(1)}", b""

    def _reply(self, timeout: float) -> bytes:
        """The answer after SURVIVED_ANSWER: its length, then its bytes."""
        length = ANSWER_LENGTH.unpack(self._read(ANSWER_LENGTH.size, timeout))[0]
        return self._read(length, timeout)

    def _read(self, size: int, timeout: float) -> bytes:
        answers, chunks, left = self.process.stdout.fileno(), [], size
        while left:
            ready, _, _ = select.select([answers], [], [], timeout)
            chunk = os.read(answers, min(left, 1 << 20)) if ready else None
            if not chunk:
                raise CheckerFailure(f"it stopped sending its answer{self._ending() if chunk == b'' else ''}")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _answer(self, timeout: float) -> bytes | None:
        """The checker's next answer byte, b"" if it ended, None if none came in time."""
        # Read the pipe itself: a buffered read could take the next answer along
        # into its buffer, where select() would not see it.
        answers = self.process.stdout.fileno()
        ready, _, _ = select.select([answers], [], [], timeout)
        return os.read(answers, 1) if ready else None

    def _said(self, lines: int) -> str:
        self.stderr.seek(0)
        said = [line for line in self.stderr.read().decode(errors="replace").splitlines() if line.strip()]
        return (": " + "\n".join(said[-lines:])[-2000:]) if said else ""

    def _ending(self) -> str:
        """How the process ended, with the end of its stderr."""
        code = self.process.wait()
        how = f"exit status {code}" if code >= 0 else f"signal {-code}"
        return f" ({how}){self._said(20)}"

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
# on the bytes and on the MLIR that reads them (jaxlib's), so a survivor
# stays one for that jaxlib: the digest covers the versions, and survivors
# are also kept on disk (an empty file per digest in
# PJRT_REF_CACHE_DIR/bytecode-checked), so that the next process's first
# compile of the same program (a script run again, a test worker) does not
# wait for a checker process to start (benchmarks/README.md, W0).
_SURVIVED: "collections.OrderedDict[bytes, None]" = collections.OrderedDict()
_SURVIVED_KEEP = 256
_VERSIONS: bytes | None = None


def _versions() -> bytes:
    """What a verdict depends on besides the bytes: pjrt-ref's checker and jaxlib's MLIR."""
    global _VERSIONS
    if _VERSIONS is None:
        import jaxlib.version

        _VERSIONS = f"pjrt-ref {__version__}, jaxlib {jaxlib.version.__version__}".encode()
    return _VERSIONS


def _digest(entry: str, data: bytes) -> bytes:
    return hashlib.sha256(_versions() + b"\0" + entry.encode() + b"\0" + data).digest()


def _survivor_file(digest: bytes) -> str:
    from pjrt_ref.interpreter.native.codegen import cache_dir

    return os.path.join(cache_dir(), "bytecode-checked", digest.hex())


def _survived(digest: bytes) -> bool:
    """In this process's memory, or on disk from an earlier process."""
    if digest in _SURVIVED:
        _SURVIVED.move_to_end(digest)
        return True
    if os.path.exists(_survivor_file(digest)):
        _keep(digest)
        return True
    return False


def _keep(digest: bytes) -> None:
    _SURVIVED[digest] = None
    if len(_SURVIVED) > _SURVIVED_KEEP:
        _SURVIVED.popitem(last=False)


def _record_survivor(digest: bytes) -> None:
    """Remember a survivor here and on disk (an unwritable cache only costs the next process a check)."""
    _keep(digest)
    path = _survivor_file(digest)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "x").close()
    except OSError:
        pass


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
            except CheckerFailure:
                pass        # no process now: the first check tries again and reports it


def read_checked(data: bytes, entry: str):
    """`data` read by the checker process: a records.ModuleRecord, or None where
    this process may read it itself (the check is off, or these bytes
    survived a checker before, here or in an earlier process).

    Raises InvalidArgument if reading `data` crashes or hangs the checker,
    the error reading it raised there (it does not parse, say), and
    FailedPrecondition if the checker itself could not do its work."""
    global _CHECKER
    if not check_enabled():
        return None
    timeout = timeout_seconds()
    digest = _digest(entry, data)
    with _LOCK:
        if _survived(digest):
            return None
        try:
            if _CHECKER is None or not _CHECKER.alive:
                _CHECKER = Checker()
            why, reply = _CHECKER.verdict(entry, data, timeout)
        except CheckerFailure as failure:
            if _CHECKER is not None:
                _CHECKER.close()
            _CHECKER = None
            raise FailedPrecondition(
                f"pjrt-ref's bytecode checker process failed, so the program was not checked "
                f"(this says nothing about the program; PJRT_REF_BYTECODE_CHECK=0 skips the check): "
                f"{failure}") from None
        if why is not None:
            _CHECKER.close()
            _CHECKER = None
        else:
            _record_survivor(digest)
    if why is not None:
        raise InvalidArgument(f"MLIR bytecode rejected: {why}")
    return _decoded(reply)


def _decoded(reply: bytes):
    """The record in the checker's answer, or the error it stands for."""
    try:
        kind, value = _RecordUnpickler(io.BytesIO(reply)).load()
    except Exception as error:
        raise Internal(f"pjrt-ref's bytecode checker sent an answer that cannot be read: "
                       f"{type(error).__name__}: {error}") from None
    if kind == "record":
        return value
    if kind == "error" and isinstance(value, PjrtRefError):
        raise value
    raise Internal(f"pjrt-ref's bytecode checker failed reading the program: {value}")


class _RecordUnpickler(pickle.Unpickler):
    """Builds only what a checker's answer holds (module docstring): plain
    values, numpy arrays and dtypes (ml_dtypes' element types included),
    `types.SimpleNamespace`, the interpreter's dataclasses and named tuples
    (built without calling them), splat constants (`attributes.splat_array`)
    and pjrt-ref's errors."""

    _NAMES = {("numpy", "dtype"), ("numpy", "ndarray"),
              ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
              ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
              ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
              ("builtins", "complex"), ("builtins", "set"), ("builtins", "frozenset"),
              ("builtins", "slice"), ("types", "SimpleNamespace"),
              (FailedPrecondition.__module__, "rebuild_error"),
              (__package__ + ".attributes", "splat_array")}   # np.full of one value
    _INTERPRETER = __package__ + "."

    def find_class(self, module: str, name: str):
        if (module, name) in self._NAMES:
            return super().find_class(module, name)
        found = super().find_class(module, name) if self._may_hold(module) else None
        if isinstance(found, type) and (
                (module == "ml_dtypes" and issubclass(found, np.generic))
                or (module.startswith(self._INTERPRETER)
                    and (dataclasses.is_dataclass(found) or _is_named_tuple(found)))):
            return found
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checker's answer")

    def _may_hold(self, module: str) -> bool:
        return module == "ml_dtypes" or module.startswith(self._INTERPRETER)


def _is_named_tuple(cls: type) -> bool:
    return issubclass(cls, tuple) and hasattr(cls, "_fields")


@atexit.register
def _stop_checker() -> None:
    if _CHECKER is not None:
        _CHECKER.close()
