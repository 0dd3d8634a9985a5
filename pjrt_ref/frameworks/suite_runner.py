"""Run a framework's own test files on its reference backend and on pjrt_ref, and compare.

A framework author tests a plugin with the framework's own suite. This is
the machinery `pjrt-ref jax-tests` (frameworks/jax/suite.py) and `pjrt-ref
torch-tests` (frameworks/torch/suite.py) share: each framework's module
says which files to run by default and how each backend is chosen (an
environment for the pytest process); this module runs pytest once per
backend with a junit report, reads every test id's outcome, and prints per
file how many passed, failed and were skipped on each backend, then every
test id that passes on the reference backend and not on pjrt_ref, with the
first line of its error. A framework whose CI runs each file in a process
of its own (PyTorch/XLA's run_tests.sh) gets one pytest process per file.

The reference backend's outcomes depend only on the framework's version and
the run's settings, not on pjrt-ref, so `--reference-from DIR` reads them
from an earlier run kept with `--keep DIR` instead of running them again;
each kept run records its settings (`BACKEND.json`) and a mismatch is refused.

A test that hangs its pytest process where no in-process timeout can reach
(progress_plugin.py says how) does not hang the command: when no test has
finished for `--stall` seconds the run is killed, the tests it had started
are reported as hung, and the rest run in a new pytest process.

pytest runs with an empty configuration (the checkout's own ini could, as
JAX's does, turn every warning into an error), from the checkout's root.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from typing import Callable

@dataclass
class Outcome:
    """One test id's result on one backend: passed, failed, error or skipped, why, and its seconds."""
    status: str
    reason: str = ""
    seconds: float = 0.0


@dataclass
class Run:
    """One pytest run: outcomes by test id, and its wall time."""
    backend: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    seconds: float = 0.0


# The test id of a file's collection error (pytest reports it as a <testcase>
# with an empty classname, named by the module's dotted path).
COLLECTION = "(collection)"


def test_id(case: ElementTree.Element, root: str) -> str:
    """`tests/lax_test.py::LaxTest::testOp` from a junit <testcase> (classname is dotted);
    `tests/x_test.py::(collection)` for a file that failed to collect."""
    classname, name = case.get("classname", ""), _without_surplus_bracket(case.get("name", ""))
    if not classname and name:
        candidate = name.replace(".", "/") + ".py"
        if os.path.exists(os.path.join(root, candidate)):
            return f"{candidate}::{COLLECTION}"
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):    # the longest prefix that is a test file
        candidate = "/".join(parts[:cut]) + ".py"
        if os.path.exists(os.path.join(root, candidate)):
            return "::".join([candidate, *parts[cut:], name])
    return "::".join([classname, name])


def _without_surplus_bracket(name: str) -> str:
    """pytest's junit report appends a "]" to a name with a "[" inside it that is not a
    parameter id (JAX's `testArgAllReduce_shape=float32[4]_axis=0` is written
    `...axis=0]`), where the progress records keep the node id: the ids must match."""
    while name.endswith("]") and name.count("]") > name.count("["):
        name = name[:-1]
    return name


def first_line(text: str) -> str:
    """The first informative line of a failure message (errors say what happened first;
    xdist heads a crashed worker's report with `[gw0] linux -- Python ...`, which is not news)."""
    for line in (text or "").splitlines():
        line = line.strip()
        if line and not line.startswith(("Traceback", "File ", "^")) and not XDIST_HEADER.match(line):
            return line[:300]
    return ""


XDIST_HEADER = re.compile(r"^\[gw\d+\] \S+ -- Python ")


def raised(text: str) -> str:
    """The last `SomeError: message` line of a traceback (pytest prefixes it with `E`)."""
    for line in reversed((text or "").splitlines()):
        match = re.match(r"^(?:E\s+)?(\w+(?:Error|Exception|Exit)\b.*)$", line.strip())
        if match:
            return match.group(1)[:300]
    return ""


def outcome_of(case: ElementTree.Element) -> Outcome:
    seconds = float(case.get("time") or 0.0)
    for tag, status in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        node = case.find(tag)
        if node is not None:
            message = node.get("message") or ""
            if message == "collection failure":       # the cause is at the traceback's end
                message = raised(node.text) or message
            return Outcome(status, first_line(message or node.text or ""), seconds)
    return Outcome("passed", "", seconds)


