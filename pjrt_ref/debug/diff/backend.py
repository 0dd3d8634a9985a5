"""The reference's side of the other backend: a worker process it talks to.

The other backend runs in a subprocess (`worker.py`) so that a plugin that
crashes or hangs cannot take pjrt-ref's process down, and so that pjrt-ref
itself can be "the other plugin" (its own copy, in another process). One
worker per backend serves every program of the process (`shared_backend`);
requests from several device threads take turns. A worker that died is
started again at the next request.
"""
from __future__ import annotations

import atexit
import base64
import hashlib
import os
import signal
import subprocess
import tempfile
import threading

from pjrt_ref import package_home, settings
from pjrt_ref.errors import Unavailable
from pjrt_ref.debug.diff.protocol import Reader, write_message

# Seconds to wait for each answer of the worker (and at least this long for
# it to load its backend).
DEFAULT_TIMEOUT = settings.default("PJRT_REF_DIFF_TIMEOUT")

# pjrt-ref's own debug switches: the worker runs the other backend plainly
# (a pjrt-ref worker must not diff, trace or check NaNs itself).
_SWITCHES_NOT_INHERITED = ("PJRT_REF_DIFF", "PJRT_REF_DIFF_RTOL", "PJRT_REF_DIFF_ATOL",
                           "PJRT_REF_CHECK_NANS", "PJRT_REF_TRACE", "PJRT_REF_PROFILE",
                           "PJRT_REF_LOG_API", "PJRT_REF_STRICT", "JAX_PLATFORMS")


class OtherBackendFailed(Unavailable):
    """The other backend could not load, compile or run something, or its worker died."""


def worker_environment(devices: int = 1) -> dict[str, str]:
    """The worker's environment: ours, without pjrt-ref's debug switches,
    plus PJRT_REF_DIFF_WORKER=1 (a `sitecustomize` can tell it is in one),
    and, for a worker of several devices, PJRT_REF_NUM_DEVICES (the count
    of a pjrt-ref plugin; other backends take it from the worker's JAX)."""
    environment = {k: v for k, v in os.environ.items() if k not in _SWITCHES_NOT_INHERITED}
    environment["PJRT_REF_DIFF_WORKER"] = "1"
    if devices > 1:
        environment["PJRT_REF_NUM_DEVICES"] = str(devices)
    return environment


def program_key(module_text: str) -> str:
    return hashlib.sha256(module_text.encode()).hexdigest()[:24]


def normalize_spec(spec: str) -> str:
    """`cpu`, or the plugin's absolute path (dlopen searches the library path for a bare name)."""
    return spec if spec == "cpu" else os.path.abspath(spec)


class OtherBackend:
    """`spec` ("cpu" or a plugin path) behind a worker process."""

    def __init__(self, spec: str, timeout: float = DEFAULT_TIMEOUT, devices: int = 1) -> None:
        self.spec = normalize_spec(spec)
        self.timeout = timeout
        self.devices = devices           # how many devices the worker's backend gets
        self.description = spec          # "pjrt_ref 0.1.0 (PATH)" once the worker has said hello
        self._process: subprocess.Popen | None = None
        self._reader: Reader | None = None
        self._stderr = None
        self._compiled: set[str] = set()  # keys the current worker has a program for
        self._lock = threading.Lock()

    # -- the worker's life ---------------------------------------------------
    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            package_home.python_command("pjrt_ref.debug.diff.worker", self.spec, str(self.devices)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env=package_home.python_environment(worker_environment(self.devices)))
        self._reader = Reader(self._process.stdout.fileno())
        self._compiled = set()
        hello = self._receive(f"loading {self.spec}", max(self.timeout, DEFAULT_TIMEOUT))[0]
        if "error" in hello:
            self.close()
            raise OtherBackendFailed(f"cannot load the other backend {self.spec}: {hello['error']}")
        self.description = hello["description"]

    def close(self) -> None:
        """Stop the worker (it exits when its stdin closes)."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()

    def _failure(self, doing: str, reason: str) -> OtherBackendFailed:
        """The worker is unusable: stop it and describe what happened in one line."""
        process, self._process = self._process, None
        if reason == "died":
            code = process.wait()
            reason = f"died of {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        else:
            process.kill()
            process.wait()
        message = f"the other backend's worker (pid {process.pid}, {self.spec}) {reason} while {doing}"
        last = self._last_stderr_line()
        if last:
            message += f"; its stderr ended with: {last}"
        return OtherBackendFailed(message)

    def _last_stderr_line(self) -> str:
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read().decode(errors="replace").splitlines()]
        lines = [line for line in lines if line]
        return lines[-1][:300] if lines else ""

    def _receive(self, doing: str, timeout: float | None = None):
        timeout = self.timeout if timeout is None else timeout
        try:
            return self._reader.read_message(timeout)
        except EOFError:
            raise self._failure(doing, "died") from None
        except TimeoutError:
            raise self._failure(doing, f"did not answer within {timeout:g} s") from None

    # -- requests --------------------------------------------------------------
    def run(self, module_text: str, arguments: list, what: str) -> list:
        """Results of the one-device program `module_text` on `arguments`.

        `what` names the op for messages ("'stablehlo.tanh' at f.py:3:7").
        Raises OtherBackendFailed when the backend cannot compile or run it,
        or its worker dies or hangs."""
        return self._request(module_text, {}, arguments, what)[1]

    def run_on_devices(self, module_text: str, options: bytes, arguments: list[list], what: str) -> list[list]:
        """Each device's results of `module_text` compiled with `options` (a serialized
        xla.CompileOptionsProto: SPMD partitions or replicas) for `len(arguments)`
        devices, `arguments[d]` being device d's. The worker needs that many devices."""
        devices = len(arguments)
        extra = {"options": base64.b64encode(options).decode(), "devices": devices}
        reply, results = self._request(module_text, extra, [a for own in arguments for a in own], what)
        per_device = reply["per_device"]
        return [results[d * per_device:(d + 1) * per_device] for d in range(devices)]

    def _request(self, module_text: str, extra: dict, arguments: list, what: str) -> tuple[dict, list]:
        doing = f"running {what}"
        with self._lock:
            if self._process is None:
                self._start()
            key = program_key(module_text + extra.get("options", ""))
            header = {"key": key, **extra}
            if key not in self._compiled:
                header["module"] = module_text
            try:
                write_message(self._process.stdin, header, arguments)
            except (BrokenPipeError, OSError):
                raise self._failure(doing, "died") from None
            reply, results = self._receive(doing)
            if "error" in reply:
                if reply["stage"] == "compile":
                    raise OtherBackendFailed(f"{self.description} cannot compile {what}: {reply['error']}")
                raise OtherBackendFailed(f"{self.description} failed running {what}: {reply['error']}")
            self._compiled.add(key)
            return reply, results


_SHARED: dict[tuple[str, float, int], OtherBackend] = {}
_SHARED_LOCK = threading.Lock()


def shared_backend(spec: str, timeout: float = DEFAULT_TIMEOUT, devices: int = 1) -> OtherBackend:
    """The process's one OtherBackend for `spec` with `devices` devices (its worker starts at first use)."""
    spec = normalize_spec(spec)
    with _SHARED_LOCK:
        backend = _SHARED.get((spec, timeout, devices))
        if backend is None:
            backend = _SHARED[(spec, timeout, devices)] = OtherBackend(spec, timeout, devices)
        return backend


@atexit.register
def _close_workers() -> None:
    for backend in list(_SHARED.values()):
        backend.close()
