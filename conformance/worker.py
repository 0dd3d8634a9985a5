"""Run one test case in this process and classify how it ended.

`run_case(task)` parses the case's chunk (cached: a chunk's cases often come
one after another), plans the case's function, runs it without arguments and
returns `(status, message, seconds)`, where status is one of

* "pass": the function ran and every check held;
* "fail": a check did not hold (`CheckFailure`);
* "unsupported": pjrt-ref does not implement something the case needs
  (`Unimplemented`, at load or at run time; or an op of a dialect jaxlib
  cannot parse), or the function needs arguments but has checks;
* "error": any other exception (the message names the op and location).

A dynamic case (`@main` takes arguments, no checks) is run by
`_run_dynamic` instead; see `dynamic.py` for its statuses.

`serve(connection)` is the loop of a worker process: it receives tasks and
sends back results until it receives None. Timeouts and crashes are the
pool's business (`pool.py`).
"""
from __future__ import annotations

import importlib
import os
import re
import resource
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass

from pjrt_ref.errors import PjrtRefError, Unimplemented
from pjrt_ref.conformance import dynamic, oracle
from pjrt_ref.conformance.generic_form import to_generic_form
from pjrt_ref.conformance.testfile import read_text, split_chunks
from pjrt_ref.interpreter import ops
from pjrt_ref.interpreter.loader import make_context, parse_module
from pjrt_ref.interpreter.ops import checks
from pjrt_ref.interpreter.ops.checks import CheckFailure

PASS, FAIL, ERROR, UNSUPPORTED, TIMEOUT = "pass", "fail", "error", "unsupported", "timeout"
MAX_MESSAGE = 2000  # characters; MLIR diagnostics can quote whole regions

# Parse errors that mean "jaxlib's MLIR does not know this op".
_UNKNOWN_OP = re.compile(r"custom op '(?P<a>[\w.]+)' is unknown|"
                         r"Dialect `\w+' not found for custom op '(?P<b>[\w.]+)'|"
                         r"unregistered operation '(?P<c>[\w.]+)' found in dialect")


_STRING_LOCATION = re.compile(r'(?<=at )-:(?=\d)|"-":(?=\d)')


@dataclass
class _LoadedChunk:
    module: object  # keeps the parsed module (and its context) alive
    plan: object  # the ModulePlan; functions are planned when first run
    uses_probes: bool  # does it write with interpreter.probe?
    source: str  # the chunk's text as written (line numbers are the file's)


class _ChunkCache:
    """The last few loaded chunks: (file, chunk) -> _LoadedChunk or the error."""

    def __init__(self, size: int = 4):
        self.size = size
        self.entries: dict = {}

    def get(self, path: str, chunk_index: int):
        key = (path, chunk_index)
        if key not in self.entries:
            if len(self.entries) >= self.size:
                self.entries.pop(next(iter(self.entries)))
            self.entries[key] = _load_chunk(path, chunk_index)
        return self.entries[key]


class _Contexts:
    """MLIR contexts, each reused for a few dozen chunks: making one costs
    about as much as parsing a typical test file."""

    def __init__(self, uses: int = 32):
        self.uses = uses
        self.context = None
        self.count = 0

    def get(self):
        if self.context is None or self.count >= self.uses:
            self.context = make_context()
            # No MLIR worker threads: dynamic cases fork this process to run
            # the reference interpreter, and a fork copies no threads.
            self.context.enable_multithreading(False)
            self.count = 0
        self.count += 1
        return self.context


_CACHE = _ChunkCache()
_CONTEXTS = _Contexts()


def _load_chunk(path: str, chunk_index: int):
    """The chunk parsed and ready to plan, or the exception loading raised."""
    from pjrt_ref.interpreter.plan import ModulePlan

    try:
        chunks = split_chunks(read_text(path))
        chunk = next(c for c in chunks if c.index == chunk_index)
        text = to_generic_form(chunk.padded_text())
        module = parse_module(text, _CONTEXTS.get())
        return _LoadedChunk(module, ModulePlan.of_module(module), "interpreter.probe" in text,
                            chunk.padded_text())
    except Exception as error:  # reported when a case of this chunk runs
        return error


def run_case(task: tuple) -> tuple[str, str, float]:
    """Run `task` = (path, chunk_index, function) -> (status, message, seconds)."""
    path, chunk_index, function = task
    start = time.perf_counter()
    try:
        status, message = _run(path, chunk_index, function)
    except BaseException as error:  # noqa: BLE001 - everything is a result here
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        status, message = classify(error)
    # Chunks are parsed from a string, which MLIR names "-".
    message = _STRING_LOCATION.sub(os.path.basename(path) + ":", message)
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + " ..."
    return status, message, time.perf_counter() - start


