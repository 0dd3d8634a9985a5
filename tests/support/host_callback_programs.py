"""Host-callback programs for tests/services/test_host_callbacks.py (run as a script, not collected).

Run with JAX_PLATFORMS=pjrt_ref,cpu (JAX places callback arguments on the
cpu backend, whatever device the program runs on). Each scenario runs
once with pjrt_ref's device and once with cpu's as the default device and
records what the host saw: printed text, the arguments callbacks received in
the order they were called, the program's results, or the error it raised.
The last stdout line is the JSON report {scenario: {platform: record}}.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def plain(value):
    """JSON-able form of a pytree of arrays: dtype, shape and the values' bytes (hex)."""
    def leaf(a):
        a = np.asarray(a)
        return [str(a.dtype), list(a.shape), np.ascontiguousarray(a).tobytes().hex()]
    return jax.tree_util.tree_map(leaf, value)


class Log(list):
    def record(self, *items):
        self.append([plain(item) for item in items])


@scenario
def print_in_jit():
    f = jax.jit(lambda x, n: (jax.debug.print("x={x} total={t} n={n}", x=x, t=x.sum(), n=n), x * 2)[1])
    return {"result": plain(f(jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3), jnp.int32(7)))}


@scenario
def print_formats():
    def f(x, flags, y):
        jax.debug.print("positional {} {}", x, flags)
        jax.debug.print("no placeholders, no operands")
        jax.debug.print("{y:.3f} and {x}", x=x[0], y=y)
        with np.printoptions(precision=2):
            jax.debug.print("pi-ish {}", y * jnp.ones(3))
        return x
    jax.jit(f)(jnp.array([1, -2, 3], jnp.int32), jnp.array([True, False]), jnp.float32(3.14159))
    return {}


@scenario
def print_in_scan():
    def step(carry, x):
        jax.debug.print("step carry={c} x={x}", c=carry, x=x)
        jax.debug.print("ordered {}", carry * x, ordered=True)
        return carry + x, carry * x
    out = jax.jit(lambda xs: jax.lax.scan(step, jnp.float32(0), xs))(jnp.arange(1.0, 5.0))
    return {"result": plain(out)}


@scenario
def print_under_vmap():
    def f(x):
        jax.debug.print("row {}", x)
        return x.sum()
    return {"result": plain(jax.jit(jax.vmap(f))(jnp.arange(6).reshape(3, 2)))}


@scenario
def ordered_io_callback():
    log = Log()

    def record(i, x):
        log.record(i, x)
        return np.asarray(x * 10, np.float32)

    def step(carry, i):
        y = io_callback(record, jax.ShapeDtypeStruct((2,), jnp.float32), i, carry, ordered=True)
        return carry + y, y

    f = jax.jit(lambda c: jax.lax.scan(step, c, jnp.arange(3)))
    first = f(jnp.ones(2, jnp.float32))
    second = f(jnp.full(2, 5.0, jnp.float32))
    return {"calls": log, "result": plain([first, second])}


@scenario
def unordered_io_callback():
    log = Log()

    def record(x):
        log.record(x)
        return np.int32(x.size)

    f = jax.jit(lambda x: io_callback(record, jax.ShapeDtypeStruct((), jnp.int32), x) + 1)
    return {"calls": log, "result": plain(f(jnp.arange(5.0)))}


@scenario
def io_callback_without_operands():
    log = Log()

    def tick():
        log.record(np.int32(len(log)))
        return np.float32(7.5)

    f = jax.jit(lambda x: x + io_callback(tick, jax.ShapeDtypeStruct((), jnp.float32), ordered=True))
    return {"calls": log, "result": plain([f(jnp.float32(1)), f(jnp.float32(2))])}


def _pure_sin_under_vmap(vmap_method):
    log = Log()

    def host_sin(x):
        log.record(np.asarray(x.shape, np.int32))
        return np.sin(x).astype(x.dtype)

    def f(x):
        return jax.pure_callback(host_sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
                                 vmap_method=vmap_method)

    result = jax.jit(jax.vmap(f))(jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4))
    return {"calls": log, "result": plain(result)}


