"""One backend, one workload, in its own process.

    python -m benchmarks.worker MODE WORKLOAD REPEATS OUTDIR [TIME_LIMIT]

MODE is how the workload runs:
  cpu          JAX on its `cpu` backend (XLA)          JAX_PLATFORMS=cpu
  plugin       JAX on pjrt-ref through the PJRT C API  JAX_PLATFORMS=pjrt_ref
  interpreter  the JAX-lowered StableHLO on pjrt_ref.interpreter.load(text)
  reference    the JAX-lowered StableHLO on StableHLO's C++ reference
               interpreter (jaxlib.mlir.dialects.stablehlo.eval_module)
  dispatch     pjrt_ref.interpreter on a chain of 1000 tiny ops (WORKLOAD
               is ignored): the interpreter's cost per op

Writes OUTDIR/result.json (timings in seconds, memory in MB) and
OUTDIR/outputs.npz (the workload's results, flattened). The reference mode
touches OUTDIR/started when its first call begins, so the parent can apply
the time limit to the calls alone.
"""
from __future__ import annotations

import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from . import compile_scaling
from .workloads import WORKLOADS
from pjrt_ref.interpreter.loader import make_context
from pjrt_ref.interpreter.native import blas
from pjrt_ref.interpreter.optimiser import background

# Stop timing a backend after this many seconds of steady-state calls.
TIME_BUDGET = 20.0
# Time at least this long (and at least --repeats calls): 20 calls of a
# 0.3 ms product last 6 ms, short enough for one burst of another process's
# work on this shared machine to move the median; half a second of calls
# does not move with one burst.
MIN_TIMED_SECONDS = 0.5
# W1 measures latency: take this many times more samples than --repeats.
DISPATCH_SAMPLES_FACTOR = 50


