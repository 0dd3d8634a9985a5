"""JAX's entry point for pjrt-ref (`[project.entry-points.jax_plugins]`).

JAX calls `initialize()` while discovering plugins. We register the shim
library under the platform name "pjrt_ref" with a priority below the CPU
backend's (0), so a plain `import jax` keeps "cpu" as the default backend;
`JAX_PLATFORMS=pjrt_ref` or `jax.devices("pjrt_ref")` select ours.

Registration only loads the shim (which imports the small `pjrt_ref.capi`
package); the interpreter, jaxlib's MLIR bindings and numba are imported
when the first program is compiled.

It also makes JAX's host callbacks (`jax.debug.print`, `jax.debug.callback`,
`jax.pure_callback`, `jax.experimental.io_callback`) lower for "pjrt_ref",
as `stablehlo.send`/`recv` host transfers served by the send/recv callbacks
of `PJRT_ExecuteOptions`: see `_lower_callbacks_with_send_recv` and
`pjrt_ref/services/host_callbacks.py`; and `jax.experimental.buffer_callback`
the same way (`buffer_callback.py`).

And it makes JAX's linear algebra (eigh, svd, qr, eig, ...) lower for
"pjrt_ref" the way it does for "cpu", to LAPACK custom calls the interpreter
serves with scipy: see `linalg.py`; and every other primitive JAX lowers
only for the platforms it knows (checkify's `check`, ...) lower as on cpu:
see `cpu_only_rules.py`. JAX's persistent compilation cache serves
"pjrt_ref" too: see `compilation_cache.py`. And XLA FFI handlers registered
with `jax.ffi.register_ffi_target(..., platform="pjrt_ref")` reach the
plugin: see `ffi.py`. On jaxlib 0.10, whose topology compile keeps the GIL
while a worker thread compiles, JAX compiles pjrt_ref's topology programs
through its compile-only client: see `topology_compiles.py`.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import sys
import warnings
from typing import Any, Callable, Sequence

from pjrt_ref import library_path
import numpy as np

from pjrt_ref.frameworks.jax.buffer_callback import register as register_buffer_callback
from pjrt_ref.frameworks.jax.compilation_cache import open_compilation_cache
from pjrt_ref.frameworks.jax.ffi import install as install_ffi_handler
from pjrt_ref.frameworks.jax.cpu_only_rules import borrow_cpu_branches, borrow_cpu_exports, borrow_cpu_only_rules
from pjrt_ref.frameworks.jax.linalg import register_linalg_lowerings
from pjrt_ref.frameworks.jax.topology_compiles import route_topology_compiles

PLATFORM = "pjrt_ref"
PRIORITY = -100


def _allow_donation() -> None:
    """JAX only emits buffer-donation aliases for platforms it lists; add ours.

    pjrt-ref honours `tf.aliasing_output` / `jax.buffer_donor` by deleting
    donated arguments, which is what `donate_argnums` promises.
    """
    from jax._src.interpreters import mlir

    if PLATFORM not in mlir._platforms_with_donation:
        mlir._platforms_with_donation.append(PLATFORM)


def _named_in_environment() -> bool:
    """Whether PJRT_NAMES_AND_LIBRARY_PATHS already registers "pjrt_ref" (JAX reads it after us)."""
    entries = os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS", "")
    separator = ";" if os.name == "nt" else ":"
    return any(entry.split(separator, 1)[0].strip() == PLATFORM for entry in entries.split(",") if entry)


def initialize() -> None:
    from jax._src import xla_bridge

    if not _named_in_environment():     # an explicit PJRT_NAMES_AND_LIBRARY_PATHS entry wins
        xla_bridge.register_plugin(PLATFORM, priority=PRIORITY, library_path=library_path(),
                                   options=client_options)
    try:
        _keep_clients_to_the_end(xla_bridge)
    except (KeyError, TypeError, AttributeError):  # pragma: no cover - a future JAX moved it
        pass
    try:
        _allow_donation()
    except (ImportError, AttributeError):  # pragma: no cover - a future JAX moved it
        pass
    try:
        open_compilation_cache(PLATFORM)
    except (ImportError, AttributeError):  # pragma: no cover - a future JAX moved it
        pass
    try:
        route_topology_compiles(PLATFORM)
    except (ImportError, AttributeError):  # pragma: no cover - a future JAX moved it
        pass
    try:
        install_ffi_handler()    # jax.ffi.register_ffi_target(..., platform="pjrt_ref")
    except (ImportError, AttributeError):  # pragma: no cover - a future jaxlib moved it
        pass
    if xla_bridge.is_known_platform(PLATFORM):
        _install_lowerings()
    else:   # registered from PJRT_NAMES_AND_LIBRARY_PATHS, after us: lowering rules must wait
        xla_bridge.register_plugin_callbacks(lambda **_: _install_lowerings())


def client_options() -> dict:
    """PJRT_Client_Create's options, asked for when JAX creates the client.

    pjrt_ref counts its devices the way JAX's cpu backend does: the
    framework's flag `jax_num_cpu_devices` (what `jtu.request_cpu_devices(n)`
    sets in JAX's test files before any backend starts) wins, passed as the
    `num_devices` option; unset (-1), the environment decides, where
    PJRT_REF_NUM_DEVICES plays the part of XLA's
    `--xla_force_host_platform_device_count`. So a program that asks JAX
    for n cpu devices gets n on pjrt_ref too."""
    from jax._src import xla_bridge

    requested = getattr(xla_bridge, "num_cpu_devices", None)
    count = requested.value if requested is not None else -1
    return {"num_devices": int(count)} if count is not None and count >= 1 else {}


def _keep_clients_to_the_end(xla_bridge) -> None:
    """Every client JAX makes on pjrt_ref lives until the process ends.

    `np.asarray` of a pjrt_ref array is a view of our buffer (a PJRT external
    reference, see PJRT_Buffer_IsOnCpu). jaxlib's reference points into its
    client without keeping it alive, and at interpreter exit jaxlib may destroy
    the client before the last views are collected: the view's destructor then
    reads the freed client (SIGSEGV in ~PjRtCApiExternalReference, seen once
    in a test's child process). One reference that is never dropped keeps the
    client to the end; the operating system reclaims it.
    """
    registration = xla_bridge._backend_factories[PLATFORM]
    make = registration.factory

    def factory(*args, **kwargs):
        client = make(*args, **kwargs)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(client))
        return client

    xla_bridge._backend_factories[PLATFORM] = dataclasses.replace(registration, factory=factory)


def _install_lowerings() -> None:
    """Lowering rules for "pjrt_ref" (the platform must be known to JAX by now)."""
    try:
        _lower_callbacks_with_send_recv()
        register_buffer_callback(PLATFORM, _emit_send_recv_callback)
    except (ImportError, AttributeError, NotImplementedError):  # pragma: no cover - a future JAX
        pass
    _borrow_linalg_lowerings()
    borrow_cpu_only_rules(PLATFORM)     # after ours: a rule of our own is never replaced
    for borrow in (borrow_cpu_branches, borrow_cpu_exports):
        try:
            borrow(PLATFORM)
        except (ImportError, AttributeError):  # pragma: no cover - a future JAX moved it
            pass


def _borrow_linalg_lowerings() -> None:
    """JAX's CPU lowering rules for its linear-algebra primitives (`linalg.py`).
    What this JAX lacks is warned about here, and fails clearly when used."""
    try:
        missing = register_linalg_lowerings(PLATFORM)
    except (ImportError, AttributeError) as error:  # pragma: no cover - a future JAX
        missing = [f"any primitive ({error})"]
    if missing:
        warnings.warn(f"pjrt-ref: this JAX has no CPU lowering rule for {', '.join(missing)} to "
                      "borrow; those linear-algebra functions fail on pjrt_ref", RuntimeWarning,
                      stacklevel=2)


# --------------------------------------------------------------- host callbacks
def _lower_callbacks_with_send_recv() -> None:
    """Let JAX lower its Python callbacks for "pjrt_ref".

    JAX's lowering rules for pure_callback, io_callback, debug_callback and
    debug_print (jax/_src/callback.py, debugging.py) all end in
    `callback.emit_python_callback`, which knows cpu and gpu (an FFI custom
    call whose Python callables only jaxlib's own clients receive) and tpu
    (send/recv host transfers, served through `PJRT_ExecuteOptions`: the
    route a PJRT C-API plugin can take). Any other platform is refused.

    So we wrap that one function, once, under every name JAX gives it
    (`_replace_in_jax`): for "pjrt_ref" it emits the TPU
    form with JAX's own `_emit_tpu_python_callback`; for every other
    platform it calls JAX's function unchanged. Everything above it (tokens
    for ordered effects, batching, the callables' lifetime, which jaxlib
    ties to the executions) stays JAX's. debug_callback and debug_print have
    rules only for cpu/gpu/tpu, so we register the same JAX rules for ours,
    uncacheable as on TPU (each lowering takes fresh channel ids).
    """
    from jax._src import callback, debugging
    from jax._src.interpreters import mlir

    if not hasattr(callback.emit_python_callback, "pjrt_ref_wraps"):
        _replace_in_jax(callback.emit_python_callback,
                        _emit_for_pjrt_ref_else(callback.emit_python_callback))
    for primitive, rule in ((debugging.debug_callback_p, debugging.debug_callback_lowering),
                            (debugging.debug_print_p, debugging.debug_print_lowering_rule)):
        mlir.register_lowering(primitive, rule, platform=PLATFORM, cacheable=False)


def _replace_in_jax(original: Callable, replacement: Callable) -> None:
    """Bind `replacement` wherever a loaded JAX module holds `original` under its
    name: JAX re-exports emit_python_callback (`jax.interpreters.mlir`, used by
    jax.experimental.sparse), and modules imported later take the name from
    one of these."""
    name = original.__name__
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("jax") and getattr(module, "__dict__", {}).get(name) is original:
            setattr(module, name, replacement)


def _emit_for_pjrt_ref_else(jax_emit: Callable) -> Callable:
    """`emit_python_callback` that handles platform "pjrt_ref" and passes the rest on."""

    def emit_python_callback(ctx, callback, token, operands, operand_avals, result_avals, **options):
        if tuple(ctx.module_context.platforms) != (PLATFORM,):
            return jax_emit(ctx, callback, token, operands, operand_avals, result_avals, **options)
        return _emit_send_recv_callback(ctx, callback, token, operands, operand_avals, result_avals,
                                        returns_token=options.get("returns_token", True),
                                        sharding=options.get("sharding"))

    emit_python_callback.pjrt_ref_wraps = jax_emit
    emit_python_callback.__doc__ = jax_emit.__doc__
    return emit_python_callback


def _emit_send_recv_callback(ctx, callback: Callable, token, operands: Sequence, operand_avals: Sequence,
                             result_avals: Sequence, *, returns_token: bool, sharding: Any):
    """One send per operand, then one recv per result, on fresh host channels.

    Returns (results, token, None) like `emit_python_callback`. jaxlib runs
    `callback` when the last operand has arrived and answers the recvs with
    its results, which `_checked_results` has checked against `result_avals`.
    """
    from jax._src import callback as jax_callback

    operand_shapes = [jax_callback._aval_to_xla_shape(aval) for aval in operand_avals]
    result_shapes = [jax_callback._aval_to_xla_shape(aval) for aval in result_avals]
    results, token = jax_callback._emit_tpu_python_callback(
        ctx.module_context.get_backend(), ctx, _checked_results(callback, result_avals, _where(ctx)),
        token, list(operands), operand_avals, operand_shapes, result_avals, result_shapes,
        returns_token=returns_token, sharding=_send_recv_sharding(sharding))
    return results, token, None


def _send_recv_sharding(sharding: Any) -> Any:
    """The sharding JAX's TPU form may put on the sends and recvs.

    In a shard_map body (every mesh axis manual) JAX gives one Shardy sharding
    per callback result, naming no devices, and its TPU form puts the first on
    every send and recv, whatever their rank (a result of rank 1 and the
    scalar recv it waits on alike): MLIR's verifier rejects the module ("recv
    op result 0 - sharding doesn't match tensor rank"). In a manual body every
    op runs on each device, so they need none. Elsewhere (one device runs the
    callback: a maximal sharding) JAX's stays."""
    shardings = getattr(sharding, "shardings", None)
    if shardings and not any(s.logical_device_ids for s in shardings):
        return None
    return sharding


def _where(ctx) -> str:
    """"pure_callback at file.py:12": the primitive and the user's line that called it."""
    from jax._src import source_info_util

    name = ctx.primitive.name if ctx.primitive is not None else "host callback"
    frame = source_info_util.user_frame(ctx.traceback)
    return f"{name} at {frame.file_name}:{frame.start_line}" if frame is not None else name


def _checked_results(callback: Callable, result_avals: Sequence, where: str) -> Callable:
    """`callback` whose results must match `result_avals` in number, shape and dtype.

    A mismatch raises in the host callback; jaxlib turns that into the send
    callback's error, so the execution fails with this message. The words
    after `where` are JAX's own for cpu and gpu (`_wrapped_callback` in
    jax/_src/callback.py), which users and JAX's tests look for.
    """
    from jax._src import dtypes

    def call(*args):
        results = callback(*args)
        if len(results) != len(result_avals):
            raise RuntimeError(f"{where}: Mismatched number of outputs from callback. "
                               f"Expected: {len(result_avals)}, Actual: {len(results)}")
        checked = tuple(dtypes.canonicalize_value(np.asarray(value)) for value in results)
        for index, (array, aval) in enumerate(zip(checked, result_avals)):
            if array.shape != aval.shape:
                raise RuntimeError(f"{where}: Incorrect output shape for return value #{index}: "
                                   f"Expected: {aval.shape}, Actual: {array.shape}")
            if array.dtype != aval.dtype:
                raise RuntimeError(f"{where}: Incorrect output dtype for return value #{index}: "
                                   f"Expected: {aval.dtype}, Actual: {array.dtype}")
        return checked

    return call
