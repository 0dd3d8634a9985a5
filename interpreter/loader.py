"""Parse a StableHLO program: text, MLIR bytecode, or a portable artifact.

Parsing and verification go through jaxlib's MLIR bindings. One MLIR context
is made per program (contexts are not shared across threads).
"""
from __future__ import annotations

import gc
import os
import signal
import time
import warnings

from ..errors import InvalidArgument

_REGISTRY = None


def _dialect_registry():
    global _REGISTRY
    if _REGISTRY is None:
        from jaxlib.mlir import ir
        import jaxlib.mlir._mlir_libs._jax_mlir_ext as jax_mlir_ext

        registry = ir.DialectRegistry()
        jax_mlir_ext.register_dialects(registry)
        _REGISTRY = registry
    return _REGISTRY


def make_context():
    """An MLIR context with func, stablehlo, chlo, sdy and mhlo loaded.

    Unregistered dialects are allowed so the interpreter-test `check.*` ops
    parse; the planner rejects any op it has no kernel for.
    """
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import chlo, sdy, stablehlo

    context = ir.Context()
    context.append_dialect_registry(_dialect_registry())
    context.load_all_available_dialects()
    stablehlo.register_dialect(context)
    chlo.register_dialect(context)
    sdy.register_dialect(context)
    try:
        from jaxlib.mlir.dialects import mhlo
        mhlo.register_mhlo_dialect(context)
    except Exception:  # pragma: no cover - mhlo is optional
        pass
    _load_quant_dialect(context)
    context.allow_unregistered_dialects = True
    return context


def _load_quant_dialect(context) -> None:
    """Load MLIR's `quant` dialect, which gives `!quant.uniform` types meaning.

    jaxlib's Python bindings register no `quant` dialect, so without this a
    quantized type parses as an opaque type of an unregistered dialect and
    StableHLO's verifier rejects every quantized op. The dialect is compiled
    into jaxlib (StableHLO needs it); running the `vhlo-legalize-to-stablehlo`
    pass once, on an empty module, loads it as one of the pass's dependent
    dialects.
    """
    from jaxlib.mlir import ir, passmanager
    from jaxlib.mlir.dialects import stablehlo

    global _PASSES_REGISTERED
    if not _PASSES_REGISTERED:
        stablehlo.register_stablehlo_passes()
        _PASSES_REGISTERED = True
    with context, ir.Location.unknown():
        module = ir.Module.parse("module {}")
        passmanager.PassManager.parse("builtin.module(vhlo-legalize-to-stablehlo)").run(
            module.operation)


_PASSES_REGISTERED = False


def is_bytecode(data: bytes) -> bool:
    """MLIR bytecode (and portable artifacts) start with the magic 'ML\\xefR'."""
    return data[:4] == b"ML\xefR"


def _sandbox_timeout() -> float:
    value = os.environ.get("PJRT_REF_BYTECODE_CHECK_TIMEOUT", "").strip()
    try:
        return float(value) if value else 60.0
    except ValueError:
        return 60.0


