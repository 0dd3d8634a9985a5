"""`python -m benchmarks`: every workload on pjrt-ref, XLA CPU and the
StableHLO reference interpreter, each backend in its own process.

The parent never imports JAX: it starts one `benchmarks.worker` process per
(workload, backend), collects their timings and outputs, and compares every
backend's outputs with XLA's. XLA and pjrt-ref run in alternating pairs of
processes (`--rounds`, see `bench_workload`), so that a change in the
machine's load between two processes moves one pair's ratio, not the result.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from pjrt_ref import settings

from . import machine
from .workloads import WORKLOADS, select

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Seconds a pjrt-ref or XLA worker may take in all (import, compile, calls).
WORKER_TIMEOUT = 900.0


def workload_kind(name: str) -> str:
    return WORKLOADS[name].kind if name in WORKLOADS else "steady"


def run_worker(mode: str, workload: str, repeats: int, time_limit: float | None = None) -> dict:
    """Run one worker; return its result dict (with "error" or "timeout" on failure)."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "pjrt_ref" if mode == "plugin" else "cpu"
    if mode == "dispatch":
        # The interpreted path: numba would fuse the whole chain into one loop.
        env["PJRT_REF_JIT"] = "0"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cold_cache = None
    if workload_kind(workload) == "compile_cold":
        # Cold: no numba kernels or product timings on disk for pjrt_ref,
        # no persistent compilation cache for XLA.
        cold_cache = tempfile.mkdtemp(prefix="pjrt_ref_cold_cache_")
        env["PJRT_REF_CACHE_DIR"] = cold_cache
        env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
    # Compile times count a warm start: Python's bytecode cache on, as for
    # an installed package (__pycache__ is git-ignored). Without it every
    # worker compiles pjrt-ref's ~100 modules from source (~0.2 s here).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="pjrt_ref_bench_") as outdir:
        command = [sys.executable, "-m", "benchmarks.worker", mode, workload, str(repeats), outdir]
        if time_limit is not None:
            command.append(str(time_limit))
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        timed_out = _wait(process, outdir, time_limit)
        stdout, stderr = process.communicate()
        if cold_cache is not None:
            shutil.rmtree(cold_cache, ignore_errors=True)
        if timed_out:
            return {"timeout": time_limit}
        result_path = os.path.join(outdir, "result.json")
        if process.returncode != 0 or not os.path.exists(result_path):
            tail = (stderr or stdout).strip().splitlines()[-3:]
            return {"error": f"exit {process.returncode}: " + " | ".join(tail)}
        with open(result_path) as f:
            result = json.load(f)
        with np.load(os.path.join(outdir, "outputs.npz")) as outputs:
            result["outputs"] = [outputs[f"arr_{i}"] for i in range(len(outputs.files))]
        return result


def _wait(process: subprocess.Popen, outdir: str, time_limit: float | None) -> bool:
    """Wait for the worker; True if it was killed for exceeding its limit.

    With a `time_limit` (reference interpreter), the limit counts from the
    moment the worker starts its first call (it touches `outdir/started`).
    """
    start = time.monotonic()
    started_at = None
    marker = os.path.join(outdir, "started")
    while process.poll() is None:
        now = time.monotonic()
        if time_limit is not None and started_at is None and os.path.exists(marker):
            started_at = now
        over_limit = started_at is not None and now - started_at > time_limit
        if over_limit or now - start > WORKER_TIMEOUT:
            process.kill()
            return True
        time.sleep(0.05)
    return False


def max_abs_error(outputs: list, expected: list) -> float | None:
    if len(outputs) != len(expected):
        return None
    worst = 0.0
    for ours, theirs in zip(outputs, expected):
        if ours.shape != theirs.shape:
            return None
        if ours.size:
            diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
            worst = max(worst, float(np.nanmax(diff)) if not np.isnan(diff).all() else 0.0)
    return worst


