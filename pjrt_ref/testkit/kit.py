"""The kit's run: after the plain runs on cpu and on the plugin, record,
replay and sort every test that passes on cpu and fails on the plugin.

1. Record: the failing tests run again on the plugin, with the recording
   proxy in front of it (plugin.py, capi_shim/recording_proxy.c), which
   keeps each program compiled and each execution's arguments.
2. Keep: one folder per test (artifacts.py).
3. Replay: each kept execution, in order, on cpu and on the plugin, until
   one differs; then `pjrt-ref diff` names its first differing op (replay.py).
4. Sort: one cause per test, causes by how many tests they explain
   (causes.py), written as report.md and report.html (report.py).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field

from pjrt_ref.frameworks import suite_runner
from pjrt_ref.interpreter import registry
from pjrt_ref.testkit.artifacts import KeptExecution, KeptTest, keep_test
from pjrt_ref.testkit.causes import Cause, Finding, by_kind, cause_of, error_cause, triage
from pjrt_ref.testkit.plugin import PluginUnderTest, recording_environment
from pjrt_ref.testkit.records import Records, read_records
from pjrt_ref.testkit.replay import Replay, replay, replay_on_devices
from pjrt_ref.testkit.report import markdown, page

RECORD_PLUGIN = "pjrt_ref.testkit.record_plugin"
# Executions replayed per test at most (a test may run hundreds of programs).
REPLAYS_PER_TEST = 40


def run(suite, options: argparse.Namespace, reference: "suite_runner.Run", candidate: "suite_runner.Run",
        scratch: str) -> list:
    """Record, keep, replay and sort; write the reports to options.report; the cause rows."""
    started = time.perf_counter()
    failing = suite_runner.regressions(reference, candidate)
    fresh_report_folder(options.report)
    rows = triage(findings(suite, options, failing, scratch))
    preamble = summary_lines(options, reference, candidate, failing, rows, time.perf_counter() - started)
    write_reports(options.report, options.plugin, preamble, rows)
    print("\n".join(preamble[-3:]))
    for number, row in enumerate(rows[:10], 1):
        print(f"  {number}. {len(row.findings)} test(s): {row.cause.title()}")
    print(f"report: {os.path.join(options.report, 'report.md')} and report.html")
    return rows


def fresh_report_folder(root: str) -> None:
    """The report folder, without an earlier run's records and test folders (they would mix in)."""
    for part in ("recorded", "tests"):
        shutil.rmtree(os.path.join(root, part), ignore_errors=True)
    os.makedirs(root, exist_ok=True)


def findings(suite, options: argparse.Namespace, failing: list, scratch: str) -> list[Finding]:
    """One finding per failing test: recorded, kept, replayed and given its cause (a test
    the plugin's run skipped, fewer devices say, needs no recording: its reason is the cause)."""
    plugin: PluginUnderTest = options.plugin
    if not plugin.loaded:
        return [Finding(test, Cause("plugin does not load", plugin.load_error), plugin.load_error)
                for test, _ in failing]
    skipped = [Finding(test, Cause("skipped on the plugin", outcome.reason), outcome.reason)
               for test, outcome in failing if outcome.status == "skipped"]
    failed = [(test, outcome) for test, outcome in failing if outcome.status != "skipped"]
    recording = record(suite, options, [test for test, _ in failed], scratch, options.report)
    return skipped + [find(test, outcome, recording, plugin, os.path.join(options.report, "tests"),
                           options.checkout) for test, outcome in failed]


def write_reports(root: str, plugin: PluginUnderTest, preamble: list[str], rows: list) -> None:
    """report.md, report.html, and findings.json (the same as data)."""
    title = f"Plugin test kit: {plugin.name} ({plugin.path})"
    with open(os.path.join(root, "report.md"), "w") as handle:
        handle.write(markdown(title, preamble, rows, root))
    with open(os.path.join(root, "report.html"), "w") as handle:
        handle.write(page(title, preamble, rows, root))
    with open(os.path.join(root, "findings.json"), "w") as handle:
        json.dump([{"test": f.test, "cause": f.cause.title(), "kind": f.cause.kind, "subject": f.cause.subject,
                    "evidence": f.evidence, "folder": f.folder} for row in rows for f in row.findings],
                  handle, indent=1)


@dataclass
class Recording:
    """The recording run: each test's records, its whole error text, and its outcome there."""
    records: dict[str, Records] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, "suite_runner.Outcome"] = field(default_factory=dict)


def record(suite, options: argparse.Namespace, tests: list[str], scratch: str, root: str) -> Recording:
    """Run `tests` on the plugin behind the recording proxy."""
    recording_run = Recording()
    if not tests:
        return recording_run
    folder = os.path.join(root, "recorded")
    recording = argparse.Namespace(**{**vars(options), "files": tests, "k": None,
                                      "pytest_plugins": (*options.pytest_plugins, RECORD_PLUGIN)})
    for index, (devices, group) in enumerate(suite_runner.process_groups(suite, recording)):
        env = suite.environment(options.plugin.name, argparse.Namespace(**{**vars(recording), "devices": devices}))
        env = recording_environment(options.plugin, env, folder)
        name = f"recording.group{index}"
        recording_run.outcomes.update(suite_runner.run_files(name, env, group, recording, scratch))
        recording_run.failures.update(suite_runner.failure_details(scratch, name))
        recording_run.failures.update(failure_texts(os.path.join(scratch, f"{name}.xml"), options.checkout))
    for process in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        records = read_records(os.path.join(folder, process))
        for test in records.tests():
            recording_run.records[test] = records
    return recording_run


