"""One folder per failing test: what reproduces its failure without JAX.

    TEST-FOLDER/
      failure.txt               the test id, and the error as pytest reported it
      program-N.mlir            each program the test compiled on the plugin (or ran,
      program-N.options.pb        compiled by an earlier test), with its compile options
      execution-E/              each execution inside the test:
        program.mlir              the program it ran
        argI.npy                  its arguments (deviceD-argI.npy on several devices)
        options.pb                on several devices: the compile options (partitions, replicas)
        execution.json            which program, how many devices, whether it ran
        diff.json, op/            after the replay: pjrt-ref diff's outcome, the first differing op
        one-device/               on several devices: the program without its shardings and its
                                    whole arguments, replayed (and diffed) on one device

Folders are named by test id (`folder_of_test`), so a plugin author finds a
test's folder from the id in the report.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field

import numpy as np

from pjrt_ref.testkit.records import Execution, Program, Records
from pjrt_ref.testkit.replay import program_text


@dataclass
class KeptExecution:
    execution: Execution
    folder: str
    replayable: str = ""        # "" if it can be replayed, else why not


@dataclass
class KeptTest:
    test: str
    folder: str
    failure: str                # the error text
    programs: list[Program] = field(default_factory=list)
    executions: list[KeptExecution] = field(default_factory=list)


def folder_of_test(root: str, test: str) -> str:
    """A folder name for a test id: the id with path-unsafe characters replaced (and
    a hash of the id when shortened)."""
    name = re.sub(r"[^\w.\-\[\],=+]", "_", test.replace("::", "--").replace("/", "."))
    if len(name) > 150:
        name = f"{name[:130]}-{hashlib.sha256(test.encode()).hexdigest()[:12]}"
    return os.path.join(root, name)


def keep_test(records: Records, test: str, failure: str, root: str) -> KeptTest:
    """Write the test's folder under `root`."""
    folder = folder_of_test(root, test)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "failure.txt"), "w") as handle:
        handle.write(f"{test}\n\n{failure}\n")
    programs, executions = records.of_test(test)
    texts = {program.number: keep_program(records, program, folder) for program in programs}
    kept = KeptTest(test, folder, failure, programs)
    for execution in executions:
        kept.executions.append(keep_execution(execution, texts.get(execution.program), folder))
    return kept


def keep_program(records: Records, program: Program, folder: str) -> str | None:
    """Copy the program (as text with locations where it parses) and its options; its text or None."""
    options = records.program_path(program.number, "options")
    if os.path.exists(options):
        shutil.copyfile(options, os.path.join(folder, f"program-{program.number}.options.pb"))
    code_path = records.program_path(program.number)
    text = readable_text(code_path) if program.format == "mlir" else None
    if text is None:
        if os.path.exists(code_path):      # kept as the plugin got it
            suffix = "mlirbc" if program.format == "mlir" else program.format
            shutil.copyfile(code_path, os.path.join(folder, f"program-{program.number}.{suffix}"))
        return None
    with open(os.path.join(folder, f"program-{program.number}.mlir"), "w") as handle:
        handle.write(text)
    return text


@functools.lru_cache(maxsize=256)
def readable_text(code_path: str) -> str | None:
    """A recorded program as StableHLO text, or None if pjrt-ref cannot read it. Cached:
    a program jitted once serves many tests, and each test's folder gets its copy."""
    try:
        with open(code_path, "rb") as handle:
            return program_text(handle.read())
    except Exception:       # missing, or a program pjrt-ref cannot read
        return None


def keep_execution(execution: Execution, text: str | None, folder: str) -> KeptExecution:
    where = os.path.join(folder, f"execution-{execution.number}")
    os.makedirs(where, exist_ok=True)
    if text is not None:
        with open(os.path.join(where, "program.mlir"), "w") as handle:
            handle.write(text)
    options = os.path.join(folder, f"program-{execution.program}.options.pb")
    if execution.devices > 1 and os.path.exists(options):    # what it was compiled for: partitions, replicas
        shutil.copyfile(options, os.path.join(where, "options.pb"))
    for argument in execution.arguments:
        if argument.kept:
            name = f"arg{argument.index}.npy" if execution.devices == 1 else \
                f"device{argument.device}-arg{argument.index}.npy"
            try:
                np.save(os.path.join(where, name), argument.value())
            except ValueError as error:       # packed sub-byte data, say: kept raw, not replayed
                argument.status = f"unreadable: {error}"
    with open(os.path.join(where, "execution.json"), "w") as handle:
        json.dump({"program": execution.program, "devices": execution.devices,
                   "arguments": [{"device": a.device, "index": a.index, "dims": list(a.dims),
                                  "buffer_type": a.buffer_type, "status": a.status}
                                 for a in execution.arguments],
                   "outcome": execution.outcome or "the process ended inside the call"}, handle, indent=1)
    return KeptExecution(execution, where,
                         why_not_replayable(execution, text, os.path.exists(os.path.join(where, "options.pb"))))


def why_not_replayable(execution: Execution, text: str | None, has_options: bool = False) -> str:
    if text is None:
        return "its program is not StableHLO pjrt-ref can read (or was loaded serialized)"
    if execution.devices > 1 and not has_options:
        return f"it ran on {execution.devices} devices and its compile options were not kept"
    if execution.outcome != "ok":
        return "the plugin did not finish it" if not execution.outcome else "the plugin returned an error"
    missing = [a for a in execution.arguments if not a.kept]
    if missing:
        return f"argument {missing[0].index} was not kept ({missing[0].status})"
    if len(execution.arguments) != execution.argument_count * execution.devices:
        return "not every argument was recorded"
    return ""
