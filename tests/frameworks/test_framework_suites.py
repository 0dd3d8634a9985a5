"""`pjrt-ref jax-tests` and `pjrt-ref torch-tests`: reading pytest's junit reports
and comparing two backends (pjrt_ref/frameworks/suite_runner.py), on made-up reports."""
from __future__ import annotations

import argparse
import json
import os

import pytest

from pjrt_ref.frameworks import suite_runner
from pjrt_ref.frameworks.jax import suite as jax_suite
from pjrt_ref.frameworks.torch import suite as torch_suite

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="test.test_operations.TestAten" name="test_add"/>
  <testcase classname="test.test_operations.TestAten" name="test_devices">
    <failure message="AssertionError: unexpectedly None">Traceback ...</failure></testcase>
  <testcase classname="test.test_operations.TestAten" name="test_tpu_only">
    <skipped message="TPU only"/></testcase>
</testsuite></testsuites>
"""


def _run(tmp_path, backend: str, text: str) -> suite_runner.Run:
    (tmp_path / "test").mkdir(exist_ok=True)
    (tmp_path / "test" / "test_operations.py").write_text("")
    report = tmp_path / f"{backend}.xml"
    report.write_text(text)
    return suite_runner.Run(backend, suite_runner.read_junit(str(report), str(tmp_path)), seconds=10)


def test_report_counts_each_backend_and_lists_what_passes_only_on_the_reference(tmp_path):
    cpu = _run(tmp_path, "cpu", JUNIT.replace('<failure message="AssertionError: unexpectedly None">'
                                              'Traceback ...</failure>', ""))
    ref = _run(tmp_path, "pjrt_ref", JUNIT)
    assert sorted(cpu.outcomes) == ["test/test_operations.py::TestAten::test_add",
                                    "test/test_operations.py::TestAten::test_devices",
                                    "test/test_operations.py::TestAten::test_tpu_only"]
    text = suite_runner.report(["test/test_operations.py"], cpu, ref)
    assert "test/test_operations.py" in text.splitlines()[1]
    assert "2/0/1" in text and "1/1/1" in text
    assert "1 test(s) pass on cpu and not on pjrt_ref:" in text
    assert ("test/test_operations.py::TestAten::test_devices  [failed] AssertionError: unexpectedly None"
            in text)


def test_a_name_with_brackets_inside_reads_as_its_node_id(tmp_path):
    """pytest's junit report writes JAX's `testArgAllReduce_shape=float32[4]_axis=0` with a
    "]" appended; a run read from progress records (one that stalled) has the node id.
    Both must give the same id, or the test shows as missing on one side."""
    run = _run(tmp_path, "cpu", JUNIT.replace('name="test_add"', 'name="test_add_shape=float32[4]_axis=0]"'))
    assert "test/test_operations.py::TestAten::test_add_shape=float32[4]_axis=0" in run.outcomes


def test_each_framework_chooses_its_backends_through_the_environment(tmp_path):
    options = argparse.Namespace(checkout=str(tmp_path), devices=2, cases=3, x64=False, device_tag="cpu")
    cpu, ref = (torch_suite.environment(b, options) for b in torch_suite.BACKENDS)
    assert (cpu["PJRT_DEVICE"], cpu["CPU_NUM_DEVICES"]) == ("CPU", "2")
    assert (ref["PJRT_DEVICE"], ref["PJRT_REF_NUM_DEVICES"]) == ("PJRT_REF", "2")
    assert ref["PYTHONPATH"].split(":")[0] == str(tmp_path / "test")      # for `import test_utils`
    cpu, ref = (jax_suite.environment(b, options) for b in jax_suite.BACKENDS)
    assert (cpu["JAX_PLATFORMS"], ref["JAX_PLATFORMS"]) == ("cpu", "pjrt_ref,cpu")
    assert "--xla_force_host_platform_device_count=2" in cpu["XLA_FLAGS"]
    assert ref["PJRT_REF_NUM_DEVICES"] == "2" and ref["JAX_NUM_GENERATED_CASES"] == "3"
    assert ref["PJRT_REF_JAX_DEVICE_TAG"] == "cpu" and "PJRT_REF_JAX_DEVICE_TAG" not in cpu



def test_a_kept_reference_run_is_read_back_only_with_the_same_settings(tmp_path):
    options = argparse.Namespace(checkout=str(tmp_path), devices=1, cases=3, x64=True, device_tag="cpu",
                                 files=["test/test_operations.py"], k=None)
    cpu = _run(tmp_path, "cpu", JUNIT)
    settings = suite_runner.run_settings("cpu", jax_suite.environment("cpu", options), options)
    assert settings["environment"]["JAX_NUM_GENERATED_CASES"] == "3"
    suite_runner.save_run(cpu, settings, str(tmp_path))
    again = suite_runner.load_run("cpu", settings, str(tmp_path), str(tmp_path))
    assert again.outcomes == cpu.outcomes and again.seconds == cpu.seconds
    options.x64 = False
    other = suite_runner.run_settings("cpu", jax_suite.environment("cpu", options), options)
    with pytest.raises(SystemExit, match="other settings"):
        suite_runner.load_run("cpu", other, str(tmp_path), str(tmp_path))
    options.x64, options.files = True, ["test/test_operations.py", "test/test_other.py"]
    more_files = suite_runner.run_settings("cpu", jax_suite.environment("cpu", options), options)
    with pytest.raises(SystemExit, match="other settings"):         # a kept run serves fewer files, not more
        suite_runner.load_run("cpu", more_files, str(tmp_path), str(tmp_path))


def test_a_kept_whole_suite_run_serves_any_of_its_files(tmp_path):
    options = argparse.Namespace(checkout=str(tmp_path), devices=1, cases=1, x64=False, device_tag="cpu",
                                 files=["a_test.py", "b_test.py"], k=None)
    whole = suite_runner.Run("cpu", {"a_test.py::t1": suite_runner.Outcome("passed", "", 2.0),
                                   "b_test.py::t2": suite_runner.Outcome("failed", "x", 3.0)}, 100.0)
    suite_runner.save_run(whole, suite_runner.run_settings("cpu", jax_suite.environment("cpu", options), options),
                        str(tmp_path))
    options.files = ["b_test.py"]
    some = suite_runner.run_settings("cpu", jax_suite.environment("cpu", options), options)
    part = suite_runner.load_run("cpu", some, str(tmp_path), str(tmp_path))
    assert list(part.outcomes) == ["b_test.py::t2"] and part.seconds == 3.0


HANGING_TESTS = """
import time