def failure_texts(junit: str, root: str) -> dict[str, str]:
    """Each failing test's whole error text from a junit report (the plain run keeps only its first line)."""
    if not os.path.exists(junit):
        return {}
    texts = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                texts[suite_runner.test_id(case, root)] = f"{node.get('message') or ''}\n{node.text or ''}".strip()
    return texts


def find(test: str, outcome, recording: Recording, plugin: PluginUnderTest, root: str,
         checkout: str) -> Finding:
    """Keep the test's artifacts, replay its executions, and name its cause."""
    failure = recording.failures.get(test) or outcome.reason
    records = recording.records.get(test)
    kept = keep_test(records, test, failure, root) if records else None
    replays = replay_until_difference(kept, plugin) if kept and not error_cause(outcome.reason, failure) else []
    for done in replays:          # `tests/x_test.py:12:5`, as the test ids say, not the checkout's full path
        if done.first_op.get("location"):
            done.first_op["location"] = done.first_op["location"].replace(checkout.rstrip("/") + "/", "")
        if done.first_op.get("op"):
            done.first_op["spec"] = spec_reading(done.first_op["op"])
    cause, evidence = cause_of(outcome.reason, failure, replays)
    again = recording.outcomes.get(test)
    if again is not None and again.status == "passed":
        evidence += " (it passed when run again to record it: flaky, or it depends on the tests run before it)"
    return Finding(test, cause, evidence, kept.folder if kept else "")


def spec_reading(op: str) -> str:
    """How pjrt-ref's kernel for `op` reads the spec: its docstring's first sentence,
    which cites the spec's section (`Spec "tanh" (docs/spec.md#tanh): ...`)."""
    try:
        text = registry.lookup(op).fn.__doc__ or ""
    except Exception:         # an op pjrt-ref has no kernel of its own for
        return ""
    return " ".join(text.split()).split(". ")[0].rstrip(".")


def replay_until_difference(kept: KeptTest, plugin: PluginUnderTest) -> list[Replay]:
    """Replay the test's executions in order; stop at the first whose results differ from cpu's."""
    replays = []
    for execution in kept.executions:
        if execution.replayable or len(replays) >= REPLAYS_PER_TEST:
            continue
        with open(os.path.join(execution.folder, "program.mlir")) as handle:
            program = handle.read()
        outcome = replay_execution(execution, program, plugin)
        with open(os.path.join(execution.folder, "replay.json"), "w") as handle:
            json.dump(vars(outcome), handle, indent=1)
        replays.append(outcome)
        if outcome.status == "differs":
            break
    return replays


def replay_execution(kept: KeptExecution, program: str, plugin: PluginUnderTest) -> Replay:
    """`replay` for an execution on one device; `replay_on_devices` for one on several."""
    execution = kept.execution
    if execution.devices == 1:
        arguments = [argument.value() for argument in execution.device_arguments()]
        return replay(execution.number, program, arguments, plugin.path, kept.folder)
    with open(os.path.join(kept.folder, "options.pb"), "rb") as handle:
        options = handle.read()
    arguments = [[argument.value() for argument in execution.device_arguments(device)]
                 for device in range(execution.devices)]
    return replay_on_devices(execution.number, program, options, arguments, plugin.path, kept.folder)


def summary_lines(options, reference, candidate, failing, rows, seconds: float) -> list[str]:
    """The report's head: where it ran, the plugin, the counts, the wall times, how many causes."""
    plugin: PluginUnderTest = options.plugin
    a, b = (suite_runner.totals(run, options.files) for run in (reference, candidate))
    said = (f"platform {plugin.platform}, {plugin.devices} device(s)" if plugin.loaded
            else f"does not load: {plugin.load_error}")
    return [f"{suite_runner.machine_line()}.",
            f"Plugin: {plugin.path}, {said}.",
            f"Files: {len(options.files)}; cpu {a['passed']}/{a['failed']}/{a['skipped']}, "
            f"{plugin.name} {b['passed']}/{b['failed']}/{b['skipped']} (pass/fail/skip).",
            f"Wall time: the plain runs {reference.seconds + candidate.seconds:.0f} s (cpu {reference.seconds:.0f} s, "
            f"{plugin.name} {candidate.seconds:.0f} s); the kit's recording, replay and triage {seconds:.0f} s more.",
            f"{len(failing)} test(s) pass on cpu and not on {plugin.name}, in {len(rows)} cause(s)"
            + (f": {kinds(rows)}." if rows else ".")]


def kinds(rows) -> str:
    """`72 test(s) unsupported custom call (12 causes), 7 test(s) op differs`: the causes by kind."""
    return ", ".join(f"{kind.tests} test(s) {kind.kind}" + (f" ({kind.causes} causes)" if kind.causes > 1 else "")
                     for kind in by_kind(rows))
