"""Run JAX's own test files on XLA CPU and on pjrt_ref, and compare.

    pjrt-ref jax-tests PATH_TO_JAX_CHECKOUT [FILE ...] [--cases N] [--x64]
                       [--devices N] [--workers N] [--json FILE] [-k EXPR]

A framework author tests a plugin with the framework's own suite. This runs
each named test file (default: the five files of lax, numpy, indexing,
control flow and linalg) twice, the way JAX's CI does (pytest with xdist,
`JAX_NUM_GENERATED_CASES`), once with `JAX_PLATFORMS=cpu` and once with
`JAX_PLATFORMS=pjrt_ref,cpu`, and prints per file how many passed, failed and
were skipped on each, then every test id that passes on cpu and not on
pjrt_ref with the first line of its error.

Differences from JAX's CI on purpose: JAX's `pyproject.toml` turns every
warning into an error (`filterwarnings = error`); this runs with an empty
pytest configuration instead, so a warning is a warning. The running and
comparing is shared with `pjrt-ref torch-tests` (frameworks/suite_runner.py). With `--devices N`
the cpu run gets N host devices (`--xla_force_host_platform_device_count`)
and the pjrt_ref run `PJRT_REF_NUM_DEVICES=N`; a test file that asks for
more (`jtu.request_cpu_devices(8)`, which sets `jax_num_cpu_devices`) gets
them on both backends (pjrt_ref follows that flag as cpu does:
frameworks/jax/plugin.py, `client_options`); files run in one pytest
process per device count asked for, so that each gets its count whatever
order pytest collects them in (suite_runner.py, `process_groups`).

JAX's tests pick by device which of them run and with what tolerances
(`jtu.run_on_devices("cpu")`, `jtu.test_device_matches(["cpu"])`). pjrt_ref
is a host-memory CPU backend, so by default its device also carries the tag
"cpu" in the pjrt_ref run (`suite_plugin.py`): both runs select the same
tests with the same tolerances, while tests of platform dispatch still see
the platform "pjrt_ref" (`--device-tag ''` turns this off).

The checkout must be of the tag matching the installed jax (e.g.
`git archive jax-v0.10.2 tests conftest.py | tar -x -C DIR`); a checkout of
another version runs, with a warning, since its tests may use APIs the
installed jax lacks.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

from pjrt_ref.frameworks.suite_runner import Suite, main as run_suite

DEFAULT_FILES = ("tests/lax_test.py", "tests/lax_numpy_test.py", "tests/lax_numpy_indexing_test.py",
                 "tests/lax_control_flow_test.py", "tests/linalg_test.py")
BACKENDS = ("cpu", "pjrt_ref")           # the reference first
PLATFORMS = {"cpu": "cpu", "pjrt_ref": "pjrt_ref,cpu"}


def environment(backend: str, options: argparse.Namespace) -> dict[str, str]:
    """The pytest process's environment for `backend`, "cpu" or "pjrt_ref"
    (the plugin test kit starts from pjrt_ref's for a plugin under test)."""
    env = dict(os.environ)
    env["JAX_NUM_GENERATED_CASES"] = str(options.cases)
    env["JAX_ENABLE_X64"] = "1" if options.x64 else "0"
    if backend != "cpu" and options.device_tag:
        env["PJRT_REF_JAX_DEVICE_TAG"] = options.device_tag
    if options.devices > 1:
        # XLA's host device count serves cpu and XLA-built cpu plugins; PJRT_REF_NUM_DEVICES pjrt_ref.
        flag = f"--xla_force_host_platform_device_count={options.devices}"
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flag).strip()
        if backend != "cpu":
            env["PJRT_REF_NUM_DEVICES"] = str(options.devices)
    env["JAX_PLATFORMS"] = PLATFORMS[backend]
    return env