def test_first():
    pass

def test_hangs():
    time.sleep(600)       # stands for a test blocked in C with the GIL held

def test_after_the_hang():
    assert 1 == 2, "a plain failure"

def test_skipped():
    import pytest
    pytest.skip("not here")
"""


def run_one_file(tmp_path, name: str, text: str, *options: str) -> dict:
    """Run a checkout holding test/`name` (`text`) on "pjrt_ref" with a suite that passes
    this process's environment on; the outcomes by test id."""
    checkout = tmp_path / "checkout"
    (checkout / "test").mkdir(parents=True)
    (checkout / "test" / name).write_text(text)
    suite = suite_runner.Suite(command="t", description="t", checkout="t",
                             default_files=(f"test/{name}",), backends=("cpu", "pjrt_ref"),
                             environment=lambda backend, options: dict(os.environ),
                             check_version=lambda checkout: None)
    report = tmp_path / "report.json"
    assert suite_runner.main(suite, [str(checkout), "--only", "pjrt_ref", *options, "--json", str(report)]) == 0
    return json.loads(report.read_text())["pjrt_ref"]["outcomes"]


def test_a_hanging_test_is_reported_hung_and_the_rest_still_run(tmp_path, capsys):
    outcomes = run_one_file(tmp_path, "test_hang.py", HANGING_TESTS, "--stall", "3", "--timeout", "0")
    status = {k.split("::")[-1]: (v["status"], v["reason"]) for k, v in outcomes.items()}
    assert status["test_first"] == ("passed", "")
    assert status["test_hangs"][0] == "failed" and status["test_hangs"][1].startswith("hung")
    assert status["test_after_the_hang"][0] == "failed" and "a plain failure" in status["test_after_the_hang"][1]
    assert status["test_skipped"] == ("skipped", "not here")


def test_a_run_started_inside_a_pytest_xdist_worker_is_a_pytest_run_of_its_own(tmp_path, monkeypatch):
    """Started from a test under pytest-xdist (the docs test runs the kit so), the run's
    pytest processes must not inherit the enclosing worker's variables: its controller
    would take itself for a worker (the kit then lost every recording)."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    outcomes = run_one_file(tmp_path, "test_env.py", "import os\n\ndef test_no_enclosing_worker():\n"
                            "    assert os.environ.get('PYTEST_XDIST_WORKER') != 'gw7'\n", "--workers", "0")
    assert [v["status"] for v in outcomes.values()] == ["passed"], outcomes


# A file that switches a process-wide mode when imported, as PyTorch/XLA's
# test/eager/test_eager.py does (torch_xla.experimental.eager_mode(True)).
SWITCHING_FILE = """
import sys
sys.switched_by_a_test_file = True