def rss_mb(field: str = "VmRSS") -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak_rss() -> None:
    """Make VmHWM start again from the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        pass


def time_calls(call, repeats: int, budget: float = TIME_BUDGET,
               min_seconds: float = MIN_TIMED_SECONDS) -> list[float]:
    """Per-call wall times of `call()`, after the caller's warm-up call: at
    least `repeats` calls and `min_seconds` of them, at most `budget` seconds
    (and at least 3 calls)."""
    samples = []
    start = time.perf_counter()
    while len(samples) < repeats or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget and len(samples) >= 3:
            break
    return samples


def flat_arrays(tree) -> list[np.ndarray]:
    import jax

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def run_jax(workload, repeats: int) -> tuple[dict, list]:
    """cpu and plugin modes: jit, compile, call with arguments on the device."""
    import jax

    fn, args = workload.build()
    jitted = jax.jit(fn)
    t0 = time.perf_counter()
    lowered = jitted.lower(*args)
    lower_s = time.perf_counter() - t0
    device_args = jax.device_put(args)
    reset_peak_rss()
    base = rss_mb()
    t0 = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(*device_args))
    first_s = time.perf_counter() - t0
    kernels_s = warm_up(lambda: jax.block_until_ready(compiled(*device_args)))
    samples = time_calls(lambda: jax.block_until_ready(compiled(*device_args)), repeats)
    info = dict(lower_s=lower_s, compile_s=compile_s, first_call_s=first_s,
                background_kernels_s=kernels_s, samples=samples, peak_mb=rss_mb("VmHWM") - base,
                platform=jax.devices()[0].platform)
    return info, flat_arrays(out)


WARM_UP_S = 0.25     # over pjrt_ref's PJRT_REF_JIT_HOT_SECONDS (0.1): its loops' kernels get built


def warm_up(call) -> float:
    """Run `call` for WARM_UP_S (both backends alike), then wait for
    pjrt_ref's background kernels: seconds of that wait. A loop's kernel
    is built once the loop has run a while (optimiser/loops.py); the steady state
    is timed after."""
    start = time.perf_counter()
    for _ in range(1000):
        if time.perf_counter() - start >= WARM_UP_S:
            break
        call()
    return wait_for_background_kernels()


def wait_for_background_kernels() -> float:
    """Seconds until pjrt_ref's background thread has built the numba
    kernels this process queued (interpreter/optimiser/background.py; 0 on XLA
    or when none were queued): the steady state is timed after them."""
    if "pjrt_ref.interpreter.optimiser.background" not in sys.modules:
        return 0.0

    t0 = time.perf_counter()
    background.wait()
    return time.perf_counter() - t0


def time_compile(fn, args) -> tuple[float, float]:
    """Seconds for `jax.jit(fn).lower(*args).compile()`, start to end
    (tracing, lowering to StableHLO and the backend's compile), and the
    seconds of `.compile()` alone."""
    import jax

    t0 = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    t1 = time.perf_counter()
    lowered.compile()
    t2 = time.perf_counter()
    return t2 - t0, t2 - t1


def run_compile(workload, repeats: int) -> tuple[dict, list]:
    """compile_cold and compile_warm workloads. The backend is started
    first (`jax.devices()`), so neither time includes starting it.

    Cold: the process's first compile. The parent gives every such worker
    an empty PJRT_REF_CACHE_DIR (no numba kernels or product timings on
    disk) and turns JAX's persistent compilation cache off; Python's
    bytecode cache stays warm, as for an installed package.
    Warm: after that first compile, `jax.clear_caches()` (JAX's in-memory
    tracing, lowering and executable caches) and compile again; the median
    of `repeats` such compiles (at most 5). What stays warm: for XLA, its
    initialised LLVM and JAX's imported modules (JAX's persistent
    compilation cache is not set up); for pjrt_ref, its imported op
    modules, numba kernels compiled in this process (and on disk), the
    running bytecode checker process (bytecode_guard.py), the product
    timings and the program's kept plan (pjrt_ref/model/program_cache.py):
    what is left of a warm compile is JAX's and jaxlib's side of it."""
    import jax

    fn, args = workload.build()
    platform = jax.devices()[0].platform
    cold, cold_backend = time_compile(fn, args)
    samples, backend = [cold], [cold_backend]
    if workload.kind == "compile_warm":
        samples, backend = [], []
        for _ in range(max(1, min(repeats, 5))):
            jax.clear_caches()
            total, backend_only = time_compile(fn, args)
            samples.append(total)
            backend.append(backend_only)
    out = jax.block_until_ready(jax.jit(fn)(*args))
    return (dict(samples=samples, cold_s=cold, backend_compile_s=statistics.median(backend),
                 platform=platform), flat_arrays(out))


def run_programs(workload) -> tuple[dict, list]:
    """programs workloads: jit, compile and run each small program once, as
    a test suite does; one sample, the total wall time (backend started
    first; the default caches, warm on disk as for the other workloads)."""
    import jax

    programs = workload.build()
    platform = jax.devices()[0].platform
    outputs = []
    t0 = time.perf_counter()
    for _, fn, arg in programs:
        outputs.append(jax.block_until_ready(jax.jit(fn)(arg)))
    total = time.perf_counter() - t0
    return (dict(samples=[total], programs=len(programs), platform=platform),
            [np.asarray(o) for o in outputs])


def per_iteration_seconds(call) -> float:
    """Seconds per iteration of a loop `call(n)` runs n times: the slope between a
    short and a long trip count (medians of 5 calls each), so the call's fixed
    cost drops out; the long count grows until it adds at least 2 ms."""
    def median_time(n: int) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            call(n)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    short, long = 16, 1024
    base, total = median_time(short), median_time(long)
    while total - base < 2e-3 and long < 1 << 22 and total < 1.0:
        long *= 8
        total = median_time(long)
    return max(total - base, 0.0) / (long - short)


def runs_interpreted(fn, args) -> bool:
    """Whether pjrt_ref runs the program's `while` loop op by op (not compiled by optimiser/loops.py)."""
    import jax

    from pjrt_ref.interpreter.program import load

    program = load(jax.jit(fn).lower(16, *args).as_text())
    return any(step.op.name == "stablehlo.while"
               for function in program.module_plan.functions.values() for step in function.body.steps)