# Test files of JAX's tests/ that `--all` leaves out, and why: they cannot run
# on any CPU backend with the jax wheel. Each was run once on cpu (jax-v0.10.2,
# Python 3.11, 2026-11-27 and 2026-11-28): every one ends at collection or
# skips every test. Files that
# merely skip most of their tests on a CPU (GPU and TPU tests with an
# interpret mode, say) are run, and so are the few that need `hypothesis`.
LEFT_OUT = {
    "tests/multiprocess/": "multi-process tests: JAX's launcher starts one process per task; "
                           "run alone, each test skips",
    "tests/mosaic/flash_attention_test.py": "Mosaic GPU: needs jax.experimental.mosaic.gpu.examples, "
                                            "not in the jax wheel",
    "tests/mosaic/gpu_dialect_test.py": "Mosaic GPU dialect: needs the GPU build's MLIR dialects",
    "tests/mosaic/gpu_layout_inference_test.py": "Mosaic GPU layouts: needs the GPU build's MLIR dialects",
    "tests/mosaic/gpu_test.py": "Mosaic GPU: imports jax._src.hypothesis_test_util, not in the jax wheel",
    "tests/mosaic/gpu_torch_distributed_test.py": "Mosaic GPU with torch.distributed on GPUs",
    "tests/mosaic/matmul_test.py": "Mosaic GPU matmul: imports jax._src.hypothesis_test_util, "
                                   "not in the jax wheel",
    "tests/pallas/tpu_all_gather_test.py": "TPU Pallas: imports jax._src.hypothesis_test_util, "
                                           "not in the jax wheel",
    "tests/pallas/tpu_ops_test.py": "TPU Pallas: imports jax._src.hypothesis_test_util, not in the jax wheel",
    "tests/pallas/tpu_pallas_call_print_test.py": "TPU Pallas: imports jax._src.pallas.pallas_test_util, "
                                                  "not in the jax wheel",
    "tests/pallas/tpu_pallas_test.py": "TPU Pallas: imports jax._src.pallas.pallas_test_util, "
                                       "not in the jax wheel",
    "tests/pallas/tpu_splash_attention_kernel_sharded_test.py": "TPU Pallas: imports "
                                                                "jax._src.pallas.pallas_test_util, not in "
                                                                "the jax wheel",
    # Found by the whole-suite run on cpu of 2026-11-28: these end at collection on any backend.
    "tests/state_test.py": "imports jax._src.hypothesis_test_util, not in the jax wheel",
    "tests/hypothesis_test_util_test.py": "tests jax._src.hypothesis_test_util, not in the jax wheel",
    "tests/pallas/ops_test.py": "imports jax._src.hypothesis_test_util, not in the jax wheel",
    "tests/pallas/indexing_test.py": "imports jax._src.hypothesis_test_util, not in the jax wheel",
    "tests/pallas/einshape_test.py": "imports jax._src.hypothesis_test_util, not in the jax wheel",
    "tests/pallas/einshape_parse_test.py": "imports jax._src.hypothesis_test_util, not in the jax wheel",
    "tests/pallas/pallas_test.py": "imports jax._src.pallas.pallas_test_util, not in the jax wheel",
    "tests/pallas/pipelining/": "imports jax._src.pallas.pipelining, not in the jax wheel",
    "tests/pallas/tpu_pallas_pipeline_test.py": "TPU Pallas: imports jax._src.hypothesis_test_util, "
                                                "not in the jax wheel",
    "tests/pallas/tpu_sparsecore_pallas_test.py": "TPU Pallas: imports jax._src.hypothesis_test_util, "
                                                  "not in the jax wheel",
    "tests/pallas/tpu_splash_attention_kernel_test.py": "TPU Pallas: imports jax._src.hypothesis_test_util, "
                                                        "not in the jax wheel",
}


def all_files(checkout: str) -> list[str]:
    """Every `*_test.py` under the checkout's tests/ (subfolders too), minus LEFT_OUT."""
    root = os.path.join(checkout, "tests")
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            if name.endswith("_test.py"):
                found.append(os.path.relpath(os.path.join(directory, name), checkout).replace(os.sep, "/"))
    return sorted(f for f in found if not any(f == out or (out.endswith("/") and f.startswith(out))
                                              for out in LEFT_OUT))


DEVICE_REQUEST = re.compile(r"request_cpu_devices\(\s*(\d+)\s*\)")


def devices_asked(checkout: str, file: str) -> int:
    """The most devices a test file asks JAX for (`jtu.request_cpu_devices(n)`), or 1."""
    with open(os.path.join(checkout, file), errors="replace") as handle:
        return max((int(n) for n in DEVICE_REQUEST.findall(handle.read())), default=1)


def check_version(checkout: str) -> None:
    import jax

    version_file = os.path.join(checkout, "jax", "version.py")
    if not os.path.exists(version_file):
        return
    with open(version_file) as handle:
        text = handle.read()
    if f'_version: str = "{jax.__version__}"' not in text:
        print(f"warning: {checkout} may not be jax {jax.__version__}'s checkout", file=sys.stderr)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cases", type=int, default=1, help="JAX_NUM_GENERATED_CASES (default 1)")
    parser.add_argument("--x64", action="store_true", help="JAX_ENABLE_X64=1")
    parser.add_argument("--device-tag", default="cpu",
                        help="a device tag pjrt_ref's device carries for JAX's tests (default cpu; '' for none)")


SUITE = Suite(command="pjrt-ref jax-tests", description=__doc__.split("\n\n")[1],
              checkout="a checkout of JAX's repository (its tests/ at least)",
              default_files=DEFAULT_FILES, backends=BACKENDS, environment=environment,
              check_version=check_version, workers=2, add_options=add_options,
              pytest_plugins=("pjrt_ref.frameworks.jax.suite_plugin",), all_files=all_files,
              devices_asked=devices_asked)


def main(argv: list[str] | None = None) -> int:
    return run_suite(SUITE, argv)


if __name__ == "__main__":
    sys.exit(main())