def test_in_its_mode():
    assert sys.switched_by_a_test_file
"""

ORDINARY_FILE = """
import sys

def test_in_the_default_mode():
    assert not hasattr(sys, "switched_by_a_test_file"), "another file's mode leaked in"
"""


@pytest.mark.parametrize("process_per_file", [True, False])
def test_a_suite_run_like_its_ci_gives_each_file_a_process_of_its_own(tmp_path, process_per_file):
    checkout = tmp_path / "checkout"
    (checkout / "test").mkdir(parents=True)
    (checkout / "test" / "test_a_switching.py").write_text(SWITCHING_FILE)
    (checkout / "test" / "test_b_ordinary.py").write_text(ORDINARY_FILE)
    suite = suite_runner.Suite(command="t", description="t", checkout="t",
                             default_files=("test/test_a_switching.py", "test/test_b_ordinary.py"),
                             backends=("cpu", "pjrt_ref"),
                             environment=lambda backend, options: dict(os.environ),
                             check_version=lambda checkout: None, process_per_file=process_per_file)
    report = tmp_path / "report.json"
    assert suite_runner.main(suite, [str(checkout), "--only", "pjrt_ref", "--json", str(report)]) == 0
    outcomes = json.loads(report.read_text())["pjrt_ref"]["outcomes"]
    status = {k.split("::")[-1]: v["status"] for k, v in outcomes.items()}
    assert status["test_in_its_mode"] == "passed"
    assert status["test_in_the_default_mode"] == ("passed" if process_per_file else "failed")


def test_files_asking_for_more_devices_run_in_a_process_started_with_that_many(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "tests").mkdir(parents=True)
    for name, asked in (("a_test.py", None), ("b_test.py", 8), ("c_test.py", 2), ("d_test.py", 8)):
        request = f"jtu.request_cpu_devices({asked})  # as JAX's files ask\n" if asked else "\n"
        (checkout / "tests" / name).write_text(
            f"import os, sys\n# {request}"
            f"def test_devices():\n    assert os.environ['DEVICES'] == '{max(asked or 1, 2)}'\n")
    suite = suite_runner.Suite(command="t", description="t", checkout="t",
                             default_files=tuple(f"tests/{n}" for n in ("a_test.py", "b_test.py",
                                                                         "c_test.py", "d_test.py")),
                             backends=("cpu", "pjrt_ref"), devices_asked=jax_suite.devices_asked,
                             environment=lambda backend, options: {**os.environ,
                                                                   "DEVICES": str(options.devices)},
                             check_version=lambda checkout: None)
    report = tmp_path / "report.json"
    assert suite_runner.main(suite, [str(checkout), "--only", "pjrt_ref", "--devices", "2",
                                   "--workers", "0", "--json", str(report)]) == 0
    outcomes = json.loads(report.read_text())["pjrt_ref"]["outcomes"]
    assert {k: v["status"] for k, v in outcomes.items()} == {
        f"tests/{n}::test_devices": "passed" for n in ("a_test.py", "b_test.py", "c_test.py", "d_test.py")}


def test_jax_gives_both_backends_the_devices_of_a_process():
    options = argparse.Namespace(cases=1, x64=False, device_tag="cpu", devices=8)
    cpu, ours = (jax_suite.environment(backend, options) for backend in ("cpu", "pjrt_ref"))
    assert "--xla_force_host_platform_device_count=8" in cpu["XLA_FLAGS"]
    assert ours["PJRT_REF_NUM_DEVICES"] == "8"


def test_torch_files_each_run_in_a_process_of_their_own():
    assert torch_suite.SUITE.process_per_file and not jax_suite.SUITE.process_per_file


def test_all_runs_every_test_file_but_the_left_out_ones(tmp_path):
    for name in ("tests/lax_test.py", "tests/pallas/fusion_test.py", "tests/multiprocess/pjit_test.py",
                 "tests/mosaic/gpu_test.py", "tests/mosaic/gpu_constraints_test.py", "tests/util.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert jax_suite.all_files(str(tmp_path)) == [
        "tests/lax_test.py", "tests/mosaic/gpu_constraints_test.py", "tests/pallas/fusion_test.py"]
    assert all(reason.strip() for reason in jax_suite.LEFT_OUT.values())
    options = suite_runner.parse_args(jax_suite.SUITE, [str(tmp_path), "--all"])
    assert options.files == jax_suite.all_files(str(tmp_path))


def test_markdown_report_has_a_row_per_file_totals_times_and_the_lost_tests(tmp_path):
    cpu = _run(tmp_path, "cpu", JUNIT.replace('<failure message="AssertionError: unexpectedly None">'
                                              'Traceback ...</failure>', "")
               .replace('name="test_add"', 'name="test_add" time="2.5"'))
    ref = _run(tmp_path, "pjrt_ref", JUNIT.replace('name="test_add"', 'name="test_add" time="1.5"'))
    text = suite_runner.markdown_report(["test/test_operations.py"], cpu, ref, "# run")
    lines = text.splitlines()
    assert lines[0] == "# run"
    assert "| `test/test_operations.py` | 2/0/1 | 1/1/1 | 2 | 2 |" in lines     # seconds rounded
    assert "| **total** | 2/0/1 | 1/1/1 | | |" in lines
    assert "- `test/test_operations.py::TestAten::test_devices` [failed] AssertionError: unexpectedly None" in lines
    assert suite_runner.slowest(cpu) == [("test/test_operations.py", 2.5)]


def test_a_file_that_fails_to_collect_is_an_error_with_its_cause_not_zero_tests(tmp_path):
    """pytest reports a collection error as a <testcase> with an empty classname."""
    cpu = _run(tmp_path, "cpu", JUNIT)
    broken = _run(tmp_path, "pjrt_ref", """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
  <testcase classname="" name="test.test_operations">
    <error message="collection failure">AssertionError: Unsupported device type:PJRT_REF</error></testcase>
