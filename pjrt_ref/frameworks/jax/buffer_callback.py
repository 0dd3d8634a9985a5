"""`jax.experimental.buffer_callback` on "pjrt_ref".

JAX lowers a buffer callback to an FFI custom call that only its own cpu
and gpu runtimes serve (`xla_buffer_python_cpu_callback`), and refuses any
other platform ("`buffer_callback` not supported on pjrt_ref backend"). The
callback itself needs nothing a host callback lacks: it reads its operands
and writes its results in place. So on "pjrt_ref" it becomes a host
callback through send/recv, as `pure_callback` does (plugin.py
`_emit_send_recv_callback`): the operands arrive as host arrays, the user's
function gets them as read-only buffers and fresh writable result buffers
(a result aliased to an operand, `input_output_aliases`, starts as that
operand's values and shares its memory, as on cpu), and what it wrote goes
back as the results.

The buffers and the execution context stand in for jaxlib's `ffi.Buffer`
and `ffi.ExecutionContext` on cpu: shape, dtype and `writeable`, numpy's
array protocol and DLPack over host memory; the stage is EXECUTE, and a GPU
stream is not available.
"""
from __future__ import annotations

from typing import Any

import numpy as np


class HostBuffer:
    """One operand or result of a buffer callback, in host memory."""

    def __init__(self, array: np.ndarray, writeable: bool):
        view = array.view()
        view.flags.writeable = writeable
        self._array = view

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape

    @property
    def dtype(self) -> np.dtype:
        return self._array.dtype

    @property
    def writeable(self) -> bool:
        return bool(self._array.flags.writeable)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """The buffer's memory itself unless a copy is asked for or needed
        (numpy's `copy` protocol)."""
        return np.array(self._array, dtype=dtype, copy=copy)

    def __dlpack__(self, **options):
        return self._array.__dlpack__(**options)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class HostExecutionContext:
    """The execution context a buffer callback gets on a host backend."""

    @property
    def stage(self):
        from jax.experimental.buffer_callback import ExecutionStage

        return ExecutionStage.EXECUTE

    @property
    def stream(self):
        import jax

        raise jax.errors.JaxRuntimeError("UNIMPLEMENTED: XLA FFI GPU context is not available")


def register(platform: str, emit_host_callback) -> None:
    """Lower `buffer_callback_p` for `platform` through `emit_host_callback`
    (plugin.py `_emit_send_recv_callback`)."""
    from jax._src import buffer_callback
    from jax._src.interpreters import mlir

    def lowering(ctx, *operands, callback, in_tree, out_tree, has_side_effect: bool,
                 input_output_aliases, **_: Any):
        del has_side_effect   # a host transfer is never removed as dead code
        run = _host_function(callback, in_tree, out_tree, dict(input_output_aliases), ctx.avals_out)
        results, _, _ = emit_host_callback(ctx, run, None, list(operands), ctx.avals_in, ctx.avals_out,
                                           returns_token=False, sharding=None)
        return results

    mlir.register_lowering(buffer_callback.buffer_callback_p, lowering, platform=platform, cacheable=False)


def _host_function(callback, in_tree, out_tree, aliases: dict[int, int], result_avals):
    """What the host runs: the user's `callback(ctx, outputs, *inputs)` on
    buffers over the operands and new results; returns the results."""
    from jax._src import tree_util

    context = HostExecutionContext()

    def run(*operands: np.ndarray) -> tuple[np.ndarray, ...]:
        operands = [np.array(operand) for operand in operands]   # our own copies, writable
        results = [np.zeros(aval.shape, aval.dtype) for aval in result_avals]
        for operand_index, result_index in aliases.items():
            results[result_index] = operands[operand_index]       # one memory, as on cpu
        inputs = [HostBuffer(array, writeable=False) for array in operands]
        outputs = [HostBuffer(array, writeable=True) for array in results]
        args, kwargs = tree_util.tree_unflatten(in_tree, inputs)
        if callback(context, tree_util.tree_unflatten(out_tree, outputs), *args, **kwargs) is not None:
            raise ValueError("buffer_callback callback must not return any values.")
        return tuple(results)

    return run
