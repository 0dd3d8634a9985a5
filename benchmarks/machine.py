"""What a benchmark run was measured on, so that runs on different machines
can be told apart: the CPU (model, family/model numbers, its widest vector
instructions), the cores, numpy's BLAS and the kernels it picked for this
CPU (OpenBLAS's corename: "Haswell" on an AVX2 machine, "SkylakeX" with
AVX-512), and the versions of Python, numpy and JAX. Read without importing
JAX (the parent process never does)."""
from __future__ import annotations

import importlib.metadata
import os
import platform

from pjrt_ref.interpreter.native import openblas


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty elsewhere)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def _vector_extensions(flags: set[str]) -> str:
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse4_2", "SSE4.2")):
        if flag in flags:
            return name
    return "unknown"


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe() -> dict:
    """The machine and software as a JSON-able dict."""
    cpu = _cpuinfo()
    flags = set(cpu.get("flags", "").split())
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "cpu": cpu.get("model name") or platform.processor() or platform.machine(),
        "cpu_family": cpu.get("cpu family"), "cpu_model": cpu.get("model"),
        "vector_extensions": _vector_extensions(flags),
        "cores": os.cpu_count(), "usable_cores": usable,
        **openblas.describe(),
        "python": platform.python_version(), "numpy": _version("numpy"),
        "jax": _version("jax"), "jaxlib": _version("jaxlib"),
    }


def summary(info: dict) -> str:
    """One line for the report's header."""
    cpu = info["cpu"]
    if info.get("cpu_family"):
        cpu += f" (family {info['cpu_family']}, model {info['cpu_model']})"
    blas = (f"OpenBLAS kernels {info['corename']} ({info['config'].split()[1]})"
            if info.get("corename") else info.get("blas", "BLAS unknown"))
    return (f"{cpu}, {info['vector_extensions']}, {info['cores']} cores "
            f"({info['usable_cores']} usable), {blas}, Python {info['python']}, "
            f"numpy {info['numpy']}, jax {info['jax']}, jaxlib {info['jaxlib']}")
