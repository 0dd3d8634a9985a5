"""Every `PJRT_REF_*` environment variable pjrt-ref reads, declared once.

Why one list: the switches used to be read in eighteen files and parsed
three ways (a bad value was INTERNAL in one place, silently the default in
another, INVALID_ARGUMENT in a third), and the README's lists of them went
out of date. Here each variable has a name, a type, a default and one line
of help; the README's table is generated from this list
(`python -m pjrt_ref.settings --markdown`, kept equal by
tests/project/test_settings.py).

Reading. `get(name)` reads the variable at that moment and parses it with
its type; parsed values are cached per raw text, so reading an unchanged
variable again costs a few dict lookups. *When* a variable is read is the
caller's choice, said at the call site: once at import (PJRT_REF_LOG_API
and PJRT_REF_STRICT decide how the C-API slots are bound; PJRT_REF_PROFILE
whether compile and execute are timed), per client, per program planned or
per call (so tests may change them between calls).

Values. An empty value counts as unset, i.e. the default (`VAR= cmd` is how
a shell unsets a variable for one command). Booleans accept 1/0,
true/false, yes/no, on/off in any case.

Errors, one rule: a value its type does not accept raises `InvalidSetting`,
an `InvalidArgument`, so a PJRT caller sees INVALID_ARGUMENT rather than
INTERNAL; the message names the variable, the value and what is accepted.
A bad value is never replaced by the default in silence.

The compile key. A setting is `in_compile_key` (the default) unless a
compile never reads it and it cannot change what a compiled program does:
the program cache (pjrt_ref/model/program_cache.py) keys on the texts of
the settings in the key (`texts`), and JAX's persistent compilation cache
on their digest (`fingerprint`, in the platform version), so work done
under other settings is never reused, and a switch of the test harnesses
or of the cache's own size does not throw it away. Out of the key: the
suites' and recording proxy's variables, the tests' own switch, the diff
worker's marker and PJRT_REF_PROGRAM_CACHE.

Overrides. `with override(PJRT_REF_TRACE="1"): ...` gives variables values
in this process without writing `os.environ` (the CLI's `trace` and `diff`
commands pass their options so). A child process gets its settings through
its own environment at spawn (`subprocess`'s `env=`).

This module imports nothing from pjrt_ref but `pjrt_ref.errors`: the
interpreter, a lower layer, reads settings too.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Callable, Iterator

from pjrt_ref.errors import InvalidArgument


class InvalidSetting(InvalidArgument):
    """A `PJRT_REF_*` variable holds a value its type does not accept."""


# ------------------------------------------------------------------ types
class Kind:
    """How a variable's text becomes its value.

    `parse(text)` gets the stripped, non-empty text and raises ValueError
    when it does not accept it; `accepted` completes "VAR='x' is not ..."
    in the error, and `label` is the type column of the README's table."""

    label = ""
    accepted = ""

    def parse(self, text: str):
        raise NotImplementedError


class Flag(Kind):
    label = "bool"
    accepted = "a boolean: 1/0, true/false, yes/no or on/off"
    _WORDS = {"1": True, "true": True, "yes": True, "on": True,
              "0": False, "false": False, "no": False, "off": False}

    def parse(self, text: str) -> bool:
        value = self._WORDS.get(text.lower())
        if value is None:
            raise ValueError(text)
        return value