def run_loop_ops(workload) -> tuple[dict, list]:
    """loop_ops workloads (W13): each row's time per iteration, and on pjrt_ref
    whether its loop runs interpreted. The sample is the geometric mean over
    rows (for the rounds' pairing); the rows are what the report reads."""
    import jax

    jax.config.update("jax_enable_x64", True)       # int64, uint64 and float64 rows
    rows = workload.build()
    platform = jax.devices()[0].platform
    results, outputs = {}, []
    for label, fn, args in rows:
        jitted = jax.jit(fn)
        on_device = jax.device_put(args)
        out = jax.block_until_ready(jitted(100, *on_device))
        warm_up(lambda: jax.block_until_ready(jitted(1000, *on_device)))   # steady state, as W1-W12
        seconds = per_iteration_seconds(lambda n: jax.block_until_ready(jitted(n, *on_device)))
        results[label] = {"per_iteration_s": seconds}
        if platform == "pjrt_ref":
            results[label]["interpreted"] = runs_interpreted(fn, args)
        outputs.append(np.asarray(out).astype(np.float64))   # bfloat16 does not survive np.savez
    geometric = float(np.exp(np.mean(np.log([max(r["per_iteration_s"], 1e-12) for r in results.values()]))))
    return dict(samples=[geometric], rows=results, platform=platform), outputs


def run_compile_scaling(workload) -> tuple[dict, list]:
    """compile_scaling workloads (W14): each row in a process of its own
    (compile_scaling.time_row), killed after ROW_LIMIT_S; such a row is
    recorded with `over_s` instead of `compile_s`. The sample is the
    geometric mean over the rows that finished (for the rounds' pairing);
    the rows are what the report reads."""
    results, outputs = {}, []
    with tempfile.TemporaryDirectory(prefix="pjrt_ref_w14_") as scratch:
        for index, (label, devices, num_ops) in enumerate(compile_scaling.rows()):
            out = os.path.join(scratch, f"row{index}.npy")
            command = [sys.executable, "-m", "benchmarks.compile_scaling", label, out]
            try:
                done = subprocess.run(command, capture_output=True, text=True,
                                      timeout=compile_scaling.ROW_LIMIT_S)
            except subprocess.TimeoutExpired:
                results[label] = {"over_s": compile_scaling.ROW_LIMIT_S, "ops": num_ops, "devices": devices}
                continue
            if done.returncode != 0:
                raise RuntimeError(f"W14 row {label!r} failed: {done.stderr.strip()[-500:]}")
            results[label] = json.loads(done.stdout.strip().splitlines()[-1])
            outputs.append(np.load(out))
    finished = [r["compile_s"] for r in results.values() if "compile_s" in r]
    geometric = float(np.exp(np.mean(np.log(finished))))
    return dict(samples=[geometric], rows=results, platform=os.environ.get("JAX_PLATFORMS", "")), outputs


def lowered_text(workload) -> tuple[str, list[np.ndarray]]:
    import jax

    fn, args = workload.build()
    text = jax.jit(fn).lower(*args).as_text()
    return text, flat_arrays(args)


def run_interpreter(workload, repeats: int) -> tuple[dict, list]:
    from pjrt_ref.interpreter.program import load

    text, args = lowered_text(workload)
    reset_peak_rss()
    base = rss_mb()
    t0 = time.perf_counter()
    program = load(text)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = program(*args)
    first_s = time.perf_counter() - t0
    samples = time_calls(lambda: program(*args), repeats)
    info = dict(compile_s=compile_s, first_call_s=first_s, samples=samples,
                peak_mb=rss_mb("VmHWM") - base)
    return info, [np.asarray(o) for o in out]


