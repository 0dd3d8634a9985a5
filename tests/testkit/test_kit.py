"""The plugin test kit end to end: `pjrt-ref jax-tests CHECKOUT --plugin NAME=PATH.so`.

The plugin under test is pjrt-ref itself, a copy installed in a venv of its
own with kernels planted wrong (support/planted_plugin.py); the checkout is
a folder with one small test file. The kit must put the planted op on the
report's top line with every test it breaks under it, and report a crash,
a hang and a plugin that does not load as rows of their own, finishing the
run either way.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.jax_support import clean_env
from tests.support.planted_plugin import concatenate_planted, planted_plugin, reverse_planted

TESTS = '''
import jax
jax.config.update("jax_num_cpu_devices", 2)     # cpu's devices; the plugin's: PJRT_REF_NUM_DEVICES (run_kit)
import jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def test_flip_float32():
    np.testing.assert_array_equal(jnp.flip(X, 1), np.flip(X, 1))


def test_rot90_float32():
    np.testing.assert_array_equal(jnp.rot90(X), np.rot90(X))


def test_flip_int32():
    np.testing.assert_array_equal(jnp.flip(X.astype(np.int32), 1), np.flip(X.astype(np.int32), 1))


def test_concatenate_float32():
    np.testing.assert_array_equal(jnp.concatenate([X, X]), np.concatenate([X, X]))


def test_sum():
    assert float(jnp.sum(X)) == 66.0


def test_flip_on_two_devices_float32():
    rows = NamedSharding(Mesh(np.array(jax.devices()[:2]), ("x",)), P("x"))
    flip = jax.jit(lambda x: jnp.flip(x, 1) * 2, in_shardings=rows, out_shardings=rows)
    Y = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(flip(Y), np.flip(Y, 1) * 2)


def test_on_cpu_only():
    import pytest
    if jax.devices()[0].platform != "cpu":
        pytest.skip("this test runs on cpu only")
'''


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkout")
    (root / "tests").mkdir()
    (root / "tests" / "ops_test.py").write_text(TESTS)
    return root


def run_kit(checkout, plugin: str, report, *extra: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    done = subprocess.run([sys.executable, "-m", "pjrt_ref.cli.main", "jax-tests", str(checkout),
                           "tests/ops_test.py", "--plugin", f"planted={plugin}", "--report", str(report), *extra],
                          env=clean_env(PJRT_REF_NUM_DEVICES="2"), capture_output=True, text=True, timeout=900,
                          cwd=checkout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads((report / "findings.json").read_text())


@pytest.mark.slow
def test_the_planted_op_heads_the_report_with_every_test_it_breaks(checkout, tmp_path):
    plugin = planted_plugin(tmp_path / "planted", reverse_planted("off by one"))
    report = tmp_path / "report"
    done, findings = run_kit(checkout, plugin, report)
    causes = {finding["test"].split("::")[-1]: finding["cause"] for finding in findings}
    assert causes == {"test_flip_float32": "op differs: stablehlo.reverse (float32)",
                      "test_rot90_float32": "op differs: stablehlo.reverse (float32)",
                      "test_flip_on_two_devices_float32": "op differs: stablehlo.reverse (float32)",
                      "test_on_cpu_only": "skipped on the plugin: this test runs on cpu only"}
    markdown = (report / "report.md").read_text()
    top = next(line for line in markdown.splitlines() if line.startswith("| 1 |"))
    assert "| 3 | op differs: stablehlo.reverse (float32) |" in top
    assert "ops_test.py:" in top and "apart from the others: plugin" in top      # the test's line; cpu agrees
    assert "<td>op differs: stablehlo.reverse (float32)</td>" in (report / "report.html").read_text()
    assert "1. 3 test(s): op differs: stablehlo.reverse (float32)" in done.stdout
    # What reproduces it without JAX: the programs, the arguments, the error, the op alone.
    folder = report / "tests" / "tests.ops_test.py--test_flip_float32"
    assert "AssertionError" in (folder / "failure.txt").read_text()
    differing = [path.parent for path in folder.glob("execution-*/diff.json")]
    assert len(differing) == 1 and (differing[0] / "program.mlir").exists()
    assert (differing[0] / "arg0.npy").exists() and (differing[0] / "op" / "op.mlir").exists()
    assert "stablehlo.reverse" in (differing[0] / "op" / "op.mlir").read_text()
    assert list(folder.glob("program-*.options.pb"))
    # A program on two devices: replayed on two devices of each backend, each device's results
    # compared; then without its shardings on one device, where `pjrt-ref diff` names the op.
    two = report / "tests" / "tests.ops_test.py--test_flip_on_two_devices_float32"
    replayed = json.loads(next(two.glob("execution-*/replay.json")).read_text())
    assert replayed["status"] == "differs" and replayed["devices"] == 2 and replayed["one_device"] == "differs"
    assert replayed["detail"].startswith("on 2 devices: result 0 on device 0 of 2: 1 of 8 elements differ")
    assert replayed["first_op"]["op"] == "stablehlo.reverse"
    assert (next(two.glob("execution-*/options.pb"))).exists()
    assert "sdy." not in next(two.glob("execution-*/one-device/program.mlir")).read_text()


@pytest.mark.slow
def test_a_crash_and_a_hang_are_rows_of_their_own_and_the_run_goes_on(checkout, tmp_path):
    plugin = planted_plugin(tmp_path / "faulty", reverse_planted("crash"), concatenate_planted("hang"))
    _, findings = run_kit(checkout, plugin, tmp_path / "report", "--stall", "10")
    causes = {finding["test"].split("::")[-1]: finding["kind"] for finding in findings}
    assert causes == {"test_flip_float32": "crash", "test_rot90_float32": "crash",
                      "test_flip_on_two_devices_float32": "crash",
                      "test_concatenate_float32": "hang", "test_on_cpu_only": "skipped on the plugin"}


def test_a_plugin_that_does_not_load_is_one_row_and_cpu_still_runs(checkout, tmp_path):
    not_a_plugin = tmp_path / "libnot_a_plugin.so"
    not_a_plugin.write_text("not a shared library")
    done, findings = run_kit(checkout, str(not_a_plugin), tmp_path / "report")
    assert len(findings) == 7 and {f["kind"] for f in findings} == {"plugin does not load"}
    assert "1. 7 test(s): plugin does not load:" in done.stdout