class Integer(Kind):
    """A whole number from `minimum` to `maximum` (None: no upper bound)."""

    _DIGITS = re.compile(r"[+-]?\d+")           # not int()'s "1_000" or " 1 "

    def __init__(self, minimum: int = 0, maximum: int | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum
        if maximum is None:
            self.label = f"int ≥ {minimum}"
            self.accepted = f"an integer ≥ {minimum}"
        else:
            self.label = f"int {minimum}-{maximum}"
            self.accepted = f"an integer from {minimum} to {maximum}"

    def parse(self, text: str) -> int:
        if not self._DIGITS.fullmatch(text):
            raise ValueError(text)
        value = int(text)
        if value < self.minimum or (self.maximum is not None and value > self.maximum):
            raise ValueError(text)
        return value


class Number(Kind):
    """A finite float, greater than 0 (`positive`) or at least 0."""

    def __init__(self, positive: bool, unit: str = "") -> None:
        self.positive = positive
        noun = f"a number of {unit}" if unit else "a number"
        self.accepted = f"{noun} {'greater than 0' if positive else '≥ 0'}"
        self.label = f"{unit or 'float'} {'> 0' if positive else '≥ 0'}"

    def parse(self, text: str) -> float:
        value = float(text)
        if not math.isfinite(value) or value < 0 or (self.positive and value == 0):
            raise ValueError(text)
        return value


class Text(Kind):
    """Any text (a path, a backend name, a tag): nothing to reject."""

    def __init__(self, label: str, accepted: str) -> None:
        self.label, self.accepted = label, accepted

    def parse(self, text: str) -> str:
        return text


class OneOf(Kind):
    """One of a few words."""

    def __init__(self, *words: str) -> None:
        self.words = words
        self.label = " or ".join(words)
        self.accepted = "one of " + ", ".join(words)

    def parse(self, text: str) -> str:
        if text.strip() not in self.words:
            raise ValueError(text)
        return text.strip()


class LogOrFile(Kind):
    """PJRT_REF_TRACE's values: 0 off (None), 1/stderr/log the log (`LOG`), else a file path."""

    LOG = "stderr"
    label = "1, 0 or path"
    accepted = "1 (log to stderr), 0 (off) or a file path"

    def parse(self, text: str) -> str | None:
        if text == "0":
            return None
        return self.LOG if text in ("1", "stderr", "log") else text


FLAG = Flag()
SECONDS = Number(positive=True, unit="seconds")
PATH = Text("path", "a path")


# ------------------------------------------------------------------ the list
@dataclass(frozen=True)
class Setting:
    """One variable. `default_text` describes a default the reader computes
    (it depends on the machine); then `default` is None. `in_compile_key`:
    whether compiled work is kept per value (module docstring, "The compile key")."""

    name: str
    kind: Kind
    default: object
    help: str
    default_text: str | None = None
    in_compile_key: bool = True

    def parse(self, text: str):
        """The value of `text` (not empty), or InvalidSetting naming this variable."""
        try:
            return self.kind.parse(text.strip())
        except ValueError:
            raise InvalidSetting(f"{self.name}={text!r} is not {self.kind.accepted}") from None

    def shown_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        if self.default is None:
            return "unset"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)


SETTINGS: dict[str, Setting] = {}


def _declare(name: str, kind: Kind, default: object, help: str, default_text: str | None = None, *,
             in_compile_key: bool = True) -> None:
    assert name not in SETTINGS, f"{name} is declared twice"
    SETTINGS[name] = Setting(name, kind, default, help, default_text, in_compile_key)


# Debugging (docs/debugging.md).
_declare("PJRT_REF_CHECK_NANS", FLAG, False,
         "stop at the first op whose result holds a NaN or Inf its operands did not; the error names "
         "the op and your `file.py:line`")
_declare("PJRT_REF_TRACE", LogOrFile(), None,
         "log every op as it runs (location, result type, min/max/mean, NaN/Inf counts): 1 to stderr, "
         "a FILE.jsonl as JSON lines; `pjrt-ref trace`")
_declare("PJRT_REF_PROFILE", PATH, None,
         "write a Chrome trace (FILE.json) with a slice per compile, execute and op; "
         "`pjrt-ref profile` reads it")
_declare("PJRT_REF_DIFF", Text("cpu or path", "cpu or a PJRT plugin library path"), None,
         "run each op on another backend too (`cpu`: XLA CPU, or a PJRT plugin library) and stop at "
         "the first result that differs; `pjrt-ref diff`")
_declare("PJRT_REF_DIFF_RTOL", Number(positive=False), None,
         "PJRT_REF_DIFF's relative tolerance for every float type", "by type")
_declare("PJRT_REF_DIFF_ATOL", Number(positive=False), None,
         "PJRT_REF_DIFF's absolute tolerance for every float type", "by type")
