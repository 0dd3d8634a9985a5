"""Mesh-axes replica groups (interpreter/mesh_axes.py) as id tables.

The expected tables are StableHLO's own: its compatibility expander test
(openxla/stablehlo, stablehlo/tests/transforms/
stablehlo_compatibility_expander_rgv3.mlir at target 1.14.0) rewrites each
of these attributes to the dense table given here. JAX >= 0.12 emits the
attribute for psum & co.; tests/model/test_multi_device.py and test_spmd.py run
such programs end to end on that JAX."""
from __future__ import annotations

import pytest

from pjrt_ref.interpreter import mesh_axes

PREFIX = mesh_axes.MESH_AXES_PREFIX


def _inline(*axes) -> str:
    listed = ", ".join(f'#stablehlo.mesh_axis<name = "{n}", size = {s}>' for n, s in axes)
    return f"#stablehlo.mesh<axes = [{listed}]>"


MESHES = {
    "sdy_mesh": mesh_axes.parse_mesh('{axes = [{name = "x", size = 2 : i64}, '
                                     '{name = "y", size = 2 : i64}]}'),
    "sdy_mesh_dev": mesh_axes.parse_mesh(
        '{axes = [{name = "x", size = 2 : i64}, {name = "y", size = 2 : i64}], '
        'device_ids = dense<[0, 2, 1, 3]> : tensor<4xi64>}'),
    "sdy_mesh_max": mesh_axes.parse_mesh('{axes = [], device_ids = dense<0> : tensor<1xi64>}'),
    "jax_mesh": mesh_axes.parse_mesh('#sdy.mesh<["i"=4]>'),     # what JAX 0.12 prints
}
XY = _inline(("x", 2), ("y", 2))
FOO_BAR = _inline(("foo", 6), ("bar", 5))

CASES = {
    "all_reduce_x": ("<mesh = " + XY + ', axes = [#stablehlo.axis_ref<name = "x">]>',
                     [[0, 2], [1, 3]]),
    "all_gather_y": ("<mesh = " + XY + ', axes = [#stablehlo.axis_ref<name = "y">]>',
                     [[0, 1], [2, 3]]),
    "named_mesh": ('<mesh = @sdy_mesh, axes = [#stablehlo.axis_ref<name = "x">]>',
                   [[0, 2], [1, 3]]),
    "device_ids": ('<mesh = @sdy_mesh_dev, axes = [#stablehlo.axis_ref<name = "x">]>',
                   [[0, 1], [2, 3]]),
    "maximal": ("<mesh = @sdy_mesh_max, axes = []>", [[0]]),
    "sub_axis": (f'<mesh = {_inline(("x", 2), ("y", 4))}, axes = '
                 '[#stablehlo.axis_ref<name = "y", sub_axis_info = (1)2>]>',
                 [[0, 2], [1, 3], [4, 6], [5, 7]]),
    "sub_axis_first": (f'<mesh = {FOO_BAR}, axes = [#stablehlo.axis_ref<name = "foo", '
                       'sub_axis_info = (3)2>, #stablehlo.axis_ref<name = "bar">]>',
                       [list(range(0, 10)), list(range(10, 20)), list(range(20, 30))]),
    "sub_axis_second": (f'<mesh = {FOO_BAR}, axes = [#stablehlo.axis_ref<name = "bar">, '
                        '#stablehlo.axis_ref<name = "foo", sub_axis_info = (3)2>]>',
                        [[0, 5, 1, 6, 2, 7, 3, 8, 4, 9], [10, 15, 11, 16, 12, 17, 13, 18, 14, 19],
                         [20, 25, 21, 26, 22, 27, 23, 28, 24, 29]]),
    "size_one_axis": (f'<mesh = {_inline(("i", 1), ("j", 2))}, axes = '
                      '[#stablehlo.axis_ref<name = "i">, #stablehlo.axis_ref<name = "j">]>',
                      [[0, 1]]),
    "jax_psum": ('<mesh = @jax_mesh, axes = [#stablehlo.axis_ref<name = "i">]>',
                 [[0, 1, 2, 3]]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_mesh_axes_give_stablehlos_dense_groups(name):
    text, expected = CASES[name]
    assert mesh_axes.is_mesh_axes(PREFIX + text)
    assert mesh_axes.replica_groups(PREFIX + text, MESHES).tolist() == expected


def test_unknown_mesh_or_axis_is_an_error():
    with pytest.raises(ValueError, match="unknown mesh @nowhere"):
        mesh_axes.replica_groups(PREFIX + "<mesh = @nowhere, axes = []>", MESHES)
    with pytest.raises(ValueError, match="'z', not in the mesh"):
        mesh_axes.replica_groups(PREFIX + '<mesh = @sdy_mesh, axes = '
                                 '[#stablehlo.axis_ref<name = "z">]>', MESHES)
