"""Run JAX's own test files on XLA CPU and on pjrt_ref, and compare.

    pjrt-ref jax-tests PATH_TO_JAX_CHECKOUT [FILE ...] [--cases N] [--x64]
                       [--devices N] [--workers N] [--json FILE] [-k EXPR]
                       [--dut NAME]

A framework author tests a plugin with the framework's own suite. This runs
each named test file (default: the five files of lax, numpy, indexing,
control flow and linalg) twice, the way JAX's CI does (pytest with xdist,
`JAX_NUM_GENERATED_CASES`), once with `JAX_PLATFORMS=cpu` and once with
`JAX_PLATFORMS=pjrt_ref,cpu`, and prints per file how many passed, failed and
were skipped on each, then every test id that passes on cpu and not on
pjrt_ref with the first line of its error.

Differences from JAX's CI on purpose: JAX's `pyproject.toml` turns every
warning into an error (`filterwarnings = error`); this runs with an empty
pytest configuration instead, so a warning is a warning. With `--devices N`
the cpu run gets N host devices (`--xla_force_host_platform_device_count`)
and the pjrt_ref run `PJRT_REF_NUM_DEVICES=N`. With `--dut cpu` JAX's test
utilities take pjrt_ref for a cpu device (`pytest_dut.py`), so the tests JAX
restricts to cpu (Schur, Hessenberg, eig, ...) run on pjrt_ref instead of
being skipped there.

The checkout must be of the tag matching the installed jax (e.g.
`git archive jax-v0.10.2 tests conftest.py | tar -x -C DIR`); a checkout of
another version runs, with a warning, since its tests may use APIs the
installed jax lacks.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field

DEFAULT_FILES = ("tests/lax_test.py", "tests/lax_numpy_test.py", "tests/lax_numpy_indexing_test.py",
                 "tests/lax_control_flow_test.py", "tests/linalg_test.py")
BACKENDS = {"cpu": "cpu", "pjrt_ref": "pjrt_ref,cpu"}


@dataclass
class Outcome:
    """One test id's result on one backend: passed, failed, error or skipped, and why."""
    status: str
    reason: str = ""


@dataclass
class Run:
    """One pytest run: outcomes by test id, and its wall time."""
    backend: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    seconds: float = 0.0


def test_id(case: ElementTree.Element, root: str) -> str:
    """`tests/lax_test.py::LaxTest::testOp` from a junit <testcase> (classname is dotted)."""
    classname, name = case.get("classname", ""), case.get("name", "")
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):    # the longest prefix that is a test file
        candidate = "/".join(parts[:cut]) + ".py"
        if os.path.exists(os.path.join(root, candidate)):
            return "::".join([candidate, *parts[cut:], name])
    return "::".join([classname, name])


def first_line(text: str) -> str:
    """The first informative line of a failure message (JAX's errors say what happened first)."""
    for line in (text or "").splitlines():
        line = line.strip()
        if line and not line.startswith(("Traceback", "File ", "^")):
            return line[:300]
    return ""


def outcome_of(case: ElementTree.Element) -> Outcome:
    for tag, status in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        node = case.find(tag)
        if node is not None:
            return Outcome(status, first_line(node.get("message") or node.text or ""))
    return Outcome("passed")


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


def environment(backend: str, options: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = BACKENDS[backend]
    env["JAX_NUM_GENERATED_CASES"] = str(options.cases)
    env["JAX_ENABLE_X64"] = "1" if options.x64 else "0"
    if options.devices > 1:
        if backend == "cpu":
            flag = f"--xla_force_host_platform_device_count={options.devices}"
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flag).strip()
        else:
            env["PJRT_REF_NUM_DEVICES"] = str(options.devices)
    if backend == "pjrt_ref" and options.dut:
        env["PJRT_REF_TEST_DUT"] = options.dut
    return env


def pytest_command(files: list[str], junit: str, options: argparse.Namespace, ini: str) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-c", ini, "--rootdir", options.checkout,
               "-p", "no:cacheprovider", f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    if options.workers > 0:
        command += ["-n", str(options.workers)]
    if options.k:
        command += ["-k", options.k]
    if options.dut:
        command += ["-p", "pjrt_ref.frameworks.jax.pytest_dut"]
    if options.timeout:
        command += [f"--timeout={options.timeout}"]
    return command + files


def run_backend(backend: str, files: list[str], options: argparse.Namespace, scratch: str) -> Run:
    """Run the files on one backend in one pytest process tree; outcomes from its junit XML."""
    junit = os.path.join(scratch, f"{backend}.xml")
    ini = os.path.join(scratch, "pytest.ini")
    with open(ini, "w") as handle:
        handle.write("[pytest]\n")      # JAX's own ini would make every warning an error
    command = pytest_command(files, junit, options, ini)
    started = time.perf_counter()
    log = open(os.path.join(scratch, f"{backend}.log"), "w") if not options.verbose else None
    subprocess.run(command, cwd=options.checkout, env=environment(backend, options),
                   stdout=log, stderr=subprocess.STDOUT if log else None)
    if log:
        log.close()
    seconds = time.perf_counter() - started
    if not os.path.exists(junit):
        raise RuntimeError(f"pytest on {backend} wrote no report; see {scratch}/{backend}.log")
    return Run(backend, read_junit(junit, options.checkout), seconds)