_declare("PJRT_REF_DIFF_TIMEOUT", SECONDS, 300.0,
         "seconds PJRT_REF_DIFF waits for each answer of the other backend's worker")
_declare("PJRT_REF_DIFF_WORKER", FLAG, False,
         "set to 1 by pjrt-ref in PJRT_REF_DIFF's worker processes (a `sitecustomize` can tell it "
         "runs in one); not read by pjrt-ref", in_compile_key=False)
_declare("PJRT_REF_LOG_API", FLAG, False,
         "log every PJRT C-API call with its outcome on the `pjrt_ref.api` logger; read when the "
         "plugin loads; `pjrt-ref explain`")
_declare("PJRT_REF_STRICT", FLAG, False,
         "check how the caller uses the C API (struct sizes, NULL and stale handles, double destroy, "
         "use after delete or donation) and report leaks at client destroy, on the `pjrt_ref.strict` "
         "logger; read when the plugin loads")
_declare("PJRT_REF_FAST_PATHS", FLAG, True,
         "answer the per-execution queries in C; 0 sends every C-API call to Python "
         "(PJRT_REF_LOG_API and PJRT_REF_STRICT do too)")

# Devices and limits.
_declare("PJRT_REF_NUM_DEVICES", Integer(1, 1024), 1,
         "virtual devices of a client (the client create option `num_devices` wins; from JAX, "
         "so does `jax_num_cpu_devices`, as for JAX's cpu backend)")
_declare("PJRT_REF_SPMD_PER_DEVICE", FLAG, True,
         "run a partitioned program (jit over sharded arrays) as XLA does: each device runs the "
         "per-device program (its tiles, with collectives where values change layout), which is also "
         "what the executable's optimized program shows; off: the global program runs once and each "
         "device gets its tiles of the results")
_declare("PJRT_REF_COLLECTIVE_TIMEOUT", SECONDS, 120.0,
         "seconds a device or process waits for its peers at a collective before DEADLINE_EXCEEDED")
_declare("PJRT_REF_RUNTIME", OneOf("isolated", "shared"), None,
         "which Python a framework's plugin runs in (read when the framework asks for the library "
         "path): isolated, its own interpreter in its own link namespace, so no host thread's GIL "
         "is on a PJRT call's path; shared, the host's interpreter (the plugin's Python objects "
         "are the host's, and a host thread that holds the GIL while it waits for a call deadlocks)",
         "isolated for PyTorch/XLA and `pjrt-ref library-path`, shared for JAX")
_declare("PJRT_REF_GIL_STALL", Number(positive=False, unit="seconds"), 60.0,
         "report an entry point that has waited this long for Python's GIL, with every thread's "
         "stack: the host holds the GIL while it waits for the call (0: never)")
_declare("PJRT_REF_MAX_STEPS", Integer(0), 0,
         "stop a `while` after N iterations with RESOURCE_EXHAUSTED (0: no limit)")
_declare("PJRT_REF_MAX_BYTES", Integer(0), None,
         "refuse host transfers and op results larger than N bytes, before allocating them "
         "(0: no limit)", "available memory")
_declare("PJRT_REF_BYTECODE_CHECK", FLAG, True,
         "parse untrusted MLIR bytecode in a checker process first (it may crash or hang MLIR's reader)")
_declare("PJRT_REF_BYTECODE_CHECK_TIMEOUT", SECONDS, 60.0,
         "seconds the bytecode checker may take before the input is rejected")

# Speed (interpreter/optimiser/__init__.py, interpreter/native/__init__.py).
_declare("PJRT_REF_OPTIMIZE", FLAG, True,
         "plan-time rewrites (fusion, in-place updates, product splitting); 0: the plain interpreter")
_declare("PJRT_REF_JIT", FLAG, True,
         "compile fused runs, loops and regions with numba; 0: numpy only, same results")
_declare("PJRT_REF_JIT_BACKGROUND", FLAG, True,
         "a fused run whose numba kernel was never compiled on this machine runs on numpy (same "
         "results) while a background thread compiles it; 0: compile it before the program loads")
