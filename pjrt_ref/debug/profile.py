"""PJRT_REF_PROFILE=FILE.json: a Chrome trace-event file of a run.

One complete ("X") event per compile, per execute and per op, in
microseconds since the recorder started; ops carry their location and the
shapes of their operands and results in `args`. The file is the JSON object
format `{"traceEvents": [...]}` that Perfetto (ui.perfetto.dev) and
chrome://tracing open. It is written when the process exits, and whenever
`flush()` is called.

`pjrt-ref profile FILE.json` (`report`) prints the ops and the source lines
that took the most time, by self time (an op's time minus the time of the
ops nested in it, e.g. a while loop's body ops).
"""
from __future__ import annotations

import atexit
import json
import os
import re
import threading
import time

from pjrt_ref import settings
from pjrt_ref.interpreter.instrument import type_text
from pjrt_ref.process_files import per_process, process_index

_RECORDERS: dict[str, "Recorder"] = {}
_LOCK = threading.Lock()


class Recorder:
    """Collects trace events for one output file.

    Each thread that records gets a name row (Chrome's `thread_name`
    metadata): a device's thread is named after its process of the
    StableHLO grid, `pjrt_ref process (replica, partition)`. The file also
    says when it started (Unix time) and, in a multi-process job, which
    process wrote it, so that `merge` can line several files up.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.events: list[dict] = []
        self.origin = time.perf_counter()
        self.origin_unix_us = time.time() * 1e6
        self.process_index = process_index()
        self.pid = os.getpid()
        self._named_threads: set[int] = set()
        atexit.register(self.flush)

    def _micros(self, seconds: float) -> float:
        return round((seconds - self.origin) * 1e6, 3)

    def slice(self, name: str, category: str, start: float, end: float, args: dict | None = None) -> None:
        """A complete event from `start` to `end` (time.perf_counter seconds)."""
        thread = threading.get_native_id()
        if thread not in self._named_threads:
            self._named_threads.add(thread)
            self.events.append(_metadata("thread_name", self.pid, thread, threading.current_thread().name))
        event = {"name": name, "cat": category, "ph": "X", "ts": self._micros(start),
                 "dur": round((end - start) * 1e6, 3), "pid": self.pid, "tid": thread}
        if args:
            event["args"] = args
        self.events.append(event)

    def op_slice(self, op, operands, results, start: float, end: float) -> None:
        self.slice(op.name.removeprefix("stablehlo."), "op", start, end, op_args(op, operands, results))

    def flush(self) -> None:
        with _LOCK:
            events = list(self.events)
        with open(self.path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms",
                       "otherData": {"origin_unix_us": self.origin_unix_us,
                                     "process_index": self.process_index}}, f)


def op_args(op, operands, results) -> dict:
    """An op slice's arguments: full op name, MLIR location, operand and result types."""
    return {"op": op.name, "location": op.location,
            "operands": [type_text(v) for v in operands],
            "results": [type_text(v) for v in results]}


def _metadata(kind: str, pid, tid, name: str) -> dict:
    """A Chrome metadata event naming a row group (`process_name`) or a row (`thread_name`)."""
    return {"name": kind, "cat": "__metadata", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def recorder(path: str) -> Recorder:
    """The process's recorder for `path` (one per file, shared by programs; in a
    multi-process job, process i writes `path` with `.process<i>` added)."""
    path = per_process(path)
    with _LOCK:
        found = _RECORDERS.get(path)
        if found is None:
            found = _RECORDERS[path] = Recorder(path)
        return found


def from_environment() -> Recorder | None:
    """The recorder of PJRT_REF_PROFILE's file (read at each call), or None."""
    path = settings.get("PJRT_REF_PROFILE")
    return recorder(path) if path else None


# ------------------------------------------------------------------ report
_LINE = re.compile(r"^(.*?:\d+):\d+")


def source_line(location: str) -> str:
    """`file.py:12` from `file.py:12:5 (jit(f)/log)`; the location otherwise."""
    match = _LINE.match(location or "")
    return match.group(1) if match else (location or "<unknown>")


def self_times(events: list[dict]) -> list[tuple[dict, float]]:
    """(event, self time in us) for every X event: its duration minus its children's."""
    result = []
    by_thread: dict = {}
    for event in events:
        if event.get("ph") == "X":
            by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list] = []          # [event, children time]
        for event in thread_events:
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= event["ts"]:
                done = stack.pop()
                result.append((done[0], done[0]["dur"] - done[1]))
            if stack:
                stack[-1][1] += event["dur"]
            stack.append([event, 0.0])
        while stack:
            done = stack.pop()
            result.append((done[0], done[0]["dur"] - done[1]))
    return result


