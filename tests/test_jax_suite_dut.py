"""`pjrt-ref jax-tests`: on the pjrt_ref run, JAX's test utilities see
pjrt_ref's device as a cpu device (which tests run, with which tolerances)
while its platform stays pjrt_ref (platform dispatch), through the pytest
plugin the runner loads into JAX's test runs."""
from __future__ import annotations

from test_jax_support import run_python

DEVICE_TEST = """
import jax
from jax._src import test_util as jtu

def test_pjrt_ref_is_a_cpu_device_on_its_own_platform():
    assert jax.default_backend() == "pjrt_ref"
    assert jtu.test_device_matches(["cpu"]) and jtu.test_device_matches(["pjrt_ref"])
    assert jtu.device_under_test() == "pjrt_ref"
"""


def test_the_plugin_tags_pjrt_refs_device_for_jaxs_tests(tmp_path):
    test_file = tmp_path / "device_test.py"
    test_file.write_text(DEVICE_TEST)
    proc = run_python(f"""
        import sys, pytest
        sys.exit(pytest.main(["-q", "-p", "pjrt_ref.frameworks.jax.suite_plugin", "-p", "no:cacheprovider",
                              "--rootdir", {str(tmp_path)!r}, {str(test_file)!r}]))
    """, JAX_PLATFORMS="pjrt_ref,cpu", PJRT_REF_JAX_DEVICE_TAG="cpu")
    assert "1 passed" in proc.stdout