@scenario
def pure_callback_vmap_sequential():
    return _pure_sin_under_vmap("sequential")


@scenario
def pure_callback_vmap_broadcast_all():
    return _pure_sin_under_vmap("broadcast_all")


@scenario
def pure_callback_vmap_expand_dims():
    return _pure_sin_under_vmap("expand_dims")


@scenario
def pure_callback_pytree_results():
    def host(tree):
        x, scale = tree["x"], tree["scale"]
        return {"doubled": x * 2, "stats": (x.sum(dtype=np.float32), np.int32(x.size)),
                "scaled": (x * scale).astype(np.float32), "empty": np.zeros((0, 3), np.int32)}

    def f(x, scale):
        shapes = {"doubled": jax.ShapeDtypeStruct(x.shape, x.dtype),
                  "stats": (jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((), jnp.int32)),
                  "scaled": jax.ShapeDtypeStruct(x.shape, jnp.float32),
                  "empty": jax.ShapeDtypeStruct((0, 3), jnp.int32)}
        return jax.pure_callback(host, shapes, {"x": x, "scale": scale})

    return {"result": plain(jax.jit(f)(jnp.arange(4.0, dtype=jnp.float32), jnp.float32(0.5)))}


@scenario
def debug_callback():
    log = Log()
    f = jax.jit(lambda x: (jax.debug.callback(lambda a, b: log.record(a, b), x, x.max()), x - 1)[1])
    result = f(jnp.arange(4, dtype=jnp.int32))
    jax.effects_barrier()
    return {"calls": log, "result": plain(result)}


@scenario
def callback_dtypes():
    """Every element type JAX can pass crosses the send/recv boundary unchanged."""
    values = (jnp.array([1.5, -2.25], jnp.bfloat16), jnp.array([0.5, 65504], jnp.float16),
              jnp.array([True, False, True]), jnp.array([-128, 127], jnp.int8),
              jnp.array([0, 2**32 - 1], jnp.uint32), jnp.array([1 + 2j, -3j], jnp.complex64),
              jnp.array([[1, 2], [3, 4]], jnp.int16)[:, ::-1])

    def host(*arrays):
        return tuple(np.asarray(a)[::-1].copy() for a in arrays)

    shapes = tuple(jax.ShapeDtypeStruct(v.shape, v.dtype) for v in values)
    return {"result": plain(jax.jit(lambda *v: jax.pure_callback(host, shapes, *v))(*values))}


@scenario
def buffer_callbacks():
    """jax.experimental.buffer_callback: what the callback sees of its
    context and buffers, results written in place (an aliased one shares
    the operand's memory), under vmap, and a side effect with no operands."""
    from jax.experimental import buffer_callback

    seen = []

    def host(ctx, out, x, y):
        try:
            ctx.stream
            stream = "available"
        except jax.errors.JaxRuntimeError as error:
            stream = str(error)
        seen.append({"stage": str(ctx.stage), "stream": stream,
                     "writeable": [x.writeable, y.writeable, out.writeable],
                     "types": [str(b.dtype) + str(list(b.shape)) for b in (x, y, out)],
                     "dlpack": plain(np.from_dlpack(x))})
        np.asarray(out)[...] = np.asarray(x) * 2 + np.asarray(y)

    def shares(ctx, out, x):
        seen.append({"shared": np.asarray(out).ctypes.data == np.asarray(x).ctypes.data})
        np.asarray(out)[...] += 1

    called = []
    x, y = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3), jnp.full((2, 3), 0.5, jnp.float32)
    combined = buffer_callback.buffer_callback(host, jax.ShapeDtypeStruct((2, 3), jnp.float32))
    batched = buffer_callback.buffer_callback(host, jax.ShapeDtypeStruct((3,), jnp.float32),
                                              vmap_method="sequential")
    aliased = buffer_callback.buffer_callback(shares, jax.ShapeDtypeStruct((2, 3), jnp.float32),
                                              input_output_aliases={0: 0})
    effect = buffer_callback.buffer_callback(lambda *_: called.append(True),
                                             jax.ShapeDtypeStruct((), jnp.float32), has_side_effect=True)
    results = [jax.jit(combined)(x, y), jax.jit(jax.vmap(batched))(x, y), jax.jit(aliased)(x)]
    jax.block_until_ready(jax.jit(effect)())
    return {"result": plain(results), "calls": seen, "side_effect": called}


