"""`pjrt-ref explain SCRIPT.py [ARGS...]`: what a JAX script asks of the plugin.

Runs the script in a child Python with `JAX_PLATFORMS=pjrt_ref` and
`PJRT_REF_LOG_API=1`, reads the API log from its stderr and prints:

1. how often each PJRT entry point was called (by phase: setup, compile,
   transfers, execute, events, queries);
2. the programs compiled, in order (their module names);
3. the ordered calls for one jit, from its PJRT_Client_Compile through its
   first PJRT_LoadedExecutable_Execute to the calls just after it (argument
   transfers, completion events, reading the result back).

By default that jit is the first one whose name is a function the script
defines (`jit_f` for `def f`), else the first compiled; `--jit NAME` picks
another.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import Counter

# PJRT_* entry points (the Layouts and Shardings extensions' included), and
# PLUGIN_Profiler_* (the profiler extension, capi/profiler_extension.py)
_CALL = re.compile(r"pjrt-ref: -> ((?:PJRT|PLUGIN)_\w+) ?(.*)$")
_RETURN = re.compile(r"pjrt-ref: <- ((?:PJRT|PLUGIN)_\w+) (ok|error)\s*(.*)$")

PHASES = (
    ("teardown", ("PJRT_Executable_Destroy", "PJRT_LoadedExecutable_Destroy", "PJRT_Client_Destroy")),
    ("setup", ("PJRT_Plugin_", "PJRT_Client_Create", "PJRT_Client_Platform", "PJRT_Client_Devices",
               "PJRT_Client_Addressable", "PJRT_Client_LookupDevice", "PJRT_Client_TopologyDescription",
               "PJRT_TopologyDescription_", "PJRT_Device", "PJRT_Memory_")),
    ("compile", ("PJRT_Client_Compile", "PJRT_Executable_", "PJRT_LoadedExecutable_GetExecutable",
                 "PJRT_LoadedExecutable_Addressable", "PJRT_LoadedExecutable_GetDeviceAssignment",
                 "PJRT_Layouts_PJRT_Executable_", "PJRT_Shardings_PJRT_Executable_")),
    ("transfer", ("PJRT_Client_BufferFromHostBuffer", "PJRT_Buffer_ToHostBuffer", "PJRT_Buffer_CopyTo",
                  "PJRT_Client_CreateBuffersForAsyncHostToDevice", "PJRT_AsyncHostToDevice")),
    ("execute", ("PJRT_LoadedExecutable_Execute",)),
    ("events", ("PJRT_Event_",)),
    ("buffers", ("PJRT_Buffer_", "PJRT_Layouts_PJRT_Buffer_")),
    ("layouts", ("PJRT_Layouts_",)),   # default layouts and the layout objects (Layouts extension)
    ("errors", ("PJRT_Error_",)),
    ("profiler", ("PLUGIN_Profiler_",)),
    ("executables", ("PJRT_LoadedExecutable_",)),
)


DISPLAY_ORDER = ("setup", "compile", "transfer", "execute", "events", "buffers", "layouts",
                 "executables", "errors", "teardown", "other")


def phase_of(name: str) -> str:
    for phase, prefixes in PHASES:
        if name.startswith(prefixes):
            return phase
    return "other"


def parse_log(text: str) -> list[dict]:
    """Calls in order: {name, inputs, status, outputs} (status None if no return line)."""
    calls: list[dict] = []
    open_calls: dict[str, list[dict]] = {}
    for line in text.splitlines():
        match = _CALL.search(line)
        if match:
            call = {"name": match.group(1), "inputs": match.group(2).strip(), "status": None, "outputs": ""}
            calls.append(call)
            open_calls.setdefault(call["name"], []).append(call)
            continue
        match = _RETURN.search(line)
        if match and open_calls.get(match.group(1)):
            call = open_calls[match.group(1)].pop()
            call["status"], call["outputs"] = match.group(2), match.group(3).strip()
    return calls


def compiled_names(calls: list[dict]) -> list[tuple[int, str]]:
    """(call index, module name) of each successful Compile."""
    found = []
    for index, call in enumerate(calls):
        if call["name"] == "PJRT_Client_Compile":
            match = re.search(r"name=(\S+)", call["outputs"])
            found.append((index, match.group(1) if match else "?"))
    return found


def pick_jit(compiles: list[tuple[int, str]], script_text: str, wanted: str | None) -> tuple[int, str] | None:
    if not compiles:
        return None
    if wanted:
        for index, name in compiles:
            if wanted in name:
                return index, name
        return None
    defined = set(re.findall(r"^\s*def\s+(\w+)", script_text, re.M))
    for index, name in compiles:
        if name.removeprefix("jit_") in defined:
            return index, name
    return compiles[0]


def jit_sequence(calls: list[dict], start: int, limit: int = 80) -> list[dict]:
    """Calls from the Compile at `start` through its first Execute and what follows
    (until the next Compile or Execute, or `limit` calls)."""
    handle = re.search(r"executable=(0x[0-9a-f]+)", calls[start]["outputs"])
    handle = handle.group(1) if handle else None
    sequence = []
    executed = False
    for call in calls[start:]:
        if sequence and call["name"] == "PJRT_Client_Compile":
            break
        if call["name"] == "PJRT_LoadedExecutable_Execute":
            if executed:
                break
            if handle is None or handle in call["inputs"]:
                executed = True
            else:
                continue
        sequence.append(call)
        if len(sequence) >= limit:
            break
    return sequence


def summary(calls: list[dict], script_text: str, wanted: str | None = None) -> str:
    lines = [f"{len(calls)} PJRT C API calls, {len({c['name'] for c in calls})} distinct entry points"]
    errors = [c for c in calls if c["status"] == "error"]
    if errors:
        lines.append(f"{len(errors)} returned an error (first: {errors[0]['name']} {errors[0]['outputs']})")
    counts = Counter(c["name"] for c in calls)
    by_phase: dict[str, list[str]] = {}
    for name in counts:
        by_phase.setdefault(phase_of(name), []).append(name)
    lines.append("")
    lines.append("calls per entry point:")
    for phase in DISPLAY_ORDER:
        names = by_phase.get(phase)
        if not names:
            continue
        lines.append(f"  {phase}:")
        for name in sorted(names, key=lambda n: -counts[n]):
            lines.append(f"    {counts[name]:5d}  {name}")
    compiles = compiled_names(calls)
    lines.append("")
    lines.append("programs compiled, in order: " + (", ".join(n for _, n in compiles) or "none"))
    chosen = pick_jit(compiles, script_text, wanted)
    if chosen is None:
        return "\n".join(lines)
    start, name = chosen
    lines.append("")
    lines.append(f"the conversation for {name} (compile -> first execute -> what follows):")
    for step, call in enumerate(jit_sequence(calls, start), 1):
        status = {"ok": "", None: "  (no return logged)"}.get(call["status"], f"  ERROR {call['outputs']}")
        text = f"  {step:3d}. [{phase_of(call['name']):8}] {call['name']}"
        if call["inputs"]:
            text += f"  {call['inputs']}"
        if call["status"] == "ok" and call["outputs"]:
            text += f"  -> {call['outputs']}"
        lines.append(text + status)
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pjrt-ref explain",
                                     description="Run a JAX script on pjrt-ref and explain its PJRT calls.")
    parser.add_argument("script", help="a Python script using JAX")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    parser.add_argument("--jit", metavar="NAME", help="show the calls of the compiled program whose name contains NAME")
    parser.add_argument("--log", metavar="FILE", help="also save the raw API log to FILE")
    parser.add_argument("--timeout", type=float, default=600, help="seconds before the script is stopped")
    return parser


def main(argv: list[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    env = dict(os.environ, JAX_PLATFORMS="pjrt_ref", PJRT_REF_LOG_API="1")
    proc = subprocess.run([sys.executable, options.script, *options.args], env=env,
                          capture_output=True, text=True, timeout=options.timeout)
    log_lines = [l for l in proc.stderr.splitlines() if l.startswith("pjrt-ref: ")]
    other = [l for l in proc.stderr.splitlines() if not l.startswith("pjrt-ref: ")]
    if options.log:
        with open(options.log, "w", encoding="utf-8") as f:
            f.write("\n".join(log_lines) + "\n")
    print(f"$ JAX_PLATFORMS=pjrt_ref PJRT_REF_LOG_API=1 python {options.script}"
          f"{' ' + ' '.join(options.args) if options.args else ''}  (exit {proc.returncode})")
    if proc.stdout.strip():
        print("script output:")
        for line in proc.stdout.rstrip().splitlines():
            print(f"  | {line}")
    if proc.returncode != 0 and other:
        print("script stderr (last lines):")
        for line in other[-10:]:
            print(f"  | {line}")
    print()
    with open(options.script, encoding="utf-8", errors="replace") as f:
        script_text = f.read()
    print(summary(parse_log("\n".join(log_lines)), script_text, options.jit))
    return 0 if proc.returncode == 0 else 1
