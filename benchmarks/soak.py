"""Load and soak test of the plugin under JAX (issue 7, item 3).

    JAX_PLATFORMS=pjrt_ref,cpu python -m benchmarks.soak            # full: 8x1000 load, 100,000 soak
    python -m benchmarks.soak --threads 8 --per-thread 100 --soak 5000 --warmup 1000   # small

(The platform variable is set here if absent.)

(0) compile: the same N threads first each compile and run --compiles fresh
    programs at once (checked against numpy): concurrent compilation.
(a) load: N threads each run M executes of a mix of jitted programs
    (elementwise, matmul, while loop, reduction, scatter) on the pjrt_ref
    device; every result is compared with the same program's result on JAX's
    cpu backend, computed once up front. Threads are joined with a timeout: a
    thread still alive afterwards is reported as a deadlock.
(b) soak: S executes of a small jitted function with device_put and np.asarray
    round trips mixed in. VmRSS (/proc/self/status) is read after W warm-up
    executes and at the end; growth must be below --max-growth (5%). The
    plugin's live-handle count (`pjrt_ref.capi.handles.count()`) must return to its
    pre-soak baseline once the arrays are deleted and garbage-collected.
(c) mixed soak: --mixed-soak executes of the load mix on one thread, with the
    same RSS and handle checks (catches leaks in while/scatter/reduce paths).

Prints a short report; exits 1 if a criterion fails.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
from collections import Counter

import numpy as np
from pjrt_ref.capi import handles

os.environ.setdefault("JAX_PLATFORMS", "pjrt_ref,cpu")
# Loops' numba kernels built at their first run, within the warm-up: a
# kernel built later (once its loop is hot, interpreter/optimiser/loops.py) is a
# one-time growth, not the leak the soak looks for.
os.environ.setdefault("PJRT_REF_JIT_HOT_SECONDS", "0")


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def programs():
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 16)).astype(np.float32)
    v = rng.standard_normal(64).astype(np.float32)
    idx = np.array([3, 1, 3, 7, 0], np.int32)
    upd = rng.standard_normal(5).astype(np.float32)

    def while_loop(x):
        return jax.lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.5 + 1.0),
                                  (jnp.int32(0), x))[1]

    return {
        "elementwise": (jax.jit(lambda x, y: jnp.tanh(x) * y + jnp.exp(-x * x)), (a, b)),
        "matmul": (jax.jit(lambda x, y: x @ y + 1.0), (a, b)),
        "while": (jax.jit(while_loop), (v,)),
        "reduction": (jax.jit(lambda x: (jnp.sum(x, axis=0), jnp.max(x))), (a,)),
        "scatter": (jax.jit(lambda x, i, u: x.at[i].add(u)), (v, idx, upd)),
    }


def concurrent_compile(threads: int, per_thread: int, timeout: float) -> dict:
    """Each thread compiles and runs `per_thread` fresh programs at once (run first,
    so the plugin's lazy first-compile set-up is raced too); checked against numpy."""
    import jax
    import jax.numpy as jnp

    ours = jax.devices("pjrt_ref")[0]
    host = np.arange(64, dtype=np.float32)
    x = jax.device_put(host, ours)
    errors: list[str] = []
    done = [0] * threads

    def worker(t: int) -> None:
        try:
            for i in range(per_thread):
                k = float(t * 1000 + i)
                f = jax.jit(lambda v, k=k: v * k + jnp.sin(v))     # a new constant: a new compile
                got = np.asarray(f(x))
                if not np.allclose(got, host * k + np.sin(host), rtol=1e-5):
                    errors.append(f"thread {t} program {i}: wrong result")
                    return
                done[t] += 1
        except Exception as exc:                  # noqa: BLE001 - reported, not hidden
            errors.append(f"thread {t}: {type(exc).__name__}: {str(exc)[:300]}")

    elapsed, hung = _run_threads(worker, threads, timeout)
    return {"compiles": sum(done), "seconds": elapsed, "errors": errors, "hung": hung}


def _run_threads(worker, threads: int, timeout: float) -> tuple[float, list[int]]:
    """Run `worker(t)` for t in range(threads) at once; (seconds, threads still running at `timeout`)."""
    start = time.monotonic()
    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(max(0.0, start + timeout - time.monotonic()))
    return time.monotonic() - start, [i for i, th in enumerate(pool) if th.is_alive()]


def load(threads: int, per_thread: int, timeout: float) -> dict:
    import jax

    ours, cpu = jax.devices("pjrt_ref")[0], jax.devices("cpu")[0]
    progs = programs()
    names = sorted(progs)
    expected = {}
    for name, (fn, args) in progs.items():
        out = fn(*[jax.device_put(x, cpu) for x in args])
        expected[name] = [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]
    placed = {name: [jax.device_put(x, ours) for x in args] for name, (_, args) in progs.items()}
    for name, (fn, _) in progs.items():          # compile once, outside the threads
        jax.block_until_ready(fn(*placed[name]))
    gc.collect()
    handles_before = handles.count()

    errors: list[str] = []
    done = [0] * threads

    def worker(t: int) -> None:
        try:
            for i in range(per_thread):
                name = names[(t + i) % len(names)]
                fn, _ = progs[name]
                got = [np.asarray(o) for o in jax.tree_util.tree_leaves(fn(*placed[name]))]
                for g, e in zip(got, expected[name], strict=True):
                    if g.shape != e.shape or not np.allclose(g, e, rtol=1e-5, atol=1e-5):
                        errors.append(f"thread {t} execute {i} ({name}): wrong result")
                        return
                done[t] += 1
        except Exception as exc:                  # noqa: BLE001 - reported, not hidden
            errors.append(f"thread {t}: {type(exc).__name__}: {exc}")

    elapsed, hung = _run_threads(worker, threads, timeout)
    gc.collect()
    handles_after = None if hung else handles.count()
    return {"handles_before": handles_before, "handles_after": handles_after,
            "threads": threads, "per_thread": per_thread, "executes": sum(done),
            "seconds": elapsed, "errors": errors, "hung": hung}


def kinds():
    """Live plugin handles by object type."""
    return Counter(type(o).__name__ for o in handles.live_objects())


def soak(total: int, warmup: int) -> dict:
    import jax
    import jax.numpy as jnp

    ours = jax.devices("pjrt_ref")[0]
    f = jax.jit(lambda x, y: x * 2.0 + y)
    base_x = np.arange(32, dtype=np.float32)

    def step(i, x, y, acc):
        if i % 10 == 0:                        # device_put round trip
            x = jax.device_put(base_x + (i % 7), ours)
        acc = f(x, y)
        if i % 10 == 5:                        # host round trip, checked
            got = np.asarray(acc)
            want = (base_x + ((i // 10 * 10) % 7)) * 2.0 + 1.0
            if not np.array_equal(got, want):
                raise AssertionError(f"soak execute {i}: wrong result")
        return x, acc

    # One round of every operation first, so the executables JAX compiles and
    # caches (f, and the broadcast behind jnp.ones) are part of the baseline.
    y = jnp.ones(32, jnp.float32, device=ours)
    x = acc = None
    for i in range(10):
        x, acc = step(i, x, y, acc)
    jax.block_until_ready(acc)
    del x, y, acc
    gc.collect()
    baseline_handles = handles.count()
    baseline_kinds = kinds()

    y = jnp.ones(32, jnp.float32, device=ours)
    x = acc = None
    rss_warm = None
    start = time.monotonic()
    for i in range(total):
        x, acc = step(i, x, y, acc)
        if i + 1 == warmup:
            gc.collect()
            rss_warm = rss_kib()
            t_warm = time.monotonic()
    jax.block_until_ready(acc)
    gc.collect()
    rss_end = rss_kib()
    elapsed = time.monotonic() - start
    during = handles.count()
    del x, y, acc
    gc.collect()
    after_cache = handles.count()
    leaked = {k: n for k, n in (kinds() - baseline_kinds).items()}
    if rss_warm is None:
        rss_warm, t_warm = rss_end, time.monotonic()
    return {"executes": total, "warmup": warmup, "seconds": elapsed,
            "steady_seconds": time.monotonic() - t_warm,
            "rss_warm_kib": rss_warm, "rss_end_kib": rss_end,
            "growth": (rss_end - rss_warm) / rss_warm,
            "handles_baseline": baseline_handles, "handles_live_end": during,
            "handles_after": after_cache, "leaked_kinds": leaked}


def wait_for_background_kernels() -> None:
    """The kernels the warm-up queued, built (interpreter/optimiser/background.py)."""
    if "pjrt_ref.interpreter.optimiser.background" in sys.modules:
        sys.modules["pjrt_ref.interpreter.optimiser.background"].wait(timeout=300)


def mixed_soak(total: int, warmup: int) -> dict:
    """The load mix (while, scatter, ...) run `total` times on one thread: RSS and handles."""
    import jax

    ours = jax.devices("pjrt_ref")[0]
    progs = programs()
    names = sorted(progs)
    placed = {name: [jax.device_put(x, ours) for x in args] for name, (_, args) in progs.items()}

    def run(n):
        out = None
        for i in range(n):
            name = names[i % len(names)]
            out = progs[name][0](*placed[name])
            if i % 7 == 0:
                jax.tree_util.tree_map(np.asarray, out)
        jax.block_until_ready(out)

    run(warmup)
    wait_for_background_kernels()
    gc.collect()
    h0, r0 = handles.count(), rss_kib()
    start = time.monotonic()
    run(total)
    elapsed = time.monotonic() - start
    gc.collect()
    h1, r1 = handles.count(), rss_kib()
    return {"executes": total, "seconds": elapsed, "rss_warm_kib": r0, "rss_end_kib": r1,
            "growth": (r1 - r0) / r0, "handles_baseline": h0, "handles_after": h1}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--per-thread", type=int, default=1000)
    p.add_argument("--compiles", type=int, default=30,
                   help="fresh programs each thread compiles concurrently, first (0: skip)")
    p.add_argument("--soak", type=int, default=100_000)
    p.add_argument("--warmup", type=int, default=5_000)
    p.add_argument("--mixed-soak", type=int, default=50_000,
                   help="executes of the load mix on one thread, after --warmup (0: skip)")
    p.add_argument("--max-growth", type=float, default=0.05)
    p.add_argument("--timeout", type=float, default=600.0, help="join timeout for the load threads (s)")
    args = p.parse_args(argv)

    failures = []
    if args.compiles:
        c = concurrent_compile(args.threads, args.compiles, args.timeout)
        print(f"compile: {args.threads} threads x {args.compiles} fresh programs: {c['compiles']} "
              f"compiled, run and correct in {c['seconds']:.1f}s")
        if c["hung"]:
            failures.append(f"compile: threads {c['hung']} still running after {args.timeout}s (deadlock?)")
        if c["errors"]:
            failures.append(f"compile: {len(c['errors'])} errors, first: {c['errors'][0]}")

    r = load(args.threads, args.per_thread, args.timeout)
    print(f"load: {r['threads']} threads x {r['per_thread']} executes: {r['executes']} correct "
          f"in {r['seconds']:.1f}s ({r['executes'] / max(r['seconds'], 1e-9):.0f}/s)")
    if r["hung"]:
        failures.append(f"load: threads {r['hung']} still running after {args.timeout}s (deadlock?)")
    print(f"load: live handles before the threads {r['handles_before']}, after them + gc {r['handles_after']}")
    if not r["hung"] and r["handles_after"] != r["handles_before"]:
        failures.append(f"load: {r['handles_after'] - r['handles_before']} handles not released")
    if r["errors"]:
        failures.append(f"load: {len(r['errors'])} errors, first: {r['errors'][0]}")
    if r["executes"] != r["threads"] * r["per_thread"]:
        failures.append(f"load: only {r['executes']} of {r['threads'] * r['per_thread']} executes finished")

    s = soak(args.soak, args.warmup)
    print(f"soak: {s['executes']} executes in {s['seconds']:.1f}s; VmRSS after {s['warmup']} warm-up "
          f"{s['rss_warm_kib']} KiB, at end {s['rss_end_kib']} KiB "
          f"(growth {s['growth'] * 100:+.2f}%, limit {args.max_growth * 100:.0f}%)")
    print(f"soak: live handles: baseline {s['handles_baseline']}, at end (arrays alive) "
          f"{s['handles_live_end']}, after del + gc {s['handles_after']}")
    if s["growth"] >= args.max_growth:
        failures.append(f"soak: VmRSS grew {s['growth'] * 100:.2f}% after warm-up")
    if s["handles_after"] != s["handles_baseline"]:
        failures.append(f"soak: {s['handles_after'] - s['handles_baseline']} handles not released "
                        f"(new live handles by kind: {s['leaked_kinds']})")

    if args.mixed_soak:
        m = mixed_soak(args.mixed_soak, args.warmup)
        print(f"mixed soak: {m['executes']} executes of the load mix in {m['seconds']:.1f}s; VmRSS "
              f"{m['rss_warm_kib']} -> {m['rss_end_kib']} KiB (growth {m['growth'] * 100:+.2f}%); "
              f"live handles {m['handles_baseline']} -> {m['handles_after']}")
        if m["growth"] >= args.max_growth:
            failures.append(f"mixed soak: VmRSS grew {m['growth'] * 100:.2f}% after warm-up")
        if m["handles_after"] != m["handles_baseline"]:
            failures.append(f"mixed soak: {m['handles_after'] - m['handles_baseline']} handles not released")

    for f in failures:
        print("FAIL", f)
    print("PASS" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