def read_junit(path: str, root: str) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        identifier = test_id(case, root)
        outcome = outcome_of(case)
        previous = outcomes.get(identifier)
        # subtests and xdist reruns can report one id twice: a failure wins
        if previous is None or previous.status == "passed":
            outcomes[identifier] = outcome
    return outcomes


def pytest_command(files: list[str], junit: str, options: argparse.Namespace, ini: str) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-c", ini, "--rootdir", options.checkout,
               "-p", "no:cacheprovider", f"--junitxml={junit}", "-o", "junit_family=xunit1",
               "--continue-on-collection-errors"]     # a file that cannot import fails alone
    for plugin in options.pytest_plugins:
        command += ["-p", plugin]
    if options.workers > 0:
        command += ["-n", str(options.workers)]
    if options.k:
        command += ["-k", options.k]
    if options.timeout:
        command += [f"--timeout={options.timeout}"]
    return command + files


def run_backend(backend: str, suite: "Suite", options: argparse.Namespace, scratch: str) -> Run:
    """Run the files on one backend, in as few pytest processes as the files
    allow (`process_groups`), each with the environment its devices need."""
    started = time.perf_counter()
    groups = process_groups(suite, options)
    outcomes: dict[str, Outcome] = {}
    for index, (devices, group) in enumerate(groups):
        name = backend if len(groups) == 1 else f"{backend}.group{index}"
        env = suite.environment(backend, argparse.Namespace(**{**vars(options), "devices": devices}))
        outcomes.update(run_files(name, env, group, options, scratch))
    return Run(backend, outcomes, time.perf_counter() - started)


def process_groups(suite: "Suite", options: argparse.Namespace) -> list[tuple[int, list[str]]]:
    """(devices, files) for each pytest process of a run.

    Where the framework's CI gives each file a process of its own (a file may
    change process-wide state when it is imported), one process per file.
    Otherwise the files share processes, one per device count: a file that
    asks the framework for more devices than `--devices` (JAX's
    `jtu.request_cpu_devices(8)`) gets them only if the backends of its
    process have not started yet, which in a process shared with other files
    depends on the order of collection; so files asking for the same count
    share a process started with that count on both backends."""
    def devices(file: str) -> int:
        asked = suite.devices_asked(options.checkout, file.split("::", 1)[0]) if suite.devices_asked else 1
        return max(options.devices, asked)

    if options.process_per_file:
        return [(devices(file), [file]) for file in options.files]
    by_count: dict[int, list[str]] = {}
    for file in options.files:
        by_count.setdefault(devices(file), []).append(file)
    return sorted(by_count.items())


def run_files(name: str, env: dict[str, str], files: list[str], options: argparse.Namespace,
              scratch: str) -> dict[str, Outcome]:
    """Outcomes of one pytest process tree named `name` in `scratch`: from
    its junit XML, or, for a run killed because nothing finished for
    `options.stall` seconds, from the progress plugin's records, the tests
    it had started marked hung, and the rest run again without them."""
    outcomes: dict[str, Outcome] = {}
    for segment in itertools.count():
        stalled = run_segment(name, env, files, options, scratch, segment, deselect=sorted(outcomes))
        if not stalled:
            junit = os.path.join(scratch, f"{name}.xml")
            if not os.path.exists(junit):
                raise RuntimeError(f"pytest ({name}) wrote no report; see {scratch}/{name}.log")
            outcomes.update(read_junit(junit, options.checkout))
            if not options.k:           # -k may leave a file nothing to run; otherwise that is an error
                outcomes.update(files_not_run(files, outcomes, log_path(scratch, name, segment)))
            break
        progress = read_progress(progress_path(scratch, name, segment))
        outcomes.update(progress.finished)
        stuck_before_tests = [f"{files[0]}::{COLLECTION}" if len(files) == 1 else COLLECTION]
        for identifier in progress.running or stuck_before_tests:
            outcomes[identifier] = Outcome("failed", f"hung: nothing finished for {options.stall} s "
                                                     f"(the run was killed and went on without it)")
        if not progress.running:
            break                                    # stuck before any test: nothing left to skip
    return outcomes