_declare("PJRT_REF_JIT_HOT_SECONDS", Number(positive=False, unit="seconds"), 0.1,
         "a `while` loop's or a fused run's numba kernel is built (in the background) once it has "
         "run this long interpreted or on numpy: a compile costs 0.3 to 1.5 s of a core, and "
         "numba's import holds the GIL (0: build at once)")
_declare("PJRT_REF_JIT_MIN_ELEMENTS", Integer(0), 1 << 17,
         "elements from which a fused run that needs numba is compiled")
_declare("PJRT_REF_JIT_THREADS", Integer(0), None,
         "threads per fused loop (1 turns splitting off)", "usable CPUs, at most 8")
_declare("PJRT_REF_MATMUL_THREADS", Integer(0), None,
         "threads per big matrix product (1 turns splitting off)", "usable CPUs")
_declare("PJRT_REF_BLAS_THREADS", Integer(0), 1,
         "OpenBLAS's own threads (0 leaves them alone, as does OPENBLAS_NUM_THREADS or OMP_NUM_THREADS)")
_declare("PJRT_REF_POOL_SPIN_US", Integer(0), 300,
         "microseconds the C matmul pool's threads spin for the next product (0: sleep at once)")
_declare("PJRT_REF_GEMM_POOL", FLAG, True,
         "split products on the C pool's threads; 0: on Python threads")
_declare("PJRT_REF_PRODUCT_PROBE", FLAG, True,
         "time how each product shape runs best on this machine; 0: split it onto idle CPUs")
_declare("PJRT_REF_HEAP", FLAG, True,
         "let glibc's malloc keep up to 64 MiB of freed memory for reuse; 0 leaves malloc alone")
_declare("PJRT_REF_PROGRAM_CACHE", Integer(0), 32,
         "compiled programs kept for a compile of the same bytes, options and settings "
         "(least recently used out first; 0: none)", in_compile_key=False)
_declare("PJRT_REF_CACHE_DIR", PATH, None,
         "disk cache of numba kernels, of the timed product strategies and of the bytecode the checker "
         "survived", "~/.cache/pjrt_ref/numba")

# Test files and suites.
_declare("PJRT_REF_PROBE_DIR", PATH, None,
         "where `interpreter.probe` writes tensors and `check.expect_serialized_eq` reads them "
         "(stablehlo-translate's --probe-output-dir)")
_declare("PJRT_REF_SUITE_PROGRESS", PATH, None,
         "set by `pjrt-ref jax-tests` / `torch-tests` for their pytest runs: the file each test's "
         "start and outcome is appended to", in_compile_key=False)
_declare("PJRT_REF_RECORD_PLUGIN", PATH, None,
         "set by `pjrt-ref jax-tests --plugin`: the plugin the recording proxy "
         "(capi_shim/recording_proxy.c) loads and forwards to", in_compile_key=False)
_declare("PJRT_REF_RECORD_DIR", PATH, None,
         "set by `pjrt-ref jax-tests --plugin`: the folder the recording proxy writes each compiled "
         "program and each execution's arguments to", in_compile_key=False)
_declare("PJRT_REF_RECORD_TEST", Text("text", "a test id"), None,
         "set by the plugin test kit around each test: the test the recording proxy files executions under",
         in_compile_key=False)
_declare("PJRT_REF_JAX_DEVICE_TAG", Text("text", "a device tag"), None,
         "set by `pjrt-ref jax-tests`: a device tag (`cpu`) JAX's test utilities also see on "
         "pjrt_ref's devices", in_compile_key=False)

# The tests' own switches (tests/), read through this registry like the rest.
_declare("PJRT_REF_SLOW_TESTS", FLAG, False,
         "the tests also run their longest cases: 4-process jobs (tests/distributed/test_distributed.py)",
         in_compile_key=False)


# ------------------------------------------------------------------ reading
_OVERRIDES: dict[str, str] = {}
_PARSED: dict[str, tuple[str, object]] = {}     # name -> (raw text, value)


