"""pytest plugin of the kit's recording run: tells the recording proxy where to write and which test runs.

The proxy (capi_shim/recording_proxy.c) reads PJRT_REF_RECORD_DIR and
PJRT_REF_RECORD_TEST at each call (setting os.environ sets the C
environment it reads). Each pytest process (each xdist worker, and a
worker started again after a crash) writes into a folder of its own under
the run's folder, so that no two processes number their records alike;
executions outside any test (collection, module set-up) are not kept.
"""
from __future__ import annotations

import os

import pytest

from pjrt_ref import settings

FOLDER_VARIABLE = "PJRT_REF_RECORD_DIR"
TEST_VARIABLE = "PJRT_REF_RECORD_TEST"


def pytest_configure(config) -> None:
    base = settings.get(FOLDER_VARIABLE)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not base or (worker is None and getattr(config.option, "numprocesses", None)):
        return               # xdist's controller runs no test; its workers start from its environment
    folder = os.path.join(base, f"{worker or 'main'}-{os.getpid()}")
    os.makedirs(folder, exist_ok=True)
    os.environ[FOLDER_VARIABLE] = folder


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    os.environ[TEST_VARIABLE] = item.nodeid
    try:
        yield
    finally:
        del os.environ[TEST_VARIABLE]
