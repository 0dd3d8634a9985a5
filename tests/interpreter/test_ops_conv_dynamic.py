"""Convolutions whose result type has `?` dimensions (JAX shape-polymorphic
exports): output sizes come from the operands, compared with XLA on the
concrete shapes; and attribute lengths that do not match the spatial rank
are rejected when the program is loaded."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.oracle import jax
from jax import export, lax
from pjrt_ref.errors import InvalidArgument
from pjrt_ref.interpreter import load


def _conv(x, w):
    return lax.conv_general_dilated(x, w, window_strides=(2,), padding="SAME",
                                    dimension_numbers=("NWC", "WIO", "NWC"))


@pytest.mark.parametrize("width", [5, 8])
def test_convolution_with_dynamic_width_matches_xla(width):
    x_spec = jax.ShapeDtypeStruct(export.symbolic_shape("1, w, 3"), np.float32)
    w_spec = jax.ShapeDtypeStruct((3, 3, 4), np.float32)
    text = export.export(jax.jit(_conv))(x_spec, w_spec).mlir_module()
    assert "?x" in text
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, width, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4)).astype(np.float32)
    program = load(text)
    dims = [np.array(width, np.int64)] if len(program.input_types) == 3 else []
    ours = program(*dims, x, w)[0]
    theirs = np.asarray(jax.jit(_conv)(x, w))
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_dynamic_conv_strides_longer_than_spatial_rank_are_rejected_at_load():
    # The MLIR verifier checks `convolution`'s attributes but not those of
    # `dynamic_conv`: the interpreter checks them itself (spec C4).
    text = """
    func.func @main(%x: tensor<1x8x3xf32>, %w: tensor<3x3x4xf32>, %p: tensor<1x2xi32>) -> tensor<1x?x4xf32> {
      %0 = "stablehlo.dynamic_conv"(%x, %w, %p) {batch_group_count = 1 : i64,
             dimension_numbers = #stablehlo.conv<[b, 0, f]x[0, i, o]->[b, 0, f]>,
             feature_group_count = 1 : i64, window_strides = array<i64: 2, 2>}
           : (tensor<1x8x3xf32>, tensor<3x3x4xf32>, tensor<1x2xi32>) -> tensor<1x?x4xf32>
      return %0 : tensor<1x?x4xf32>
    }
    """
    with pytest.raises(InvalidArgument, match="window_strides"):
        load(text)