def counts(outcomes: dict[str, Outcome], file: str) -> dict[str, int]:
    tally = {"passed": 0, "failed": 0, "skipped": 0}
    for identifier, outcome in outcomes.items():
        if identifier.split("::", 1)[0] == file:
            tally["failed" if outcome.status == "error" else outcome.status] += 1
    return tally


def regressions(cpu: Run, ref: Run) -> list[tuple[str, Outcome]]:
    """Ids that pass on cpu and do not pass on pjrt_ref (missing counts as not passing)."""
    lost = []
    for identifier, outcome in sorted(cpu.outcomes.items()):
        if outcome.status != "passed":
            continue
        theirs = ref.outcomes.get(identifier, Outcome("missing", "not run on pjrt_ref"))
        if theirs.status != "passed":
            lost.append((identifier, theirs))
    return lost


def report(files: list[str], cpu: Run, ref: Run) -> str:
    lines = [f"{'file':40} {'cpu pass/fail/skip':>20} {'pjrt_ref pass/fail/skip':>24}"]
    for file in files:
        a, b = counts(cpu.outcomes, file), counts(ref.outcomes, file)
        lines.append(f"{file:40} {a['passed']:>8}/{a['failed']}/{a['skipped']:<9} "
                     f"{b['passed']:>10}/{b['failed']}/{b['skipped']}")
    lines.append(f"wall time: cpu {cpu.seconds:.0f} s, pjrt_ref {ref.seconds:.0f} s "
                 f"({ref.seconds / max(cpu.seconds, 1e-9):.1f}x)")
    lost = regressions(cpu, ref)
    lines.append(f"{len(lost)} test(s) pass on cpu and not on pjrt_ref"
                 + (":" if lost else ""))
    for identifier, outcome in lost:
        lines.append(f"  {identifier}  [{outcome.status}] {outcome.reason}")
    return "\n".join(lines)


def check_version(checkout: str) -> None:
    import jax

    version_file = os.path.join(checkout, "jax", "version.py")
    if not os.path.exists(version_file):
        return
    with open(version_file) as handle:
        text = handle.read()
    if f'_version: str = "{jax.__version__}"' not in text:
        print(f"warning: {checkout} may not be jax {jax.__version__}'s checkout", file=sys.stderr)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pjrt-ref jax-tests", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", help="a checkout of JAX's repository (its tests/ at least)")
    parser.add_argument("files", nargs="*", help=f"test files (default: {' '.join(DEFAULT_FILES)})")
    parser.add_argument("--cases", type=int, default=1, help="JAX_NUM_GENERATED_CASES (default 1)")
    parser.add_argument("--x64", action="store_true", help="JAX_ENABLE_X64=1")
    parser.add_argument("--devices", type=int, default=1, help="devices on each backend (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="xdist workers (default 2; 0: no xdist)")
    parser.add_argument("--only", choices=sorted(BACKENDS), help="run one backend only")
    parser.add_argument("--timeout", type=int, default=0, help="per-test timeout in s (pytest-timeout)")
    parser.add_argument("-k", help="pytest -k expression")
    parser.add_argument("--dut", metavar="NAME",
                        help="on pjrt_ref, JAX's tests take the device under test to be NAME (e.g. cpu)")
    parser.add_argument("--json", metavar="FILE", help="write every outcome to FILE")
    parser.add_argument("--keep", metavar="DIR", help="keep the junit XML and logs in DIR")
    parser.add_argument("--verbose", action="store_true", help="show pytest's output")
    options = parser.parse_args(argv)
    options.checkout = os.path.abspath(options.checkout)
    options.files = options.files or list(DEFAULT_FILES)
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse_args(list(sys.argv[1:] if argv is None else argv))
    check_version(options.checkout)
    scratch = options.keep or tempfile.mkdtemp(prefix="pjrt-ref-jax-tests-")
    os.makedirs(scratch, exist_ok=True)
    backends = [options.only] if options.only else ["cpu", "pjrt_ref"]
    runs = {backend: run_backend(backend, options.files, options, scratch) for backend in backends}
    if options.json:
        with open(options.json, "w") as handle:
            json.dump({backend: {"seconds": run.seconds,
                                 "outcomes": {k: vars(v) for k, v in run.outcomes.items()}}
                       for backend, run in runs.items()}, handle, indent=1)
    if len(runs) == 2:
        print(report(options.files, runs["cpu"], runs["pjrt_ref"]))
        return 0
    run = runs[backends[0]]
    for file in options.files:
        print(file, counts(run.outcomes, file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
