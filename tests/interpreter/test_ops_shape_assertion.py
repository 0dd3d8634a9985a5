"""`stablehlo.custom_call @shape_assertion` (interpreter/ops/shape_assertion.py)
against JAX, which defines it: a module exported by `jax.export` with a
symbolic shape runs on pjrt-ref when the shape fits the specification, and
fails with the message JAX itself gives when it does not."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.interpreter import load


@pytest.fixture(scope="module")
def exported():
    """sum(x.reshape(2, -1), axis=1) for x of symbolic shape (2*b,)."""
    (size,) = export.symbolic_shape("2*b")
    return export.export(jax.jit(lambda x: jnp.sum(x.reshape(2, -1), axis=1)))(
        jax.ShapeDtypeStruct((size,), jnp.float32))


def test_the_exported_module_uses_shape_assertions(exported):
    assert "@shape_assertion" in exported.mlir_module()


def test_holding_assertions_let_the_program_run(exported):
    x = np.arange(6, dtype=np.float32)
    ours = load(exported.mlir_module())(x)
    theirs = exported.call(x)
    np.testing.assert_array_equal(ours[0], np.asarray(theirs))


@pytest.mark.parametrize("size", [5, 0])
def test_a_broken_assertion_raises_jaxs_message(exported, size):
    x = np.ones(size, np.float32)
    with pytest.raises(Exception) as jax_error:
        exported.call(x)
    with pytest.raises(InvalidArgument) as ours:
        load(exported.mlir_module())(x)
    assert "@shape_assertion" in str(ours.value)
    assert str(jax_error.value) in str(ours.value)
