"""Oracle for hand-written StableHLO: compile the text with XLA's CPU backend
(through jaxlib) and run it. Used by the op tests (tests/interpreter/) for ops
JAX does not emit itself (cholesky, batch_norm_*, the deprecated dot/einsum, ...).
"""
from __future__ import annotations

import numpy as np

from tests.support import oracle  # noqa: F401  (configures jax: cpu platform, x64)
import jax
from jax._src import xla_bridge
from jax._src.lib import xla_client

from pjrt_ref.interpreter import load


def run_on_xla_cpu(text: str, args) -> list[np.ndarray]:
    """Results of StableHLO `text` (@main) on XLA CPU."""
    backend = xla_bridge.get_backend("cpu")
    device = backend.devices()[0]
    executable = backend.compile_and_load(text, xla_client.DeviceList((device,)),
                                          xla_client.CompileOptions())
    outputs = executable.execute([jax.device_put(np.asarray(a), device) for a in args])
    return [np.asarray(o) for o in outputs]


def ours_and_xla(text: str, args):
    """(pjrt-ref's results, XLA CPU's results) for StableHLO `text`."""
    return load(text)(*args), run_on_xla_cpu(text, args)


def assert_close(ours, theirs, rtol=1e-6, atol=0.0, exact=False):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        if exact:
            assert a.tobytes() == b.tobytes(), (a, b)
        else:
            wide = np.complex128 if a.dtype.kind == "c" else np.float64
            np.testing.assert_allclose(a.astype(wide), b.astype(wide), rtol=rtol, atol=atol,
                                       equal_nan=True)