def dispatch_share_line(timed: list[tuple[dict, float]]) -> str:
    """How much of executing was outside every op: the interpreter's own
    Python between ops (running the plan, moving arguments and results) and
    the PJRT layer around it, i.e. the executes' self time."""
    executing = sum(e["dur"] for e, _ in timed if e.get("cat") == "execute")
    outside = sum(spent for e, spent in timed if e.get("cat") == "execute")
    share = 100 * outside / executing if executing else 0.0
    return (f"outside ops (dispatch: plan loop, arguments, results): {outside / 1e3:.2f} ms, "
            f"{share:.1f}% of executing")


def merge(paths: list[str]) -> dict:
    """One Chrome trace from the files of a job's processes: a row group per
    process (named `pjrt-ref process i`), a row per device thread inside it,
    times shifted onto one clock (each file's start in Unix time)."""
    loaded = []
    for order, path in enumerate(paths):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        other = data.get("otherData", {}) if isinstance(data, dict) else {}
        index = other.get("process_index")
        loaded.append((order if index is None else index, other.get("origin_unix_us", 0.0),
                       data["traceEvents"] if isinstance(data, dict) else data))
    start = min(origin for _, origin, _ in loaded)
    events = []
    for index, origin, file_events in sorted(loaded, key=lambda item: item[0]):
        events.append(_metadata("process_name", index, 0, f"pjrt-ref process {index}"))
        for event in file_events:
            event = dict(event, pid=index)
            if "ts" in event:
                event["ts"] = round(event["ts"] + origin - start, 3)
            events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def report(path: str, top: int = 10, events: list | None = None) -> str:
    """Top ops and top source lines by self time, as text (of `path`'s events,
    or of `events` when given, `path` then naming them)."""
    if events is None:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        events = data["traceEvents"] if isinstance(data, dict) else data
    timed = self_times(events)
    totals = {cat: sum(e["dur"] for e, _ in timed if e.get("cat") == cat) for cat in ("compile", "execute")}
    ops = [(e, t) for e, t in timed if e.get("cat") == "op"]
    lines = [f"{path}: {totals['compile'] / 1e3:.2f} ms compiling, {totals['execute'] / 1e3:.2f} ms executing, "
             f"{len(ops)} op runs"]
    op_total = sum(t for _, t in ops) or 1.0
    lines.append(dispatch_share_line(timed))
    for title, key in (("op", lambda e: e["args"].get("op", e["name"])),
                       ("source line", lambda e: source_line(e["args"].get("location", "")))):
        groups: dict[str, list[float]] = {}
        for event, spent in ops:
            entry = groups.setdefault(key(event), [0.0, 0])
            entry[0] += spent
            entry[1] += 1
        ranked = sorted(groups.items(), key=lambda item: -item[1][0])[:top]
        lines.append("")
        lines.append(f"top {title}s by self time:")
        lines.append(f"  {'ms':>9} {'%':>6} {'runs':>6}  {title}")
        for name, (spent, count) in ranked:
            lines.append(f"  {spent / 1e3:9.3f} {100 * spent / op_total:5.1f}% {count:6d}  {name}")
    return "\n".join(lines)
