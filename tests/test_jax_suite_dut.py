"""`pjrt-ref jax-tests --dut NAME`: on the pjrt_ref run, JAX's test utilities
take the device under test to be NAME, so tests JAX restricts to e.g. cpu
run there instead of being skipped."""
from __future__ import annotations

from test_jax_support import run_python

from pjrt_ref.frameworks.jax import suite

DEVICE_TEST = """
import jax
from jax._src import test_util as jtu

def test_pjrt_ref_is_taken_for_cpu():
    assert jax.default_backend() == "pjrt_ref"
    assert jtu.device_under_test() == "cpu" and jtu.test_device_matches(["cpu"])
"""


def test_dut_reaches_only_the_pjrt_ref_run(tmp_path):
    options = suite.parse_args([str(tmp_path), "--dut", "cpu"])
    assert suite.environment("pjrt_ref", options)["PJRT_REF_TEST_DUT"] == "cpu"
    assert "PJRT_REF_TEST_DUT" not in suite.environment("cpu", options)
    command = suite.pytest_command(["tests/x_test.py"], "out.xml", options, "pytest.ini")
    assert ("-p", "pjrt_ref.frameworks.jax.pytest_dut") in zip(command, command[1:])


def test_the_plugin_sets_jaxs_device_under_test(tmp_path):
    test_file = tmp_path / "device_test.py"
    test_file.write_text(DEVICE_TEST)
    proc = run_python(f"""
        import sys, pytest
        sys.exit(pytest.main(["-q", "-p", "pjrt_ref.frameworks.jax.pytest_dut", "-p", "no:cacheprovider",
                              "--rootdir", {str(tmp_path)!r}, {str(test_file)!r}]))
    """, JAX_PLATFORMS="pjrt_ref,cpu", PJRT_REF_TEST_DUT="cpu")
    assert "1 passed" in proc.stdout