def run_reference(workload, repeats: int, outdir: str, time_limit: float) -> tuple[dict, list]:
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    text, args = lowered_text(workload)
    with make_context(), ir.Location.unknown():
        t0 = time.perf_counter()
        module = ir.Module.parse(text)
        compile_s = time.perf_counter() - t0
        inputs = [ir.DenseElementsAttr.get(np.array(a, order="C")) for a in args]
        open(os.path.join(outdir, "started"), "w").close()
        t0 = time.perf_counter()
        results = stablehlo.eval_module(module, inputs)
        first_s = time.perf_counter() - t0
        out = [np.array(r) for r in results]
        # Only repeat while the budget (a fraction of the limit) allows.
        budget = min(TIME_BUDGET, time_limit / 4)
        samples = [first_s]
        if first_s * 2 < budget:
            samples += time_calls(lambda: stablehlo.eval_module(module, inputs), repeats - 1, budget,
                                  min_seconds=0.0)
    return dict(compile_s=compile_s, first_call_s=first_s, samples=samples), out


def dispatch_program(num_ops: int = 1000) -> str:
    """A chain of `num_ops` scalar ops: add and multiply, alternating."""
    lines = ["func.func @main(%x: tensor<f32>, %y: tensor<f32>) -> tensor<f32> {"]
    previous = "%x"
    for i in range(num_ops):
        op = "add" if i % 2 == 0 else "multiply"
        lines.append(f"  %v{i} = stablehlo.{op} {previous}, %y : tensor<f32>")
        previous = f"%v{i}"
    lines += [f"  return {previous} : tensor<f32>", "}"]
    return "\n".join(lines)


def run_dispatch(repeats: int) -> tuple[dict, list]:
    from pjrt_ref.interpreter.program import load

    t0 = time.perf_counter()
    program = load(dispatch_program())
    compile_s = time.perf_counter() - t0
    args = (np.asarray(np.float32(0.5)), np.asarray(np.float32(1.0)))
    t0 = time.perf_counter()
    out = program(*args)
    first_s = time.perf_counter() - t0
    samples = time_calls(lambda: program(*args), max(repeats, 50))
    return dict(compile_s=compile_s, first_call_s=first_s, samples=samples, num_ops=1000), out


def product_strategies() -> dict:
    """How this process ran each product shape it met (its product engine's
    strategies: interpreter/native/product_probes.py)."""
    known = blas.engine().strategies.known
    return {key: dataclasses.asdict(strategy) for key, strategy in known.items()}


def main(argv: list[str]) -> None:
    mode, name, repeats, outdir = argv[:4]
    time_limit = float(argv[4]) if len(argv) > 4 else 60.0
    repeats = int(repeats)
    workload = WORKLOADS.get(name)
    if name == "W1":
        repeats *= DISPATCH_SAMPLES_FACTOR
    if mode in ("cpu", "plugin") and workload.kind == "compile_scaling":
        info, out = run_compile_scaling(workload)
    elif mode in ("cpu", "plugin") and workload.kind in ("compile_cold", "compile_warm"):
        info, out = run_compile(workload, repeats)
    elif mode in ("cpu", "plugin") and workload.kind == "programs":
        info, out = run_programs(workload)
    elif mode in ("cpu", "plugin") and workload.kind == "loop_ops":
        info, out = run_loop_ops(workload)
    elif mode in ("cpu", "plugin"):
        info, out = run_jax(workload, repeats)
    elif mode == "interpreter":
        info, out = run_interpreter(workload, repeats)
    elif mode == "reference":
        info, out = run_reference(workload, repeats, outdir, time_limit)
    elif mode == "dispatch":
        info, out = run_dispatch(repeats)
    else:
        raise SystemExit(f"unknown mode {mode}")
    info["median_s"] = statistics.median(info["samples"])
    info["calls"] = len(info["samples"])
    del info["samples"]
    info["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if mode in ("plugin", "interpreter"):
        info["products"] = product_strategies()
    np.savez(os.path.join(outdir, "outputs.npz"), *[np.asarray(o) for o in out])
    with open(os.path.join(outdir, "result.json"), "w") as result:
        json.dump(info, result)


if __name__ == "__main__":
    main(sys.argv[1:])
