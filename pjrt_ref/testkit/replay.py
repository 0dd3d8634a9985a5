"""Replay a kept execution on XLA's cpu and on the plugin; where they differ, find the first op.

For one execution of a failing test (its program and the argument values
the plugin held when it began), `replay` runs the program on JAX's cpu
client and on the plugin, each in a worker process of its own
(debug/diff/backend.py: a plugin that crashes or hangs there takes only its
worker down). If any result differs beyond tolerance, `pjrt-ref diff` runs
the program on pjrt-ref, op by op, and each op on the plugin with
pjrt-ref's own operand values, and names the first op whose result
differs: the op, its MLIR location (a JAX program's locations are the
test's `file.py:line`), the worst elements and their ULP distance. That
op is then run alone on cpu too, which says whose value is the odd one out,
and on StableHLO's own reference interpreter, a third opinion written to
the spec by others, which says whose values it gives.
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field

import numpy as np

from pjrt_ref import package_home
from pjrt_ref.conformance.oracle import OracleUnavailable, reference_results
from pjrt_ref.debug.diff.backend import OtherBackendFailed, shared_backend
from pjrt_ref.debug.diff.compare import compare
from pjrt_ref.interpreter.loader import make_context, parse_module
from pjrt_ref.testkit.one_device import global_arguments, one_device_program

# Seconds for one whole-program run on either backend, and for the op-by-op diff.
RUN_TIMEOUT = 300.0
DIFF_TIMEOUT = 900.0


@dataclass
class Replay:
    """What replaying one execution showed."""
    execution: int
    status: str                 # "differs", "agrees", "not replayed", "plugin failed", "cpu failed"
    detail: str = ""
    first_op: dict = field(default_factory=dict)    # `pjrt-ref diff --json`'s facts, when an op differs
    odd_one_out: str = ""       # "plugin", "pjrt-ref", "all differ": who differs at that op
    stablehlo_interpreter: str = ""   # whose values StableHLO's reference interpreter gives at that op
    devices: int = 1            # the devices the execution ran on
    one_device: str = ""        # on several: "agrees"/"differs" on one device, or why it was not tried


def program_text(code: bytes) -> str:
    """The program as StableHLO text with its locations (what `pjrt-ref diff` reads and reports)."""
    module = parse_module(code, make_context())
    return module.operation.get_asm(enable_debug_info=True)


def replay(number: int, program: str, arguments: list[np.ndarray], plugin_path: str,
           folder: str) -> Replay:
    """Run the program (text) with `arguments` on cpu and on the plugin; diff if they differ.
    `folder` receives the diff's outcome (diff.json) and the first differing op alone (op/)."""
    what = f"execution {number}"
    try:
        theirs = shared_backend(plugin_path, RUN_TIMEOUT).run(program, arguments, what)
    except OtherBackendFailed as error:
        return Replay(number, "plugin failed", str(error))
    try:
        ours = shared_backend("cpu", RUN_TIMEOUT).run(program, arguments, what)
    except OtherBackendFailed as error:
        return Replay(number, "cpu failed", str(error))
    comparisons = [compare(expected, got) for expected, got in zip(ours, theirs)]
    if len(ours) == len(theirs) and all(c.agrees for c in comparisons):
        return Replay(number, "agrees", "the plugin's results equal cpu's within tolerance")
    return first_differing_op(number, folder, plugin_path)


def replay_on_devices(number: int, program: str, options: bytes, arguments: list[list[np.ndarray]],
                      plugin_path: str, folder: str) -> Replay:
    """Run a program compiled for several devices (`options`: its serialized compile options;
    `arguments[d]`: device d's) on cpu and on the plugin, each given that many devices,
    and compare every device's results. Where they differ, the same program without
    its shardings runs on one device of each (`on_one_device`): `pjrt-ref diff` names
    its first differing op, or its agreeing says the difference comes with partitioning."""
    differing = _differing_device(number, program, options, arguments, plugin_path)
    if differing.status != "differs":
        return differing
    return on_one_device(differing, program, options, arguments, plugin_path, folder)


def on_one_device(differing: Replay, program: str, options: bytes, arguments: list[list[np.ndarray]],
                  plugin_path: str, folder: str) -> Replay:
    """`differing` (a program on several devices) told by its one-device form (one_device.py)."""
    single, why_not = one_device_program(program)
    try:
        whole = global_arguments(program, options, arguments) if single is not None else []
    except Exception as error:      # the pieces do not fit the layouts pjrt-ref reads
        single, why_not = None, f"its arguments do not go back together: {str(error).splitlines()[0]}"
    if single is None:
        differing.one_device = f"not tried: {why_not}"
        return differing
    where = os.path.join(folder, "one-device")
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, "program.mlir"), "w") as handle:
        handle.write(single)
    for index, value in enumerate(whole):
        np.save(os.path.join(where, f"arg{index}.npy"), value)
    alone = replay(differing.execution, single, whole, plugin_path, where)
    if alone.status == "agrees":
        differing.one_device = "agrees"
        differing.detail += ("; the same program on one device agrees: the difference comes with "
                             "partitioning (the plugin's SPMD partitioner or collectives)")
        return differing
    alone.devices, alone.one_device = differing.devices, alone.status
    alone.detail = f"on {differing.devices} devices: {differing.detail}; on one device: {alone.detail}"
    return alone