def bench_workload(name: str, repeats: int, time_limit: float, pjrt_path: str,
                   rounds: int = 3) -> dict:
    """One workload on the three backends. XLA and pjrt_ref run in `rounds`
    alternating pairs of processes (xla, ours, xla, ours, ...): on a shared
    machine the load drifts over seconds, and a pair measured back to back
    sees about the same load. The ratio reported is the median of the
    pairs' ratios; each backend's steady-state median is the median of its
    rounds' medians. Compile time, peak memory and outputs come from the
    first round."""
    xla_rounds, our_rounds = [], []
    if workload_kind(name) == "compile_scaling":
        rounds = 1    # XLA alone takes about a minute per round (its 10,000-op rows)
    for _ in range(max(1, rounds)):
        xla_rounds.append(run_worker("cpu", name, repeats))
        our_rounds.append(run_pjrt_ref(name, repeats, pjrt_path))
        if "median_s" not in xla_rounds[-1] or "median_s" not in our_rounds[-1]:
            break   # a failed worker fails the same way again: report it once
    xla, ours = combine_rounds(xla_rounds), combine_rounds(our_rounds)
    if workload_kind(name) == "steady":
        reference = run_worker("reference", name, repeats, time_limit)
    else:
        # Compile latency and many small programs are about the backend's
        # compiler; the reference interpreter only parses.
        reference = {"skipped": "not timed for this kind of workload"}
    backends = {"pjrt_ref": ours, "xla_cpu": xla, "reference": reference}
    for result in backends.values():
        if "outputs" in result and "outputs" in xla:
            result["max_abs_error"] = max_abs_error(result["outputs"], xla["outputs"])
        if "median_s" in result and "median_s" in xla:
            result["ratio_to_xla"] = result["median_s"] / xla["median_s"]
        elif "timeout" in result and "median_s" in xla:
            result["ratio_to_xla_at_least"] = result["timeout"] / xla["median_s"]
    if "round_medians_s" in ours and "round_medians_s" in xla:
        pair_ratios = [a / b for a, b in zip(ours["round_medians_s"], xla["round_medians_s"])]
        ours["round_ratios"] = pair_ratios
        ours["ratio_to_xla"] = float(np.median(pair_ratios))
    if "round_backend_compile_s" in ours and "round_backend_compile_s" in xla:
        # W11's targets are measured on `.compile()` alone (issue 32's
        # decision); the window with JAX's tracing and lowering is kept as
        # information.
        compile_ratios = [a / b for a, b in zip(ours["round_backend_compile_s"], xla["round_backend_compile_s"])]
        ours["window_ratio"] = ours.get("ratio_to_xla")
        ours["window_round_ratios"] = ours.get("round_ratios", [])
        ours["backend_compile_ratio"] = ours["ratio_to_xla"] = float(np.median(compile_ratios))
        ours["round_ratios"] = compile_ratios
    for result in backends.values():
        result.pop("outputs", None)
    summary = {}
    if "median_s" in ours:
        if "median_s" in reference:
            summary["speedup_vs_reference"] = reference["median_s"] / ours["median_s"]
        elif "timeout" in reference:
            summary["speedup_vs_reference_at_least"] = reference["timeout"] / ours["median_s"]
    target = WORKLOADS[name].target_ratio
    summary["target_ratio"] = target
    if workload_kind(name) == "loop_ops" and "rows" in ours:
        rows = loop_rows(ours, xla)
        summary["loop_rows"] = rows
        if rows:
            ours["ratio_to_xla"] = rows[0]["ratio"]           # the worst row
        summary["interpreted_rows"] = [r["row"] for r in rows if r["interpreted"]]
    if workload_kind(name) == "compile_scaling" and "rows" in ours:
        rows = scaling_rows(ours, xla)
        summary["scaling_rows"] = rows
        summary["per_op_growth"] = per_op_growth(rows)
        if rows:
            ours["ratio_to_xla"] = max(r["ratio"] for r in rows)
    for result in backends.values():
        result.pop("rows", None)
    if "ratio_to_xla" in ours:
        summary["target_met"] = (ours["ratio_to_xla"] <= target and not summary.get("interpreted_rows")
                                 and all(g <= MAX_PER_OP_GROWTH for g in summary.get("per_op_growth", {}).values()))
    return {"workload": name, "title": WORKLOADS[name].title, "backends": backends, **summary}


# W0 times a fresh process to the first result of each of these.
FIRST_RESULT_WORKLOADS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8", "W9", "W10")