def _run(path: str, chunk_index: int, function: str) -> tuple[str, str]:
    loaded = _CACHE.get(path, chunk_index)
    if isinstance(loaded, BaseException):
        raise loaded
    plan = loaded.plan.function(function)
    if plan.input_types:
        if function == "main" and not dynamic.has_checks(loaded.source):
            return _run_dynamic(loaded.source, plan)
        return UNSUPPORTED, (f"@{function} loads, but takes {len(plan.input_types)} "
                             "argument(s); only an @main without checks runs on synthesized "
                             "arguments (as a dynamic case)")
    checks.reset_check_count()
    if loaded.uses_probes:
        with tempfile.TemporaryDirectory(prefix="probes-") as probes:
            checks.probe_directory = probes  # where interpreter.probe writes
            try:
                plan.run([])
            finally:
                checks.probe_directory = None
    else:
        plan.run([])
    count = checks.checks_passed
    return PASS, f"{count} check(s) passed" if count else "ran; no checks in the case"


def _run_dynamic(source: str, plan) -> tuple[str, str]:
    """A dynamic case (see `dynamic.py`): round trip, run on synthesized
    arguments, compare with the reference interpreter."""
    try:
        version = dynamic.round_trip(source)
    except dynamic.RoundTripMismatch as mismatch:
        return FAIL, str(mismatch)
    arguments = dynamic.synthesize(plan.input_types)
    dimensions = dynamic.dimension_argument_count(plan.input_types)
    try:
        ours = plan.run([a.copy() for a in arguments])
    except Exception as error:  # noqa: BLE001 - ours to explain
        return ERROR, "pjrt-ref raised on the synthesized arguments: " + _message(error)
    try:
        theirs = oracle.reference_results(source, arguments, dimensions)
    except oracle.OracleUnavailable as why:
        return UNSUPPORTED, f"pjrt-ref ran it, but the oracle could not: {why}"
    try:
        dynamic.compare(ours, theirs)
    except dynamic.ResultMismatch as mismatch:
        return FAIL, f"differs from the StableHLO reference interpreter: {mismatch}"
    return PASS, dynamic.describe(arguments, dimensions, version, len(ours))


def classify(error: BaseException) -> tuple[str, str]:
    """(status, message) for an exception a case raised."""
    if isinstance(error, CheckFailure):
        return FAIL, str(error)
    if isinstance(error, (Unimplemented, NotImplementedError)):
        return UNSUPPORTED, _message(error)
    text = str(error)
    unknown = _UNKNOWN_OP.search(text)
    if unknown and "cannot parse" in text:
        op = unknown["a"] or unknown["b"] or unknown["c"]
        return UNSUPPORTED, f"'{op}': jaxlib's MLIR cannot parse this op"
    return ERROR, _message(error)


def _message(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, PjrtRefError) and error.op:
        return text
    # Not an error an op raised on purpose: say where it came from.
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        text += f" [at {os.path.basename(last.filename)}:{last.lineno} in {last.name}]"
    return text


def preload() -> None:
    """Import the interpreter, jaxlib's MLIR and every op family."""
    ops.load_all()
    from jaxlib.mlir import ir  # noqa: F401
    from jaxlib.mlir.dialects import chlo, sdy, stablehlo  # noqa: F401


def serve(connection, output_path: str | None = None, run=run_case, also_import: tuple[str, ...] = ()) -> None:
    """Worker loop: receive tasks, send `run(task)`, until None arrives.

    `also_import` names modules a layer above hands down (`pool.preload_also`);
    a forked worker has them already, a spawned one imports them here.

    The worker's stdout and stderr (MLIR diagnostics, prints, a crash's last
    words) go to `output_path`, emptied before each task, so the pool can
    quote it when the worker dies.
    """
    # A crashing case must not leave a core file behind; Ctrl-C is the
    # runner's to handle (it stops the workers).
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    output_fd = None
    if output_path:
        output_fd = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
    try:
        preload()
        for module in also_import:
            importlib.import_module(module)
    except Exception:  # noqa: BLE001 - each case will report the import error
        pass
    while True:
        try:
            task = connection.recv()
        except EOFError:
            return
        if task is None:
            return
        if output_fd is not None:
            os.ftruncate(output_fd, 0)
            os.lseek(output_fd, 0, os.SEEK_SET)
        connection.send(run(task))
