"""Oracles no one here wrote: JAX's own `cpu` backend and StableHLO's C++
reference interpreter.

`compare_with_jax(fn, *args)` lowers `fn` with JAX to StableHLO text, runs
that text on pjrt-ref's interpreter, runs `fn` on JAX's cpu backend (XLA),
and returns both results so the test can compare them.

`run_reference_interpreter(text, args)` runs a StableHLO program on
`jaxlib.mlir.dialects.stablehlo.eval_module` in a subprocess (it aborts the
process on ops it does not know).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from pjrt_ref.interpreter import load  # noqa: E402


def lower_to_text(fn, *args) -> str:
    """StableHLO text of `jax.jit(fn)` specialised to `args`."""
    return jax.jit(fn).lower(*args).as_text()


def compare_with_jax(fn, *args):
    """(ours, jax's): the results of `fn(*args)` on pjrt-ref and on XLA CPU,
    each as a list of numpy arrays."""
    text = lower_to_text(fn, *args)
    ours = load(text)(*[np.asarray(a) for a in args])
    theirs = jax.jit(fn)(*args)
    theirs = [np.asarray(t) for t in jax.tree_util.tree_leaves(theirs)]
    return ours, theirs


def assert_same_as_jax(fn, *args, rtol=1e-6, atol=0.0, equal_nan=True):
    """Run `fn` on both backends and assert the results agree."""
    ours, theirs = compare_with_jax(fn, *args)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape, (a.shape, b.shape)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        if a.dtype.kind in "fc" or a.dtype.name.startswith(("bfloat", "float")):
            np.testing.assert_allclose(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64),
                                       b.astype(np.complex128 if b.dtype.kind == "c" else np.float64),
                                       rtol=rtol, atol=atol, equal_nan=equal_nan)
        else:
            np.testing.assert_array_equal(a, b)
    return ours


_REFERENCE_SCRIPT = r"""
import json, sys
import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo
text = open(sys.argv[1]).read()
args = np.load(sys.argv[2], allow_pickle=False)
arrays = [args[f"arg{i}"] for i in range(len(args.files))]
from pjrt_ref.interpreter.loader import make_context
with make_context() as ctx, ir.Location.unknown():
    module = ir.Module.parse(text)
    inputs = [ir.DenseElementsAttr.get(a) for a in arrays]
    results = stablehlo.eval_module(module, inputs)
    out = {f"out{i}": np.array(r) for i, r in enumerate(results)}
np.savez(sys.argv[3], **out)
"""


def run_reference_interpreter(text: str, args, timeout: float = 120.0) -> list[np.ndarray]:
    """Run StableHLO `text` on the C++ reference interpreter, in a subprocess."""
    with tempfile.TemporaryDirectory() as tmp:
        program = os.path.join(tmp, "program.mlir")
        inputs = os.path.join(tmp, "inputs.npz")
        outputs = os.path.join(tmp, "outputs.npz")
        with open(program, "w") as f:
            f.write(text)
        np.savez(inputs, **{f"arg{i}": np.asarray(a) for i, a in enumerate(args)})
        proc = subprocess.run([sys.executable, "-c", _REFERENCE_SCRIPT, program, inputs, outputs],
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"reference interpreter failed: {proc.stderr[-2000:]}")
        data = np.load(outputs)
        return [data[f"out{i}"] for i in range(len(data.files))]


def assert_same_as_reference(text: str, *args, reference=None):
    """Run StableHLO `text` on pjrt-ref and on the reference interpreter and
    assert bit-identical results (same dtypes and shapes). `reference(text, args)`
    replaces `run_reference_interpreter` (e.g. a multi-process run)."""
    ours = load(text)(*args)
    theirs = (reference or run_reference_interpreter)(text, args)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        np.testing.assert_array_equal(a, b)
    return ours