def time_first_result(workload: str, platform: str) -> float | str:
    """Seconds from starting `python -m benchmarks.first_result WORKLOAD` to its
    READY line (or the error), with JAX_PLATFORMS=platform."""
    env = dict(os.environ, JAX_PLATFORMS=platform, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.first_result", workload], cwd=REPO_ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    seconds = time.perf_counter() - start
    _, stderr = process.communicate(timeout=WORKER_TIMEOUT)
    if not line.startswith("READY"):
        return "failed: " + " | ".join(stderr.strip().splitlines()[-2:])
    return seconds


def first_results(rounds: int) -> dict:
    """W0: each workload's first result in fresh processes, XLA and pjrt_ref
    alternating; per workload the medians and the median of the pairs' ratios."""
    rows = {}
    for workload in FIRST_RESULT_WORKLOADS:
        print(f"running W0 ({workload}) ...", file=sys.stderr, flush=True)
        pairs = [(time_first_result(workload, "cpu"), time_first_result(workload, "pjrt_ref"))
                 for _ in range(max(1, rounds))]
        failed = [t for pair in pairs for t in pair if isinstance(t, str)]
        if failed:
            rows[workload] = {"error": failed[0]}
            continue
        xla, ours = [p[0] for p in pairs], [p[1] for p in pairs]
        rows[workload] = {"xla_s": float(np.median(xla)), "pjrt_ref_s": float(np.median(ours)),
                          "ratio": float(np.median([b / a for a, b in pairs]))}
    ratios = [row["ratio"] for row in rows.values() if "ratio" in row]
    return {"rows": rows, "worst_ratio": max(ratios) if ratios else None,
            "target_met": bool(ratios) and len(ratios) == len(rows) and max(ratios) <= 1.0}


def first_result_lines(report: dict) -> list[str]:
    w0 = report.get("first_results")
    if not w0:
        return []
    lines = ["", "W0, time to first result: a fresh process (`python -m benchmarks.first_result W`) "
             "from its start to the first result (import jax, inputs, `jax.jit(f)(*args)`, "
             "block); medians, XLA and pjrt_ref alternating; target ≤ 1.0 for every workload:", "",
             "| workload | XLA | pjrt_ref | pjrt_ref/XLA |", "|---|---|---|---|"]
    for workload, row in w0["rows"].items():
        if "error" in row:
            lines.append(f"| {workload} | - | {row['error'][:80]} | - |")
        else:
            lines.append(f"| {workload} | {fmt_time(row['xla_s'])} | {fmt_time(row['pjrt_ref_s'])} | "
                         f"{row['ratio']:.2f} |")
    worst = w0.get("worst_ratio")
    lines += ["", f"W0 worst ratio {'-' if worst is None else f'{worst:.2f}'}; target met: "
              f"{'yes' if w0.get('target_met') else 'no'}."]
    return lines


def run_pjrt_ref(name: str, repeats: int, pjrt_path: str) -> dict:
    """pjrt_ref through the plugin, or the interpreter directly (`--pjrt-path`;
    "auto" falls back to the interpreter if the plugin fails)."""
    ours = {"error": "not run"}
    if pjrt_path in ("auto", "plugin"):
        ours = run_worker("plugin", name, repeats)
        ours["path"] = "plugin"
    if workload_kind(name) != "steady":
        return ours    # compile times and many programs are measured through JAX alone
    if pjrt_path == "interpreter" or (pjrt_path == "auto" and "median_s" not in ours):
        fallback_reason = ours.get("error")
        ours = run_worker("interpreter", name, repeats)
        ours["path"] = "interpreter"
        if fallback_reason and pjrt_path == "auto":
            ours["plugin_error"] = fallback_reason
    return ours


def combine_rounds(rounds: list[dict]) -> dict:
    """One backend's result over its rounds: the first round's result, with
    the median of the rounds' medians and the list of those medians. A
    failed round (error or timeout) makes the whole result that failure."""
    failed = [r for r in rounds if "median_s" not in r]
    if failed:
        return failed[0]
    medians = [r["median_s"] for r in rounds]
    combined = {**rounds[0], "median_s": float(np.median(medians)), "round_medians_s": medians,
                "calls": sum(r.get("calls", 0) for r in rounds)}
    if all("backend_compile_s" in r for r in rounds):   # compile workloads: `.compile()` alone
        combined["round_backend_compile_s"] = [r["backend_compile_s"] for r in rounds]
    if all("rows" in r for r in rounds):                  # W13, W14: each row's medians over the rounds
        combined["rows"] = {label: {**row, **{key: float(np.median(
            [r["rows"][label][key] for r in rounds if label in r["rows"]]))
            for key in ROW_MEASURES if key in row}} for label, row in rounds[0]["rows"].items()}
    return combined


ROW_MEASURES = ("per_iteration_s", "compile_s", "over_s")   # what W13's and W14's rows time


def loop_rows(ours: dict, xla: dict) -> list[dict]:
    """W13's rows: time per iteration on each backend, the ratio, and whether
    pjrt_ref ran the loop interpreted; worst ratio first."""
    found = []
    for label, row in ours.get("rows", {}).items():
        theirs = xla.get("rows", {}).get(label)
        if theirs is None:
            continue
        ratio = row["per_iteration_s"] / max(theirs["per_iteration_s"], 1e-12)
        found.append({"row": label, "pjrt_ref_s": row["per_iteration_s"],
                      "xla_s": theirs["per_iteration_s"], "ratio": ratio,
                      "interpreted": row.get("interpreted", False)})
    return sorted(found, key=lambda r: -r["ratio"])


# W14's "time per op roughly constant": per op at the largest size / at the smallest.
MAX_PER_OP_GROWTH = 2.0


def scaling_rows(ours: dict, xla: dict) -> list[dict]:
    """W14's rows, in size order: compile time on each backend, per op, and the ratio."""
    found = []
    for label, row in ours.get("rows", {}).items():
        theirs = xla.get("rows", {}).get(label)
        if theirs is None or "compile_s" not in row:
            continue
        entry = {"row": label, "ops": row["ops"], "devices": row["devices"], "pjrt_ref_s": row["compile_s"]}
        if "compile_s" in theirs:
            entry.update(xla_s=theirs["compile_s"], ratio=row["compile_s"] / theirs["compile_s"])
        else:    # XLA outlasted the row's limit: the ratio is at most this
            entry.update(xla_over_s=theirs["over_s"], ratio=row["compile_s"] / theirs["over_s"],
                         ratio_is_bound=True)
        found.append(entry)
    return found


def per_op_growth(rows: list[dict]) -> dict[str, float]:
    """For each device count: pjrt_ref's compile time per op at the largest
    size over that at the smallest (1.0: linear)."""
    growth = {}
    for devices in sorted({r["devices"] for r in rows}):
        mine = sorted((r for r in rows if r["devices"] == devices), key=lambda r: r["ops"])
        first, last = mine[0], mine[-1]
        growth[str(devices)] = (last["pjrt_ref_s"] / last["ops"]) / (first["pjrt_ref_s"] / first["ops"])
    return growth


# -- formatting ---------------------------------------------------------------

def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-6:     # W13's time per iteration
        return f"{seconds * 1e9:.1f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_error(value) -> str:
    return "-" if value is None else f"{value:.2g}"


def backend_row(name: str, backend: str, result: dict) -> str:
    label = backend
    if backend == "pjrt_ref":
        label += f" ({result.get('path', '?')})"
    if "skipped" in result:
        cells = ["-", "-", "-", "-", "-"]
    elif "timeout" in result:
        ratio = f"> {result['ratio_to_xla_at_least']:.0f}" if "ratio_to_xla_at_least" in result else "-"
        cells = ["-", f"timeout (>{result['timeout']:.0f} s)", ratio, "-", "-"]
    elif "error" in result:
        cells = ["-", "failed: " + result["error"][:80].replace("|", "/"), "-", "-", "-"]
    else:
        ratio = result.get("ratio_to_xla")
        peak = result.get("peak_mb")
        cells = [fmt_time(result.get("compile_s")), fmt_time(result["median_s"]),
                 "-" if ratio is None else f"{ratio:.2f}",
                 fmt_error(result.get("max_abs_error")),
                 "-" if peak is None else f"{peak:.0f}"]
    return f"| {name} | {label} | " + " | ".join(cells) + " |"


def markdown(report: dict) -> str:
    lines = [
        f"Command: `{report['command']}`  ",
        f"Date: {report['date']}; machine: {report['machine']}",
        "",
        "| workload | backend | compile | steady-state median | ratio to XLA | max abs error vs XLA | peak MB (compile+run) |",
        "|---|---|---|---|---|---|---|",
    ]
    for entry in report["workloads"]:
        for backend in ("pjrt_ref", "xla_cpu", "reference"):
            lines.append(backend_row(entry["workload"], backend, entry["backends"][backend]))
    lines += ["", "pjrt_ref/XLA is the median of the ratios of alternating process pairs "
              "(one per round, listed); medians above are medians of the rounds' medians. "
              "For W11c/W11w the first table's median is of compile times (`jit(f).lower(x).compile()`; "
              "W11c one cold compile per process) and the targets' ratio of `.compile()` alone "
              "(below), for W12 of the total wall time of its "
              "programs (one per process).",
              "", "| workload | what | target pjrt_ref/XLA | pjrt_ref/XLA | rounds | met | pjrt_ref speed-up vs reference |",
              "|---|---|---|---|---|---|---|"]
    for entry in report["workloads"]:
        ours = entry["backends"]["pjrt_ref"]
        ratio = ours.get("ratio_to_xla")
        met = entry.get("target_met")
        if "speedup_vs_reference" in entry:
            speedup = f"{entry['speedup_vs_reference']:.3g}x"
        elif "speedup_vs_reference_at_least" in entry:
            speedup = f"> {entry['speedup_vs_reference_at_least']:.3g}x (reference timed out)"
        else:
            speedup = "-"
        lines.append(f"| {entry['workload']} | {entry['title']} | ≤ {entry['target_ratio']:g} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}'} | "
                     f"{' '.join(f'{r:.2f}' for r in ours.get('round_ratios', [])) or '-'} | "
                     f"{'-' if met is None else ('yes' if met else 'no')} | {speedup} |")
    compile_only = [e for e in report["workloads"] if "backend_compile_ratio" in e["backends"]["pjrt_ref"]]
    if compile_only:
        lines += ["", "W11c/W11w above are the backends' own part of the compile, `.compile()` alone "
                  "(the targets' measure): pjrt_ref and XLA medians, and, as information, the whole "
                  "window `jit(f).lower(x).compile()` with JAX's tracing and lowering:"]
        for entry in compile_only:
            ours, xla = entry["backends"]["pjrt_ref"], entry["backends"]["xla_cpu"]
            window = ours.get("window_ratio")
            lines.append(f"- {entry['workload']}: `.compile()` pjrt_ref {fmt_time(float(np.median(ours['round_backend_compile_s'])))}, "
                         f"XLA {fmt_time(float(np.median(xla['round_backend_compile_s'])))}, "
                         f"ratio {ours['backend_compile_ratio']:.2f}; whole window ratio "
                         f"{'-' if window is None else f'{window:.2f}'} (rounds "
                         f"{' '.join(f'{r:.2f}' for r in ours.get('window_round_ratios', [])) or '-'})")
    for entry in report["workloads"]:
        if "loop_rows" in entry:
            lines += ["", *loop_lines(entry)]
        if "scaling_rows" in entry:
            lines += ["", *scaling_lines(entry)]
    dispatch = report.get("dispatch")
    if dispatch:
        if "median_s" in dispatch:
            per_op = dispatch["median_s"] / dispatch["num_ops"] * 1e6
            lines += ["", f"Interpreter dispatch: {per_op:.2f} µs per op "
                      f"(chain of {dispatch['num_ops']} scalar add/multiply ops, "
                      f"pjrt_ref.interpreter.load(text)(x, y) with PJRT_REF_JIT=0, i.e. "
                      "no numba fusion; target < 2 µs)."]
        else:
            lines += ["", f"Interpreter dispatch: failed: {dispatch.get('error')}"]
    lines += first_result_lines(report)
    products = product_lines(report)
    if products:
        lines += ["", "How pjrt_ref ran its matrix products on this machine (product_strategy.py; "
                  "best times of the timing probe, µs):", "", *products]
    notes = [f"- {e['workload']}: plugin failed ({e['backends']['pjrt_ref']['plugin_error'][:200]}), "
             "measured through the interpreter directly"
             for e in report["workloads"] if "plugin_error" in e["backends"]["pjrt_ref"]]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def loop_lines(entry: dict, worst: int = 10) -> list[str]:
    """W13's worst rows and the rows pjrt_ref ran interpreted."""
    rows = entry["loop_rows"]
    lines = [f"{entry['workload']}, the {min(worst, len(rows))} worst of {len(rows)} rows "
             "(time per iteration; target: every row ≤ 10x XLA, none interpreted):", "",
             "| row | pjrt_ref | XLA | ratio | pjrt_ref runs it |", "|---|---|---|---|---|"]
    for row in rows[:worst]:
        lines.append(f"| {row['row']} | {fmt_time(row['pjrt_ref_s'])} | {fmt_time(row['xla_s'])} | "
                     f"{row['ratio']:.1f} | {'interpreted' if row['interpreted'] else 'compiled'} |")
    interpreted = entry.get("interpreted_rows", [])
    lines += ["", f"Rows pjrt_ref ran interpreted ({len(interpreted)}): "
              + (", ".join(interpreted) if interpreted else "none") + "."]
    return lines


def scaling_lines(entry: dict) -> list[str]:
    """W14's rows and the growth of pjrt_ref's compile time per op."""
    lines = [f"{entry['workload']}, `.compile()` by program size (target: every row ≤ XLA, and "
             f"time per op at the largest size ≤ {MAX_PER_OP_GROWTH:g}x that at the smallest):", "",
             "| row | pjrt_ref | per op | XLA | per op | ratio |", "|---|---|---|---|---|---|"]
    for row in entry["scaling_rows"]:
        if "xla_s" in row:
            theirs = f"{fmt_time(row['xla_s'])} | {fmt_time(row['xla_s'] / row['ops'])} | {row['ratio']:.2f}"
        else:
            theirs = (f"> {fmt_time(row['xla_over_s'])} (stopped) | > {fmt_time(row['xla_over_s'] / row['ops'])} | "
                      f"< {row['ratio']:.2f}")
        lines.append(f"| {row['row']} | {fmt_time(row['pjrt_ref_s'])} | "
                     f"{fmt_time(row['pjrt_ref_s'] / row['ops'])} | {theirs} |")
    growth = ", ".join(f"{devices} device{'s' if devices != '1' else ''}: {value:.2f}"
                       for devices, value in entry["per_op_growth"].items())
    return lines + ["", f"pjrt_ref's time per op, largest size over smallest: {growth}."]


def product_lines(report: dict) -> list[str]:
    """One line per product shape pjrt_ref's workers met: the strategy they
    used and what the probe measured (first round of each workload)."""
    seen: dict[str, dict] = {}
    for entry in report["workloads"]:
        seen.update(entry["backends"]["pjrt_ref"].get("products", {}))
    lines = []
    for key, strategy in sorted(seen.items()):
        if strategy["openblas_threads"]:
            how = f"one call on {strategy['openblas_threads']} OpenBLAS threads"
        elif strategy.get("fine"):
            how = "fine blocks (blas.fine_blocks) shared with idle CPUs"
        else:
            how = "blocks shared with idle CPUs" if strategy["split"] else "blocks on one thread"
        measured = ", ".join(f"{name} {us:g}" for name, us in sorted(strategy["measured_us"].items()))
        lines.append(f"- `{key}`: {how}" + (f" ({measured})" if measured else " (not timed: default)"))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--only", metavar="W1,W2", help="comma-separated workloads (default: all)")
    parser.add_argument("--repeats", type=int, default=20,
                        help="steady-state calls per backend at least (W1: x50); each backend "
                             "is also timed for at least 0.5 s")
    parser.add_argument("--time-limit", type=float, default=60.0,
                        help="seconds the reference interpreter may spend on one workload's calls")
    parser.add_argument("--pjrt-path", choices=("auto", "plugin", "interpreter"), default="auto",
                        help="how pjrt_ref runs: through JAX and the plugin, the interpreter "
                             "directly, or the plugin with the interpreter as fallback (auto)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating XLA/pjrt_ref process pairs per workload; the ratio "
                             "is the median of the pairs' ratios (default 3)")
    parser.add_argument("--no-dispatch", action="store_true", help="skip the 1000-op dispatch measurement")
    parser.add_argument("--first-result-rounds", type=int, default=5,
                        help="W0: fresh-process pairs (XLA, pjrt_ref) per workload (default 5)")
    args = parser.parse_args(argv)
    try:
        names = select(args.only.split(",")) if args.only else list(WORKLOADS)
    except KeyError as unknown:
        parser.error(f"unknown workload: {unknown.args[0]}")
    command = "python -m benchmarks " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    print(f"Reproduce: `{command.strip()}` (from the repository root)\n", flush=True)
    machine_info = machine.describe()
    report = {
        "command": command.strip(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine.summary(machine_info),
        "machine_info": machine_info,
        "jit": "1" if settings.get("PJRT_REF_JIT") else "0",
        "workloads": [],
    }
    if "W0" in names:
        report["first_results"] = first_results(args.first_result_rounds)
    for name in names:
        if name == "W0":
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        report["workloads"].append(bench_workload(name, args.repeats, args.time_limit, args.pjrt_path,
                                                    args.rounds))
    if not args.no_dispatch:
        report["dispatch"] = run_worker("dispatch", "-", args.repeats)
        report["dispatch"].pop("outputs", None)
    print(markdown(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0