def files_not_run(files: list[str], outcomes: dict[str, Outcome], log: str) -> dict[str, Outcome]:
    """A `FILE::(collection)` error for each file the run left without any
    outcome (pytest found no test in it, or stopped before collecting it),
    with pytest's own error line from the log where it printed one, so a
    file never shows as a clean 0/0/0."""
    ran = {identifier.split("::", 1)[0] for identifier in outcomes}
    missing = [file.split("::", 1)[0] for file in files if file.split("::", 1)[0] not in ran]
    if not missing:
        return {}
    said = pytest_error(log)
    reason = "pytest ran no test of it" + (f" ({said})" if said else "")
    return {f"{file}::{COLLECTION}": Outcome("error", reason) for file in missing}


def pytest_error(log: str) -> str:
    """pytest's last `ERROR` line in `log` (a file it could not find, a usage error), or ""."""
    try:
        with open(log, errors="replace") as handle:
            errors = [line.strip() for line in handle if line.startswith("ERROR")]
    except OSError:
        return ""
    return first_line(errors[-1]) if errors else ""


def log_path(scratch: str, name: str, segment: int) -> str:
    return os.path.join(scratch, f"{name}.log" if segment == 0 else f"{name}.{segment}.log")


def run_segment(name: str, env: dict[str, str], files: list[str], options: argparse.Namespace,
                scratch: str, segment: int, deselect: list[str]) -> bool:
    """One pytest process tree; True if it stalled and was killed."""
    junit = os.path.join(scratch, f"{name}.xml")
    if os.path.exists(junit):
        os.remove(junit)                 # a kept directory's report from an earlier run
    ini = os.path.join(scratch, "pytest.ini")
    with open(ini, "w") as handle:
        handle.write("[pytest]\n")      # the checkout's own ini could make every warning an error
    command = pytest_command(files, junit, options, ini)
    for identifier in deselect:
        command += ["--deselect", identifier]
    progress = progress_path(scratch, name, segment)
    open(progress, "w").close()
    env = {**own_pytest_environment(env), "PJRT_REF_SUITE_PROGRESS": progress}
    log = open(log_path(scratch, name, segment), "w") if not options.verbose else None
    process = subprocess.Popen(command, cwd=options.checkout, env=env, start_new_session=True,
                               stdout=log, stderr=subprocess.STDOUT if log else None)
    try:
        return wait_or_stall(process, progress, options.stall)
    finally:
        if log:
            log.close()


