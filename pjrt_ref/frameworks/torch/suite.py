"""Run PyTorch/XLA's own test files on its CPU device and on pjrt_ref, and compare.

    pjrt-ref torch-tests PATH_TO_CHECKOUT [FILE ...] [--devices N] [--workers N]
                         [--json FILE] [-k EXPR] [--timeout S]

Each named test file (default: test/test_operations.py) runs twice with
pytest, once with `PJRT_DEVICE=CPU` (torch_xla's own XLA CPU client, as its
CI runs them) and once with `PJRT_DEVICE=PJRT_REF` (pjrt-ref, loaded
through its `torch_xla.plugins` entry point). It prints per file how many
passed, failed and were skipped on each, then every test id that passes on
CPU and not on pjrt_ref with the first line of its error. The running and
comparing is shared with `pjrt-ref jax-tests` (frameworks/suite_runner.py).

Each run gets what PyTorch/XLA's `test/run_tests.sh` exports
(`TORCH_TEST_DEVICES=test/pytorch_test_base.py`, so torch's device-generic
tests get their XLA variants, and `PYTORCH_TEST_WITH_SLOW=1`), and in the
pjrt_ref run the test base accepts the PJRT_REF device type as it does CPU
(suite_plugin.py). PyTorch/XLA's CI runs each file as a script (`python test/test_x.py`),
each in a process of its own: so does this runner, one pytest process per
file (files switch process-wide modes when imported: eager mode, flags).
pytest runs the same unittest cases, but not the file's `__main__` block
(which seeds torch and sets the matmul precision to 'highest', the
precision XLA CPU and pjrt-ref compute f32 products at anyway). The files
import their neighbours (`test_utils`), so the checkout's `test/` is put on
PYTHONPATH. They also need `expecttest` (`pip install expecttest`).

The checkout must be of the tag matching the installed torch_xla (e.g.
`git archive v2.9.0 test | tar -x -C DIR`); another version runs, with a
warning.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import sys

from pjrt_ref.frameworks.suite_runner import Suite, main as run_suite

DEFAULT_FILES = ("test/test_operations.py",)
BACKENDS = ("cpu", "pjrt_ref")           # the reference first
DEVICE_TYPES = {"cpu": "CPU", "pjrt_ref": "PJRT_REF"}


# What PyTorch/XLA's test/run_tests.sh exports for every file it runs: torch's
# device-generic tests get their XLA variants from the checkout's test base.
RUN_TESTS_ENVIRONMENT = {"PYTORCH_TEST_WITH_SLOW": "1", "XLA_DUMP_FATAL_STACK": "1"}


def environment(backend: str, options: argparse.Namespace) -> dict[str, str]:
    """PJRT_DEVICE picks the backend; CPU_NUM_DEVICES / PJRT_REF_NUM_DEVICES its device count;
    the rest is what run_tests.sh sets."""
    env = dict(os.environ)
    env.update(RUN_TESTS_ENVIRONMENT)
    tests = os.path.join(options.checkout, "test")
    env["TORCH_TEST_DEVICES"] = os.path.join(tests, "pytorch_test_base.py")
    env["PJRT_DEVICE"] = DEVICE_TYPES[backend]
    env["CPU_NUM_DEVICES" if backend == "cpu" else "PJRT_REF_NUM_DEVICES"] = str(options.devices)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, env.get("PYTHONPATH")) if p)
    return env


def check_version(checkout: str) -> None:
    """Warn unless the checkout's setup.py defaults TORCH_XLA_VERSION to the installed torch_xla's."""
    installed = importlib.metadata.version("torch-xla")
    setup = os.path.join(checkout, "setup.py")
    if not os.path.exists(setup):
        return
    with open(setup) as handle:
        match = re.search(r"TORCH_XLA_VERSION',\s*'([^']+)'", handle.read())
    if match and not installed.startswith(match.group(1)):
        print(f"warning: {checkout} is torch_xla {match.group(1)}'s checkout, "
              f"torch_xla {installed} is installed", file=sys.stderr)


SUITE = Suite(command="pjrt-ref torch-tests", description=__doc__.split("\n\n")[1],
              checkout="a checkout of PyTorch/XLA's repository (its test/ and setup.py at least)",
              default_files=DEFAULT_FILES, backends=BACKENDS, environment=environment,
              check_version=check_version, stall=300.0, process_per_file=True,
              pytest_plugins=("pjrt_ref.frameworks.torch.suite_plugin",))


def main(argv: list[str] | None = None) -> int:
    return run_suite(SUITE, argv)