def check_bytecode_in_child(data: bytes, work, fresh_command: list[str]) -> None:
    """Run `work()` (parse + plan of MLIR bytecode) in a forked child first.

    MLIR's bytecode reader trusts its input: fuzzing found bytecode that makes
    it abort (an uncaught C++ exception from nanobind on a non-UTF-8 string),
    corrupt the heap (`free(): corrupted unsorted chunks`) or loop forever.
    None of that can be caught in-process, so bytecode (and portable
    artifacts) are first parsed in a `fork()`ed child. If the child dies by a
    signal, exits abnormally or takes longer than
    PJRT_REF_BYTECODE_CHECK_TIMEOUT seconds (default 60; then once more in a
    new interpreter, `fresh_command`), the input is rejected with
    INVALID_ARGUMENT; otherwise the caller parses it again
    in-process. Python exceptions in the child are ignored here: the
    in-process parse raises them again. Text input is not checked (the text
    parser reports errors as diagnostics). PJRT_REF_BYTECODE_CHECK=0 turns
    the check off.
    """
    if os.environ.get("PJRT_REF_BYTECODE_CHECK", "1").strip() == "0" or not hasattr(os, "fork"):
        return
    # A child that times out is given one more try: forking a process whose
    # other threads hold a lock can, rarely, deadlock a child on good input
    # (a lock held at the fork stays held in the child), so the second try is
    # `fresh_command` (a new interpreter that inherits no lock; the same work,
    # `data` on its stdin). Input that really makes the reader hang hangs again.
    status = _status_of_child(work)
    if status is None:
        status = _status_of_fresh_process(fresh_command, data)
    if status is None:
        raise InvalidArgument(
            "MLIR bytecode rejected: parsing it did not finish within "
            f"{_sandbox_timeout():g} s, twice (PJRT_REF_BYTECODE_CHECK_TIMEOUT)")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        raise InvalidArgument(
            f"MLIR bytecode rejected: it crashes MLIR's bytecode reader ({name})")
    if os.WEXITSTATUS(status) != 0:
        raise InvalidArgument(
            f"MLIR bytecode rejected: it crashes MLIR's bytecode reader (exit {os.WEXITSTATUS(status)})")


# JAX warns on every fork that forking a multithreaded process can deadlock
# the child. Our child only parses and exits, and a deadlocked child is
# killed after the timeout and retried (see above), so the warning would only
# alarm users about a risk that is handled here.
warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning,
                        module=__name__)


def _status_of_child(work) -> int | None:
    """Run `work()` in a forked child; its wait status, or None on timeout."""
    pid = os.fork()
    if pid == 0:  # child: never returns, never runs atexit handlers
        # What the parent left for its garbage collector (MLIR contexts of
        # earlier programs, JAX's) must not be collected here: destroying a
        # context joins its thread pool's threads, which exist only in the
        # parent, so the child hung (until the timeout) or crashed. Set
        # everything inherited aside.
        gc.freeze()
        try:
            work()
        except BaseException:
            pass
        finally:
            os._exit(0)
    deadline = time.monotonic() + _sandbox_timeout()
    delay = 0.0005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _status_of_fresh_process(command: list[str], data: bytes) -> int | None:
    """Run `command` with `data` on stdin; a wait status like `_status_of_child`'s, or None on timeout."""
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        done = subprocess.run(command, input=data, capture_output=True, timeout=_sandbox_timeout(), env=env)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode < 0:                       # killed by a signal
        return -done.returncode                   # a wait status whose WIFSIGNALED is true
    return (done.returncode & 0xFF) << 8          # a wait status with that exit code


def parse_module(source: bytes | str, context):
    """Parse `source` into a verified `ir.Module` inside `context`.

    Portable artifacts are versioned VHLO bytecode: they are deserialized
    (upgraded to the current StableHLO) first. Anything else goes to the
    MLIR parser, which accepts text and bytecode.
    """
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    if isinstance(source, str):
        source = source.encode()
    if not isinstance(source, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"program must be bytes or str, not {type(source).__name__}")
    data = bytes(source)
    if not data.strip():
        raise InvalidArgument("empty program")
    with context, ir.Location.unknown():
        if is_bytecode(data):
            try:
                module = stablehlo.deserialize_portable_artifact(context, data)
            except Exception:
                module = _parse_text_or_bytecode(data)
        else:
            if b"\x00" in data:
                raise InvalidArgument("program text contains NUL bytes: not MLIR text or bytecode")
            module = _parse_text_or_bytecode(data)
        if not module.operation.verify():
            raise InvalidArgument("program failed verification")
    return module


def _parse_text_or_bytecode(data: bytes):
    from jaxlib.mlir import ir

    try:
        return ir.Module.parse(data)
    except ir.MLIRError as error:
        raise InvalidArgument(f"cannot parse program: {_error_text(error)}") from None
    except Exception as error:  # nanobind raises ValueError/RuntimeError too
        raise InvalidArgument(f"cannot parse program: {error}") from None


def _error_text(error) -> str:
    text = str(error)
    return text if len(text) < 4000 else text[:4000] + " ..."
