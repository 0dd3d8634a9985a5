"""`pjrt-ref conformance PATH...`: run StableHLO test files on pjrt-ref.

    pjrt-ref conformance stablehlo/testdata stablehlo/tests/interpret \\
        --jobs 2 --json results.json -k add_ --timeout 60

Every case (see `testfile.py`) ends as pass, fail (a check did not hold),
error (anything else went wrong), unsupported (pjrt-ref does not implement
something it needs) or timeout. Cases run in worker processes (`pool.py`),
so a case that crashes or hangs costs only itself.

A case checks itself (`check.*` ops or `@check.*` custom calls), except a
*dynamic case*: an `@main` that takes arguments and has no checks, like the
JAX shape-polymorphic exports in upstream's `stablehlo/testdata/dynamic`
(leading `tensor<i64>` dimension sizes, then tensors with `?` dimensions).
Upstream only round-trips those through serialization. Here such a case
passes when (`dynamic.py`, `oracle.py`):

1. serialized to a portable artifact at the current StableHLO version and
   deserialized, the module prints exactly as the original (else: fail);
2. pjrt-ref runs it on synthesized arguments: every dimension size and `?`
   dimension 3, seeded random values (integers 0..2, floats multiples of
   1/4 in [-2, 2]) (an exception here: error);
3. its results agree with StableHLO's C++ reference interpreter
   (`stablehlo.eval_module`, in a forked child) run on the module made
   static: argument types pinned, dimension sizes made constants, shapes
   refined with XLA's `refine_polymorphic_shapes`, `@shape_assertion`
   calls removed. Integers and booleans must be equal, floats within 3 ULP
   or a small relative tolerance (else: fail, naming the result, the first
   differing index and both values).

A dynamic case is unsupported only when the oracle cannot run the program
(the message says why); its passing message says what was checked. The exit status is 0 when
no case failed, errored or timed out, 1 when some did, 2 when there was
nothing to run.

`--json FILE` writes
    {"summary": {"total", "passed", "failed", "errors", "unsupported",
                 "timeouts", "seconds"},
     "cases": [{"file", "case", "status", "message", "seconds"}, ...]}
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

from pjrt_ref.conformance.pool import WorkerPool
from pjrt_ref.conformance.testfile import Case, cases_in_file, find_test_files
from pjrt_ref.conformance.worker import ERROR, FAIL, PASS, TIMEOUT, UNSUPPORTED

DEFAULT_TIMEOUT = 60.0
_SUMMARY_KEYS = ((PASS, "passed"), (FAIL, "failed"), (ERROR, "errors"),
                 (UNSUPPORTED, "unsupported"), (TIMEOUT, "timeouts"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pjrt-ref conformance",
        description="Run StableHLO test files (JAX-generated testdata or interpreter "
                    "tests with check ops) on pjrt-ref's interpreter.")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="test files or directories (searched for *.mlir)")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: the number of CPUs)")
    parser.add_argument("--json", metavar="FILE", help="write every case's result as JSON")
    parser.add_argument("-k", dest="substring", metavar="SUBSTRING",
                        help="only cases whose 'file::case' contains SUBSTRING")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"per-case time limit (default {DEFAULT_TIMEOUT:g}; 0 = none)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="print a line for every case that did not pass")
    return parser


def collect_cases(paths: list[str], substring: str | None) -> tuple[list[Case], list[dict]]:
    """The cases to run, and results for files that could not be read."""
    cases, unreadable = [], []
    for path in find_test_files(paths):
        try:
            file_cases = cases_in_file(path)
        except OSError as error:
            unreadable.append(_record(Case(path, 0, "main", 1, "main"),
                                      (ERROR, f"cannot read the file: {error}", 0.0)))
            continue
        cases.extend(c for c in file_cases if not substring or substring in c.id)
    return cases, unreadable


def _record(case: Case, result: tuple) -> dict:
    status, message, seconds = result
    if status != PASS and case.upstream_note:
        message += f" [upstream does not interpret this file either: {case.upstream_note}]"
    return {"file": case.file, "case": case.name, "status": status,
            "message": message, "seconds": round(seconds, 4)}


def summarize(records: list[dict], seconds: float) -> dict:
    counts = Counter(r["status"] for r in records)
    summary = {"total": len(records)}
    for status, key in _SUMMARY_KEYS:
        summary[key] = counts.get(status, 0)
    summary["seconds"] = round(seconds, 2)
    return summary


def summary_line(summary: dict) -> str:
    total = summary["total"]
    rate = f" ({100.0 * summary['passed'] / total:.1f}%)" if total else ""
    return (f"{total} cases: {summary['passed']} passed{rate}, {summary['failed']} failed, "
            f"{summary['errors']} errors, {summary['unsupported']} unsupported, "
            f"{summary['timeouts']} timeouts in {summary['seconds']:.1f} s")


class Progress:
    """A one-line progress bar on stderr, drawn only when it is a terminal."""

    def __init__(self, total: int, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total = total
        self.done = 0
        self.counts: Counter = Counter()
        self.start = time.monotonic()
        self._last_draw = 0.0

    def update(self, status: str) -> None:
        self.done += 1
        self.counts[status] += 1
        now = time.monotonic()
        if self.enabled and (now - self._last_draw > 0.1 or self.done == self.total):
            self._last_draw = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        width = 20
        filled = width * self.done // max(1, self.total)
        bar = "#" * filled + "-" * (width - filled)
        c = self.counts
        self.stream.write(
            f"\r[{bar}] {self.done}/{self.total} pass {c[PASS]} fail {c[FAIL]} "
            f"err {c[ERROR]} unsup {c[UNSUPPORTED]} tmo {c[TIMEOUT]} {now - self.start:.0f}s")
        self.stream.flush()

    def clear(self) -> None:
        """Erase the bar (before printing a line of text under it)."""
        if self.enabled:
            self.stream.write("\r\x1b[2K")
            self._last_draw = 0.0

    def finish(self) -> None:
        if self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()


def run_cases(cases: list[Case], jobs: int, timeout: float | None,
              on_record=None) -> list[dict]:
    """Run `cases` on a worker pool; their records, in the order of `cases`
    (each worker computes on one thread: conformance/preload.py)."""
    records: list = [None] * len(cases)

    def on_result(index: int, result: tuple) -> None:
        records[index] = _record(cases[index], result)
        if on_record is not None:
            on_record(records[index])

    tasks = ((i, (c.file, c.chunk, c.function)) for i, c in enumerate(cases))
    WorkerPool(jobs, timeout).run(tasks, on_result)
    return records


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start = time.monotonic()
    cases, records = collect_cases(args.paths, args.substring)
    if not cases and not records:
        print("pjrt-ref conformance: no test cases found", file=sys.stderr)
        return 2
    progress = Progress(len(cases) + len(records))
    for record in records:
        progress.update(record["status"])

    def on_record(record: dict) -> None:
        progress.update(record["status"])
        if args.verbose and record["status"] != PASS:
            progress.clear()
            print(f"{record['status'].upper()} {record['file']}::{record['case']}: "
                  f"{record['message']}", flush=True)

    timeout = args.timeout if args.timeout and args.timeout > 0 else None
    try:
        records += run_cases(cases, args.jobs, timeout, on_record)
    except KeyboardInterrupt:
        progress.finish()
        print("interrupted", file=sys.stderr)
        return 130
    progress.finish()
    summary = summarize(records, time.monotonic() - start)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"summary": summary, "cases": records}, handle, indent=1)
    print(summary_line(summary))
    bad = summary["failed"] + summary["errors"] + summary["timeouts"]
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