</testsuite></testsuites>
""")
    assert list(broken.outcomes) == ["test/test_operations.py::(collection)"]
    assert suite_runner.counts(broken.outcomes, "test/test_operations.py") == {"passed": 0, "failed": 1,
                                                                              "skipped": 0}
    text = suite_runner.report(["test/test_operations.py"], cpu, broken)
    assert ("test/test_operations.py::TestAten::test_add  [error] AssertionError: Unsupported device "
            "type:PJRT_REF") in text


def test_torch_runs_get_what_run_tests_sh_sets_and_pjrt_ref_is_accepted_as_cpu(tmp_path):
    from pjrt_ref.frameworks.torch import suite_plugin

    options = argparse.Namespace(checkout=str(tmp_path), devices=1)
    for backend in torch_suite.BACKENDS:
        env = torch_suite.environment(backend, options)
        assert env["TORCH_TEST_DEVICES"] == str(tmp_path / "test" / "pytorch_test_base.py")
        assert env["PYTORCH_TEST_WITH_SLOW"] == "1"
    assert "pjrt_ref.frameworks.torch.suite_plugin" in torch_suite.SUITE.pytest_plugins
    namespace = {"DISABLED_TORCH_TESTS": {"CPU": {"TestX": {"test_a"}}, "TPU": {}}}
    suite_plugin.accept_as_cpu(namespace)
    assert namespace["DISABLED_TORCH_TESTS"]["PJRT_REF"] is namespace["DISABLED_TORCH_TESTS"]["CPU"]


def test_a_named_file_that_is_not_in_the_checkout_is_refused_by_name(tmp_path, capsys):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "lax_test.py").write_text("")
    with pytest.raises(SystemExit):
        suite_runner.parse_args(jax_suite.SUITE, [str(tmp_path), "tests/lax_test.py", "tests/no_such_test.py"])
    assert f"not in {tmp_path}: tests/no_such_test.py" in capsys.readouterr().err


def test_a_file_named_by_its_path_is_read_as_the_test_ids_name_it(tmp_path, monkeypatch):
    """Absolute, or relative to the working folder: the per-file counts key on the
    test ids' `tests/x_test.py` (a run named by absolute paths counted no test)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "lax_test.py").write_text("")
    options = suite_runner.parse_args(jax_suite.SUITE, [str(tmp_path), str(tmp_path / "tests" / "lax_test.py"),
                                                      f"{tmp_path}/tests/lax_test.py::LaxTest"])
    assert options.files == ["tests/lax_test.py", "tests/lax_test.py::LaxTest"]
    monkeypatch.chdir(tmp_path / "tests")
    assert suite_runner.parse_args(jax_suite.SUITE, [str(tmp_path), "lax_test.py"]).files == ["tests/lax_test.py"]