@scenario
def print_under_grad():
    def loss(w):
        jax.debug.print("w={}", w)
        return jnp.sum(jnp.sin(w) ** 2)
    return {"result": plain(jax.jit(jax.grad(loss))(jnp.arange(3.0)))}


@scenario
def io_callback_in_cond_and_while():
    log = Log()

    def note(i):
        log.record(i)
        return i * 2

    def body(carry):
        i, acc = carry
        extra = jax.lax.cond(i % 2 == 0,
                             lambda: io_callback(note, jax.ShapeDtypeStruct((), jnp.int32), i, ordered=True),
                             lambda: jnp.int32(0))
        return i + 1, acc + extra

    out = jax.jit(lambda n: jax.lax.while_loop(lambda c: c[0] < n, body, (jnp.int32(0), jnp.int32(0))))(5)
    return {"calls": log, "result": plain(out)}


def _error_of(fn) -> dict:
    try:
        jax.block_until_ready(fn())
    except Exception as error:   # noqa: BLE001 - the error is what we record
        return {"raised": type(error).__name__, "message": str(error)}
    return {"raised": None}


@scenario
def callback_raises():
    def explode(x):
        raise ValueError("boom from the callback")

    f = jax.jit(lambda x: jax.pure_callback(explode, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1)
    error = _error_of(lambda: f(jnp.arange(3.0)))
    after = jax.jit(lambda x: x * 3)(jnp.arange(3.0))      # the host and the device still work
    return {"error": error, "after": plain(after)}


@scenario
def callback_wrong_shape():
    f = jax.jit(lambda x: jax.pure_callback(lambda a: np.zeros(4, np.float32),
                                            jax.ShapeDtypeStruct((3,), jnp.float32), x))
    return {"error": _error_of(lambda: f(jnp.arange(3.0, dtype=jnp.float32)))}


LOOP_STEPS = 20


@scenario
def output_during_step():
    """A callback with no result runs when the step reaches it, not when the
    step ends: the loop after it counts its iterations with callbacks of
    its own, and the first callback sees none of them counted yet."""
    ticks = [0]
    seen = {}

    def tick(v):
        ticks[0] += 1
        return v

    def f(x):
        jax.debug.callback(lambda v: seen.setdefault("before", ticks[0]), x, ordered=True)
        x = jax.lax.fori_loop(0, LOOP_STEPS, lambda i, v: io_callback(
            tick, jax.ShapeDtypeStruct(v.shape, v.dtype), jnp.sin(v) + v * 0.5, ordered=True), x)
        jax.debug.callback(lambda v: seen.setdefault("after", ticks[0]), x, ordered=True)
        return x

    g = jax.jit(f)
    jax.block_until_ready(g(jnp.ones(64, jnp.float32)))       # compile first
    ticks[0] = 0
    seen.clear()
    jax.block_until_ready(g(jnp.ones(64, jnp.float32)))
    jax.effects_barrier()
    return {"ticks_seen": seen}


def run(platforms: list[str], names: list[str]) -> dict:
    report = {}
    for name in names:
        report[name] = {}
        for platform in platforms:
            stdout = io.StringIO()
            with jax.default_device(jax.devices(platform)[0]), contextlib.redirect_stdout(stdout):
                record = SCENARIOS[name]()
                jax.effects_barrier()
            record["printed"] = stdout.getvalue()
            report[name][platform] = record
    return report


if __name__ == "__main__":
    names = sys.argv[1:] or list(SCENARIOS)
    print(json.dumps(run(["pjrt_ref", "cpu"], names)))