def declared(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in pjrt_ref/settings.py") from None


def default(name: str):
    """The declared default of `name` (None: computed by its reader, see `default_text`)."""
    return declared(name).default


def get(name: str):
    """The value of `name` now: its override, else the environment, else its default."""
    setting = declared(name)
    text = _text(name)
    if not text.strip():
        return setting.default
    cached = _PARSED.get(name)
    if cached is not None and cached[0] == text:
        return cached[1]
    value = setting.parse(text)
    _PARSED[name] = (text, value)
    return value


def compile_key_names() -> tuple[str, ...]:
    """The settings in the compile key (`Setting.in_compile_key`), in declaration order."""
    return tuple(name for name, setting in SETTINGS.items() if setting.in_compile_key)


def texts() -> tuple[str, ...]:
    """The text of every setting in the compile key now (override, else
    environment; "" when unset), in declaration order: what the program
    cache keys on (pjrt_ref/model/program_cache.py)."""
    return tuple(_text(name) for name in compile_key_names())


def fingerprint() -> str:
    """A short digest of the name and text of every setting in the compile
    key now: what a cache kept across processes keys on, so that work done
    under other settings is never reused (JAX's persistent compilation
    cache, through the platform version, pjrt_ref/model/topology.py)."""
    text = "\0".join(f"{name}={_text(name)}" for name in compile_key_names())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _environment_value(name: str) -> str:
    return os.environ.get(name, "")


def read_environment_with(reader: Callable[[str], str]) -> None:
    """Read variables through `reader` from now on. A plugin running in a
    Python of its own (PJRT_REF_RUNTIME=isolated) reads the host's live
    environment this way: its own `os.environ` is a copy from its start."""
    global _environment_value, _own_python
    _environment_value = reader
    _own_python = True


_own_python = False


def runs_in_own_python() -> bool:
    """True when the plugin runs in a Python of its own, in a link namespace
    of its own (PJRT_REF_RUNTIME=isolated, capi_shim/isolated_runtime.c)."""
    return _own_python


def _text(name: str) -> str:
    text = _OVERRIDES.get(name)
    return _environment_value(name) if text is None else text


@contextlib.contextmanager
def override(**values: str) -> Iterator[None]:
    """Give variables these values (texts, as in the environment; "" is
    unset) in this process until the block ends, without writing
    `os.environ`. Process-wide, like the environment; each value is
    checked now, so a bad one fails here."""
    for name, text in values.items():
        if text.strip():
            declared(name).parse(text)
        else:
            declared(name)
    saved = {name: _OVERRIDES.get(name) for name in values}
    _OVERRIDES.update(values)
    try:
        yield
    finally:
        for name, text in saved.items():
            if text is None:
                _OVERRIDES.pop(name, None)
            else:
                _OVERRIDES[name] = text


# ------------------------------------------------------------------ the README's table
def markdown_table() -> str:
    """The README's table of switches (between its settings-table markers)."""
    rows = ["| variable | type | default | compile key | what it does |", "|---|---|---|---|---|"]
    for setting in SETTINGS.values():
        cells = (f"`{setting.name}`", setting.kind.label, setting.shown_default(),
                 "yes" if setting.in_compile_key else "no", setting.help)
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def _print_environment() -> int:
    """Each variable set here, as pjrt-ref reads it; 1 if one is rejected."""
    status = 0
    for name in SETTINGS:
        if name in os.environ:
            try:
                print(f"{name}={os.environ[name]!r}: {get(name)!r}")
            except InvalidSetting as error:
                print(f"{name}: error: {error}")
                status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pjrt_ref.settings",
        description="pjrt-ref's PJRT_REF_* variables: those set here and how they are read, "
                    "or (--markdown) the README's table of all of them.")
    parser.add_argument("--markdown", action="store_true", help="print the table of every variable")
    options = parser.parse_args(argv)
    if options.markdown:
        sys.stdout.write(markdown_table())
        return 0
    return _print_environment()


if __name__ == "__main__":
    sys.exit(main())