def test_a_file_in_which_no_test_ran_is_an_error_with_pytests_words_not_zero_tests(tmp_path, capsys):
    """A file pytest collects nothing from (here: it holds no test) shows as an
    error naming why, on each backend, never as a clean 0/0/0."""
    checkout = tmp_path / "checkout"
    (checkout / "test").mkdir(parents=True)
    (checkout / "test" / "test_one.py").write_text("def test_one():\n    pass\n")
    (checkout / "test" / "test_nothing.py").write_text("VALUE = 1\n")
    suite = suite_runner.Suite(command="t", description="t", checkout="t",
                             default_files=("test/test_one.py", "test/test_nothing.py"),
                             backends=("cpu", "pjrt_ref"),
                             environment=lambda backend, options: dict(os.environ),
                             check_version=lambda checkout: None)
    report = tmp_path / "report.json"
    assert suite_runner.main(suite, [str(checkout), "--json", str(report)]) == 0
    outcomes = json.loads(report.read_text())["pjrt_ref"]["outcomes"]
    assert outcomes["test/test_one.py::test_one"]["status"] == "passed"
    nothing = outcomes["test/test_nothing.py::(collection)"]
    assert nothing == {"status": "error", "reason": "pytest ran no test of it", "seconds": 0.0}
    printed = capsys.readouterr().out
    assert "test/test_nothing.py did not run on cpu: pytest ran no test of it" in printed
    assert "test/test_nothing.py did not run on pjrt_ref: pytest ran no test of it" in printed


def test_a_comparison_is_made_from_runs_kept_in_different_sittings(tmp_path, capsys):
    """--results-from reads every backend kept with the same settings and runs none of them:
    a whole-suite comparison whose two sides ran on different days."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "a_test.py").write_text("def test_never_run():\n    assert False\n")
    options = suite_runner.parse_args(jax_suite.SUITE, [str(tmp_path), "tests/a_test.py"])
    for backend, status in (("cpu", "passed"), ("pjrt_ref", "failed")):
        run = suite_runner.Run(backend, {"tests/a_test.py::test_x": suite_runner.Outcome(status, "why", 1.0)}, 7.0)
        settings = suite_runner.run_settings(backend, jax_suite.environment(backend, options), options)
        suite_runner.save_run(run, settings, str(tmp_path))
    markdown = tmp_path / "suite.md"
    assert jax_suite.main([str(tmp_path), "tests/a_test.py", "--results-from", str(tmp_path),
                           "--markdown", str(markdown)]) == 0
    assert "1 test(s) pass on cpu and not on pjrt_ref:" in capsys.readouterr().out
    assert "| `tests/a_test.py` | 1/0/0 | 0/1/0 | 1 | 1 |" in markdown.read_text()


def test_a_report_heading_names_many_files_by_their_count():
    files = [f"tests/f{i}_test.py" for i in range(12)]
    shown = suite_runner.argv_shown(["/", *files, "--x64"], files)
    assert shown == ["CHECKOUT", "<12 files>", "--x64"]
    assert suite_runner.argv_shown(["/", *files[:2]], files[:2]) == ["CHECKOUT", *files[:2]]


HARNESS_CHECK = """
import types
from jax._src import test_util as jtu, xla_bridge
from pjrt_ref.frameworks.jax import suite_plugin

unpatched = {}
def remember(harnesses):  # registered first, so it runs before the plugin's patch
    unpatched["pjrt_ref"] = {h.fullname for h in harnesses.all_harnesses if h.filter("pjrt_ref")}

suite_plugin.after_import(suite_plugin.HARNESSES, remember)
plugins = types.SimpleNamespace(getplugin=lambda name: None)
suite_plugin.pytest_configure(types.SimpleNamespace(pluginmanager=plugins))
assert not xla_bridge._backends, "the plugin started JAX's backends"
jtu.request_cpu_devices(2)

from jax._src.internal_test_util import test_harnesses
import jax
assert len(jax.devices("cpu")) == 2, jax.devices("cpu")
kept = {h.fullname for h in test_harnesses.all_harnesses if h.filter("pjrt_ref")}
assert kept == {h.fullname for h in test_harnesses.all_harnesses if h.filter("cpu")}
left_out = unpatched["pjrt_ref"] - kept
assert any("lu" in name and "bfloat16" in name for name in left_out), sorted(left_out)[:5]
print("ok", len(kept), len(left_out))
"""


def test_jax_harnesses_generate_for_pjrt_ref_what_they_generate_for_its_tag_once_a_file_imports_them():
    """JAX's harnesses list the dtypes cpu's lowering rules leave unimplemented;
    pjrt_ref lowers with those rules, so with the tag "cpu" they keep for
    pjrt_ref what they keep for cpu (bfloat16 LU is unimplemented there). The
    plugin patches them when they are imported, so a test file still asks for
    its devices before JAX's backends start (run in a fresh process)."""
    import subprocess
    import sys

    env = dict(os.environ, PJRT_REF_JAX_DEVICE_TAG="cpu", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", HARNESS_CHECK], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok ")