def _differing_device(number: int, program: str, options: bytes, arguments: list[list[np.ndarray]],
                      plugin_path: str) -> Replay:
    """The first device and result whose values differ between cpu and the plugin (or "agrees")."""
    devices = len(arguments)
    what = f"execution {number} on {devices} devices"
    try:
        theirs = shared_backend(plugin_path, RUN_TIMEOUT, devices).run_on_devices(program, options, arguments, what)
    except OtherBackendFailed as error:
        return Replay(number, "plugin failed", str(error), devices=devices)
    try:
        ours = shared_backend("cpu", RUN_TIMEOUT, devices).run_on_devices(program, options, arguments, what)
    except OtherBackendFailed as error:
        return Replay(number, "cpu failed", str(error), devices=devices)
    for device, (expected, got) in enumerate(zip(ours, theirs)):
        if len(expected) != len(got):
            return Replay(number, "differs", f"device {device} gave {len(got)} results, cpu {len(expected)}",
                          devices=devices)
        for index, (e, g) in enumerate(zip(expected, got)):
            comparison = compare(e, g)
            if not comparison.agrees:
                return Replay(number, "differs", f"result {index} on device {device} of {devices}: "
                                                 f"{described(comparison)}", devices=devices)
    return Replay(number, "agrees", f"the plugin's results equal cpu's on each of {devices} devices",
                  devices=devices)


def described(comparison) -> str:
    """One line on how cpu's value (`reference`) and the plugin's (`other`) differ."""
    cpu, plugin = comparison.reference, comparison.other
    if comparison.problem:
        return f"{comparison.problem}: cpu {cpu.dtype}{list(cpu.shape)}, plugin {plugin.dtype}{list(plugin.shape)}"
    line = f"{comparison.differing} of {cpu.size} elements differ"
    if comparison.max_ulp:
        line += f", by up to {comparison.max_ulp} ULP"
    if comparison.worst:
        index, expected, got, _ = comparison.worst[0]
        line += f"; worst [{', '.join(str(int(i)) for i in index)}]: cpu {expected}, plugin {got}"
    return line


def first_differing_op(number: int, folder: str, plugin_path: str) -> Replay:
    """`pjrt-ref diff` of the execution kept in `folder` against the plugin."""
    outcome_path = os.path.join(folder, "diff.json")
    arguments = sorted((name for name in os.listdir(folder) if name.startswith("arg") and name.endswith(".npy")),
                       key=lambda name: int(name[3:-4]))
    command = package_home.python_command(
        "pjrt_ref.cli.main", "diff", os.path.join(folder, "program.mlir"),
        *[part for name in arguments for part in ("--arg", os.path.join(folder, name))],
        "--against", plugin_path, "--json", outcome_path, "--save-op", os.path.join(folder, "op"),
        "--timeout", str(RUN_TIMEOUT))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=DIFF_TIMEOUT,
                              env=package_home.python_environment())
    except subprocess.TimeoutExpired:
        return Replay(number, "differs", f"pjrt-ref diff did not finish within {DIFF_TIMEOUT:g} s")
    if not os.path.exists(outcome_path):
        said = (done.stderr or done.stdout or "").strip().splitlines()
        return Replay(number, "differs", f"pjrt-ref diff failed: {said[-1] if said else done.returncode}")
    with open(outcome_path) as handle:
        outcome = json.load(handle)
    if outcome["status"] == "agree":
        return Replay(number, "differs", "no op differs beyond tolerance on its own: "
                                         "small differences add up over the program")
    if outcome["status"] == "error":
        return Replay(number, "differs", f"pjrt-ref diff could not compare: {outcome['message']}")
    apart, third = odd_one_out(os.path.join(folder, "op"), plugin_path)
    return Replay(number, "differs", outcome["message"].splitlines()[0], outcome, apart, third)


def odd_one_out(op_folder: str, plugin_path: str) -> tuple[str, str]:
    """Run the first differing op alone on pjrt-ref, cpu, the plugin and StableHLO's own
    reference interpreter: (whose value stands apart, whose values the StableHLO
    interpreter gives)."""
    from pjrt_ref.interpreter.program import load

    try:
        with open(os.path.join(op_folder, "op.mlir")) as handle:
            text = handle.read()
        operands = [np.load(os.path.join(op_folder, f"arg{i}.npy"))
                    for i in range(len([n for n in os.listdir(op_folder) if n.endswith(".npy")]))]
        reference = [np.asarray(value) for value in load(text.encode())(*operands)]
        cpu = shared_backend("cpu", RUN_TIMEOUT).run(text, operands, "the first differing op")
        plugin = shared_backend(plugin_path, RUN_TIMEOUT).run(text, operands, "the first differing op")
    except Exception as error:     # the verdict is extra information: its failure is noted, not fatal
        return f"unknown ({str(error).splitlines()[0] if str(error) else type(error).__name__})", ""
    third = stablehlo_interpreter_sides(text, operands, {"pjrt-ref": reference, "cpu": cpu, "plugin": plugin})
    if _agree(reference, cpu):
        return "plugin", third          # pjrt-ref and XLA's cpu agree
    if _agree(cpu, plugin):
        return "pjrt-ref", third        # cpu and the plugin agree: pjrt-ref's reading of the spec is in question
    return "all differ", third


def stablehlo_interpreter_sides(text: str, operands: list[np.ndarray], values: dict[str, list]) -> str:
    """Whose values StableHLO's reference interpreter (`stablehlo.eval_module`, which nobody
    here wrote, run in a forked child since it aborts on ops it lacks) gives for the op:
    `pjrt-ref, cpu`, `none of them`, or `unavailable (why)`."""
    try:
        theirs = reference_results(text, operands, 0)
    except OracleUnavailable as why:
        return f"unavailable ({str(why).splitlines()[0]})"
    sides = [name for name, results in values.items() if _agree(theirs, results)]
    return ", ".join(sides) if sides else "none of them"


def _agree(expected: list, got: list) -> bool:
    return len(expected) == len(got) and all(compare(e, g).agrees for e, g in zip(expected, got))
