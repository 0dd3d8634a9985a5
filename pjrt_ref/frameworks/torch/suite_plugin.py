"""The pytest plugin `pjrt-ref torch-tests` loads into PyTorch/XLA's test runs (`-p`).

PyTorch/XLA's CI runs its files with `TORCH_TEST_DEVICES` naming its
`test/pytorch_test_base.py`: torch's device-generic tests
(`instantiate_device_type_tests`) then get XLA variants through its
`XLATestBase`. That class asks which XLA hardware it runs on
(`xm.xla_device_hw`) and keeps a table of the torch tests each kind
disables (`DISABLED_TORCH_TESTS`, keyed "CPU" and "TPU"); any other kind
fails its assertion `Unsupported device type:PJRT_REF`, and with it the
whole file's collection.

pjrt_ref is a host-memory backend with XLA CPU's semantics, so in the
pjrt_ref run its device type gets CPU's table, without editing the
checkout: in both copies of the base (torch runs the file with `runpy`
for TORCH_TEST_DEVICES, the test files import it as `pytorch_test_base`).
"""
from __future__ import annotations

import os
import sys

DEVICE_TYPE = "PJRT_REF"


def pytest_configure(config) -> None:
    if os.environ.get("PJRT_DEVICE") != DEVICE_TYPE or not os.environ.get("TORCH_TEST_DEVICES"):
        return
    from torch.testing._internal import common_device_type

    for base in common_device_type.device_type_test_bases:
        if getattr(base, "device_type", None) == "xla":
            accept_as_cpu(base.instantiate_test.__func__.__globals__)
    try:
        import pytorch_test_base           # the checkout's test/ is on PYTHONPATH (suite.py)
    except ImportError:
        return
    accept_as_cpu(vars(pytorch_test_base))


def accept_as_cpu(namespace: dict) -> None:
    """Give PJRT_REF the CPU entry of a pytorch_test_base namespace's disabled-test table."""
    table = namespace.get("DISABLED_TORCH_TESTS")
    if isinstance(table, dict) and "CPU" in table:
        table.setdefault(DEVICE_TYPE, table["CPU"])
    else:
        print(f"pjrt-ref: {namespace.get('__file__', 'pytorch_test_base')} has no DISABLED_TORCH_TESTS "
              "table with a CPU entry; its XLA tests may not collect on PJRT_REF", file=sys.stderr)
