"""The pytest plugin every `pjrt-ref *-tests` run loads (`-p`): each test's
start and outcome, one JSON line each, appended to the file named by
PJRT_REF_SUITE_PROGRESS as they happen.

Why: a test can hang a whole pytest process in a way no in-process timeout
can end. PyTorch/XLA indexing a tensor with an XLA scalar holds the GIL
while it waits for an execution that needs the GIL to run in pjrt-ref
(docs/architecture.md, "The GIL, and a Python of its own"); pytest-timeout's signal and its watchdog
thread both need the GIL too. So the runner (frameworks/suite_runner.py)
watches this file from outside, kills a run in which nothing has finished
for too long, records the tests that had started as hung, and runs the
rest. Under xdist the hooks run in the controlling process, which hears of
every worker's tests.
"""
from __future__ import annotations

import json

from pjrt_ref import settings
from pjrt_ref.frameworks.suite_runner import XDIST_HEADER


def _write(record: dict) -> None:
    path = settings.get("PJRT_REF_SUITE_PROGRESS")
    if not path:
        return
    with open(path, "a") as handle:
        handle.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid, location) -> None:
    _write({"start": nodeid})


def pytest_runtest_logreport(report) -> None:
    """A test's outcome: its call, or a setup/teardown that failed or skipped it."""
    if report.when != "call" and report.passed:
        return
    if report.when == "teardown" and report.skipped:
        return
    status = report.outcome if report.when == "call" or report.skipped else "error"
    record = {"end": report.nodeid, "status": status, "reason": _first_line(report)}
    if status in ("failed", "error"):
        record["detail"] = (report.longreprtext or "")[-20000:]     # the error's end says most
    _write(record)


def _first_line(report) -> str:
    """What junit's message attribute would say: the skip reason, or the crash line."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")[:300]
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", "") or report.longreprtext or ""
    # xdist heads a crashed worker's report with "[gw0] linux -- Python 3.11.7 /path": not the news
    lines = [line for line in text.strip().splitlines() if line.strip() and not XDIST_HEADER.match(line)]
    return lines[0][:300] if lines else ""