def own_pytest_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` without what an enclosing pytest run sets for its own tests (a run started
    from a test under pytest-xdist inherits PYTEST_XDIST_WORKER, and its controller would
    take itself for a worker of that run)."""
    return {k: v for k, v in env.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}


def wait_or_stall(process: subprocess.Popen, progress: str, stall: float) -> bool:
    """Wait for the process; kill its whole group if `progress` has not grown for `stall` s."""
    try:
        while True:
            try:
                process.wait(timeout=min(5.0, stall or 5.0))
                return False
            except subprocess.TimeoutExpired:
                if stall and time.time() - os.path.getmtime(progress) > stall:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    return True
    except BaseException:                 # Ctrl-C: the run's own session would outlive us
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        raise


def progress_path(scratch: str, name: str, segment: int) -> str:
    return os.path.join(scratch, f"{name}.progress.{segment}.jsonl")


@dataclass
class Progress:
    """What the progress plugin recorded: finished tests' outcomes, and the started ones still running."""
    finished: dict[str, Outcome]
    running: list[str]


def failure_details(scratch: str, name: str) -> dict[str, str]:
    """Each failed test's whole error text, as the progress plugin recorded it in
    every segment of the run `name` (a killed segment leaves no junit report)."""
    details: dict[str, str] = {}
    for segment in itertools.count():
        path = progress_path(scratch, name, segment)
        if not os.path.exists(path):
            return details
        with open(path) as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("detail"):
                    details[record["end"]] = record["detail"]


def read_progress(path: str) -> Progress:
    finished: dict[str, Outcome] = {}
    started: list[str] = []
    with open(path) as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue                               # a line cut short by the kill
            if "start" in record:
                started.append(record["start"])
            elif "end" in record and finished.get(record["end"], Outcome("")).status not in ("failed", "error"):
                finished[record["end"]] = Outcome(record["status"], record.get("reason", ""))
    return Progress(finished, [i for i in dict.fromkeys(started) if i not in finished])


def run_settings(backend: str, env: dict[str, str], options: argparse.Namespace) -> dict:
    """What decides a backend's outcomes besides the framework: the files, -k
    and the environment variables the suite sets for it."""
    changed = {k: v for k, v in env.items() if os.environ.get(k) != v}
    return {"backend": backend, "files": list(options.files), "k": options.k or "",
            "environment": dict(sorted(changed.items()))}


def save_run(run: Run, settings: dict, scratch: str) -> None:
    """The run's settings, wall time and outcomes (those of killed runs are in no junit file)."""
    with open(os.path.join(scratch, f"{run.backend}.json"), "w") as handle:
        json.dump({**settings, "seconds": run.seconds,
                   "outcomes": {k: vars(v) for k, v in run.outcomes.items()}}, handle, indent=1)


def kept_run_directory(backend: str, reference: str, options: argparse.Namespace) -> str | None:
    """Where to read `backend`'s outcomes instead of running it: --reference-from
    for the reference backend, --results-from for any backend kept there (a
    whole-suite comparison made of runs from different sittings)."""
    if options.reference_from and backend == reference:
        return options.reference_from
    if options.results_from and os.path.exists(os.path.join(options.results_from, f"{backend}.json")):
        return options.results_from
    return None


def load_run(backend: str, settings: dict, directory: str, root: str) -> Run:
    """A backend's run kept by an earlier `--keep DIR`, if it ran these files (or more:
    a whole-suite run serves any files of it) with the same -k and environment."""
    with open(os.path.join(directory, f"{backend}.json")) as handle:
        recorded = json.load(handle)
    seconds = recorded.pop("seconds")
    outcomes = recorded.pop("outcomes", None)
    kept_files, wanted = set(recorded.get("files", [])), set(settings["files"])
    same = {k: v for k, v in recorded.items() if k != "files"} == {k: v for k, v in settings.items() if k != "files"}
    if not same or not wanted <= kept_files:
        raise SystemExit(f"{directory}/{backend}.json was run with other settings:\n"
                         f"  kept: {recorded}\n  now:  {settings}")
    if outcomes is None:               # kept before outcomes were saved with the settings
        return Run(backend, read_junit(os.path.join(directory, f"{backend}.xml"), root), seconds)
    # (ids kept before junit's surplus "]" was taken off get it taken off here)
    chosen = {_without_surplus_bracket(k): Outcome(**v) for k, v in outcomes.items() if k.split("::", 1)[0] in wanted}
    if wanted != kept_files:           # its wall time was the whole run's: count only the chosen files' tests
        seconds = sum(outcome.seconds for outcome in chosen.values())
    return Run(backend, chosen, seconds)


def counts(outcomes: dict[str, Outcome], file: str) -> dict[str, int]:
    tally = {"passed": 0, "failed": 0, "skipped": 0}
    for identifier, outcome in outcomes.items():
        if identifier.split("::", 1)[0] == file:
            tally["failed" if outcome.status == "error" else outcome.status] += 1
    return tally


def file_seconds(outcomes: dict[str, Outcome]) -> dict[str, float]:
    """Seconds of each file's tests (their junit times added: across xdist workers, not wall time)."""
    seconds: dict[str, float] = {}
    for identifier, outcome in outcomes.items():
        file = identifier.split("::", 1)[0]
        seconds[file] = seconds.get(file, 0.0) + outcome.seconds
    return seconds


def slowest(run: Run, count: int = 10) -> list[tuple[str, float]]:
    return sorted(file_seconds(run.outcomes).items(), key=lambda item: -item[1])[:count]


def regressions(reference: Run, candidate: Run) -> list[tuple[str, Outcome]]:
    """Ids that pass on the reference and do not pass on the candidate (missing counts as not passing)."""
    lost = []
    for identifier, outcome in sorted(reference.outcomes.items()):
        if outcome.status != "passed":
            continue
        file = identifier.split("::", 1)[0]
        not_run = candidate.outcomes.get(f"{file}::{COLLECTION}",
                                         Outcome("missing", f"not run on {candidate.backend}"))
        theirs = candidate.outcomes.get(identifier, not_run)
        if theirs.status != "passed":
            lost.append((identifier, theirs))
    return lost


def not_collected(run: Run, files: list[str]) -> list[tuple[str, Outcome]]:
    """(file, its collection error) for each file whose tests did not run on `run`'s backend."""
    return [(file, run.outcomes[f"{file}::{COLLECTION}"]) for file in files
            if run.outcomes.get(f"{file}::{COLLECTION}", Outcome("")).status in ("error", "failed")]


def totals(run: Run, files: list[str]) -> dict[str, int]:
    tally = {"passed": 0, "failed": 0, "skipped": 0}
    for file in files:
        for key, value in counts(run.outcomes, file).items():
            tally[key] += value
    return tally


def report(files: list[str], reference: Run, candidate: Run) -> str:
    ref, cand = f"{reference.backend} pass/fail/skip", f"{candidate.backend} pass/fail/skip"
    lines = [f"{'file':40} {ref:>20} {cand:>24}"]
    for file in files:
        a, b = counts(reference.outcomes, file), counts(candidate.outcomes, file)
        lines.append(f"{file:40} {a['passed']:>8}/{a['failed']}/{a['skipped']:<9} "
                     f"{b['passed']:>10}/{b['failed']}/{b['skipped']}")
    if len(files) > 1:
        a, b = totals(reference, files), totals(candidate, files)
        lines.append(f"{'total':40} {a['passed']:>8}/{a['failed']}/{a['skipped']:<9} "
                     f"{b['passed']:>10}/{b['failed']}/{b['skipped']}")
    lines.append(f"wall time: {reference.backend} {reference.seconds:.0f} s, {candidate.backend} "
                 f"{candidate.seconds:.0f} s ({candidate.seconds / max(reference.seconds, 1e-9):.1f}x)")
    if len(files) > 1:
        for run in (reference, candidate):
            lines.append(f"slowest files on {run.backend} (seconds of their tests): " + ", ".join(
                f"{file} {seconds:.0f}" for file, seconds in slowest(run)))
    for run in (reference, candidate):
        for file, outcome in not_collected(run, files):
            lines.append(f"{file} did not run on {run.backend}: {outcome.reason}")
    lost = regressions(reference, candidate)
    lines.append(f"{len(lost)} test(s) pass on {reference.backend} and not on {candidate.backend}"
                 + (":" if lost else ""))
    for identifier, outcome in lost:
        lines.append(f"  {identifier}  [{outcome.status}] {outcome.reason}")
    return "\n".join(lines)


def markdown_report(files: list[str], reference: Run, candidate: Run, heading: str) -> str:
    """The same comparison as markdown: a table per file, the totals, the slowest files, the lost tests."""
    r, c = reference.backend, candidate.backend
    lines = [heading, "", f"| file | {r} pass/fail/skip | {c} pass/fail/skip | {r} s | {c} s |",
             "|---|---|---|---|---|"]
    seconds = {run.backend: file_seconds(run.outcomes) for run in (reference, candidate)}
    for file in files:
        a, b = counts(reference.outcomes, file), counts(candidate.outcomes, file)
        lines.append(f"| `{file}` | {a['passed']}/{a['failed']}/{a['skipped']} | "
                     f"{b['passed']}/{b['failed']}/{b['skipped']} | {seconds[r].get(file, 0):.0f} | "
                     f"{seconds[c].get(file, 0):.0f} |")
    a, b = totals(reference, files), totals(candidate, files)
    lines.append(f"| **total** | {a['passed']}/{a['failed']}/{a['skipped']} | "
                 f"{b['passed']}/{b['failed']}/{b['skipped']} | | |")
    lines += ["", f"Wall time: {r} {reference.seconds:.0f} s, {c} {candidate.seconds:.0f} s "
                  f"({candidate.seconds / max(reference.seconds, 1e-9):.2f}x)."]
    if len(files) > 1:
        lines += [""] + [f"Slowest files on {run.backend} (seconds of their tests, over the workers): "
                         + ", ".join(f"`{file}` {seconds:.0f}" for file, seconds in slowest(run))
                         for run in (reference, candidate)]
    not_run = [(run.backend, file, outcome) for run in (reference, candidate)
               for file, outcome in not_collected(run, files)]
    if not_run:
        lines += [""] + [f"- `{file}` did not run on {backend}: {outcome.reason}"
                         for backend, file, outcome in not_run]
    lost = regressions(reference, candidate)
    lines += ["", f"{len(lost)} test(s) pass on {r} and not on {c}" + (":" if lost else ".")]
    lines += [f"- `{identifier}` [{outcome.status}] {outcome.reason}" for identifier, outcome in lost]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Suite:
    """One framework's `pjrt-ref *-tests` command: what it runs, and how each backend is chosen."""
    command: str                                   # "pjrt-ref torch-tests"
    description: str
    checkout: str                                  # what the checkout argument must be
    default_files: tuple[str, ...]
    backends: tuple[str, str]                      # (reference, "pjrt_ref")
    environment: Callable[[str, argparse.Namespace], dict[str, str]]
    check_version: Callable[[str], None]           # warns about a checkout of another version
    workers: int = 0                               # default pytest-xdist workers
    add_options: Callable[[argparse.ArgumentParser], None] | None = None
    pytest_plugins: tuple[str, ...] = ()           # modules every run loads (pytest -p)
    stall: float = 600.0                           # default --stall
    all_files: Callable[[str], list[str]] | None = None   # --all: every file of a checkout that can run
    process_per_file: bool = False                 # each file in a pytest process of its own
    devices_asked: Callable[[str, str], int] | None = None   # (checkout, file): the devices a file asks for
    # Another backend in pjrt_ref's place (a plugin under test), and what follows the runs:
    candidate: Callable[[argparse.Namespace], "Candidate | None"] | None = None


@dataclass
class Candidate:
    """A backend run in pjrt_ref's place: its name, why it cannot run (it does
    not load, say; every test then fails with that reason), and what to do
    with the two runs afterwards (the plugin test kit's recording and triage)."""
    name: str
    cannot_run: str = ""
    after_runs: Callable[["Suite", argparse.Namespace, Run, Run, str], object] | None = None


def parse_args(suite: Suite, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=suite.command, description=suite.description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", help=suite.checkout)
    parser.add_argument("files", nargs="*", help=f"test files (default: {' '.join(suite.default_files)})")
    parser.add_argument("--devices", type=int, default=1, help="devices on each backend (default 1)")
    parser.add_argument("--workers", type=int, default=suite.workers,
                        help=f"pytest-xdist workers (default {suite.workers}; 0: no xdist)")
    parser.add_argument("--only", metavar="BACKEND", help=f"run one backend only ({' or '.join(suite.backends)})")
    parser.add_argument("--timeout", type=int, default=0, help="per-test timeout in s (pytest-timeout)")
    parser.add_argument("--stall", type=float, default=suite.stall,
                        help=f"kill a run in which no test finished for this many s, mark the tests "
                             f"it was running hung and go on (default {suite.stall:g}; 0: never)")
    parser.add_argument("-k", help="pytest -k expression")
    if suite.all_files:
        parser.add_argument("--all", action="store_true",
                            help="every test file of the checkout that can run on a CPU backend")
    parser.add_argument("--json", metavar="FILE", help="write every outcome to FILE")
    parser.add_argument("--markdown", metavar="FILE", help="also write the comparison as markdown to FILE")
    parser.add_argument("--keep", metavar="DIR", help="keep the junit XML and logs in DIR")
    parser.add_argument("--reference-from", metavar="DIR",
                        help=f"read {suite.backends[0]}'s outcomes from an earlier run's --keep DIR")
    parser.add_argument("--results-from", metavar="DIR",
                        help="read each backend's outcomes an earlier run's --keep DIR holds (with "
                             "these settings), and run only the others")
    parser.add_argument("--verbose", action="store_true", help="show pytest's output")
    if suite.add_options:
        suite.add_options(parser)
    options = parser.parse_args(argv)
    options.checkout = os.path.abspath(options.checkout)
    if getattr(options, "all", False):
        if options.files:
            parser.error("--all runs every file: name no files")
        options.files = suite.all_files(options.checkout)
    options.files = [in_checkout(f, options.checkout) for f in options.files or suite.default_files]
    missing = [f for f in options.files if not os.path.exists(os.path.join(options.checkout, f.split("::", 1)[0]))]
    if missing:
        parser.error(f"not in {options.checkout}: {', '.join(missing)}")
    options.pytest_plugins = ("pjrt_ref.frameworks.progress_plugin", *suite.pytest_plugins)
    options.process_per_file = suite.process_per_file
    return options


def in_checkout(file: str, checkout: str) -> str:
    """`file` as the test ids name it, relative to the checkout (`tests/x_test.py`), also when
    given as a path that leads into the checkout (absolute, or from the working folder)."""
    path, _, rest = file.partition("::")
    for candidate in (path, os.path.abspath(path)):
        if os.path.isabs(candidate) and os.path.exists(candidate) \
                and os.path.commonpath([candidate, checkout]) == checkout:
            path = os.path.relpath(candidate, checkout)
            break
    return path + (f"::{rest}" if rest else "")


def machine_line() -> str:
    """When and on what a run was made: the date, the CPU model and core count, Python."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                         model)
    except OSError:
        pass
    return (f"{datetime.date.today().isoformat()}, {model}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}")


# More test files than this are shown as their count in a report's heading.
FILES_SHOWN = 10


def argv_shown(argv: list[str] | None, files: list[str] = ()) -> list[str]:
    """The command's arguments as a reader could type them again (no local
    checkout path); more than FILES_SHOWN of the run's `files` as "<N files>"."""
    shown = ["CHECKOUT" if os.path.isdir(arg) else arg for arg in (sys.argv[1:] if argv is None else argv)]
    named = [arg for arg in shown if arg in set(files)]
    if len(named) <= FILES_SHOWN:
        return shown
    first = shown.index(named[0])
    return shown[:first] + [f"<{len(named)} files>"] + [arg for arg in shown[first:] if arg not in set(named)]


def main(suite: Suite, argv: list[str] | None = None) -> int:
    """The command: run the files on each backend (the reference first) and print the comparison."""
    options = parse_args(suite, list(sys.argv[1:] if argv is None else argv))
    suite.check_version(options.checkout)
    scratch = options.keep or tempfile.mkdtemp(prefix="pjrt-ref-tests-")
    os.makedirs(scratch, exist_ok=True)
    candidate = suite.candidate(options) if suite.candidate else None
    backends = (suite.backends[0], candidate.name) if candidate else suite.backends
    if options.only and options.only not in backends:
        raise SystemExit(f"--only {options.only}: this run's backends are {', '.join(backends)}")
    chosen = [options.only] if options.only else list(backends)
    runs = {}
    for backend in chosen:
        env = suite.environment(backend, options)
        settings = run_settings(backend, env, options)
        kept = kept_run_directory(backend, backends[0], options)
        if kept:
            runs[backend] = load_run(backend, settings, kept, options.checkout)
            continue
        if candidate and backend == candidate.name and candidate.cannot_run:
            runs[backend] = Run(backend, {identifier: Outcome("failed", candidate.cannot_run)
                                          for identifier in runs.get(backends[0], Run("")).outcomes})
            continue
        runs[backend] = run_backend(backend, suite, options, scratch)
        save_run(runs[backend], settings, scratch)
    if options.json:
        with open(options.json, "w") as handle:
            json.dump({backend: {"seconds": run.seconds,
                                 "outcomes": {k: vars(v) for k, v in run.outcomes.items()}}
                       for backend, run in runs.items()}, handle, indent=1)
    if len(runs) == 2:
        reference, ours = (runs[b] for b in backends)
        print(report(options.files, reference, ours))
        if options.markdown:
            with open(options.markdown, "w") as handle:
                handle.write(markdown_report(options.files, reference, ours,
                                             f"`{suite.command} {' '.join(argv_shown(argv, options.files))}`, "
                                             f"{machine_line()}"))
        if candidate and candidate.after_runs:
            candidate.after_runs(suite, options, reference, ours, scratch)
        return 0
    run = runs[chosen[0]]
    for file in options.files:
        print(file, counts(run.outcomes, file))
    return 0
