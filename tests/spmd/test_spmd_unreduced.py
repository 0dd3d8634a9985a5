"""Unreduced values (JAX's `P(unreduced=...)`) on four pjrt_ref devices,
against JAX's cpu backend with 4 host devices (`tests/support/unreduced_cases.py`
in a child process each): every device's shard and the reported sharding
must be XLA's. See pjrt_ref/spmd/unreduced.py."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from pjrt_ref.spmd.layout import hlo_sharding_text, parse_mesh, parse_tensor_sharding
from test_spmd import CPU_4, PJRT_REF_4, run_script

CASES = ["unreduced_out_and_reshard", "unreduced_matmul_2d", "reduced_input_gradient",
         "reshard_to_unreduced"]


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[dict, dict]:
    return (run_script(tmp_path_factory, "unreduced_cases.py", "cpu", **CPU_4),
            run_script(tmp_path_factory, "unreduced_cases.py", "pjrt_ref", **PJRT_REF_4))


@pytest.mark.parametrize("name", CASES)
def test_unreduced_shards_match_jax_cpu(both, name):
    cpu, ours = both[0][name], both[1][name]
    if isinstance(cpu, dict):
        pytest.skip(f"jax {jax.__version__} refuses this program on its own cpu backend: {cpu['refused']}")
    assert not isinstance(ours, dict), f"pjrt_ref: {ours['refused']}"
    assert [spec for spec, _ in ours] == [spec for spec, _ in cpu]
    for i, ((_, expected), (_, got)) in enumerate(zip(cpu, ours)):
        assert len(got) == len(expected)
        for device, (e, g) in enumerate(zip(expected, got)):
            np.testing.assert_array_equal(g, e, err_msg=f"{name}: array {i}, device {device}")


def test_unreduced_sharding_text_is_xlas():
    """The HloSharding text pjrt-ref reports for unreduced layouts (JAX's
    `named_sharding_to_xla_hlo_sharding` spells them the same way)."""
    meshes = {"mesh": parse_mesh('<["x"=2, "y"=2]>')}

    def text(sharding: str) -> str:
        return hlo_sharding_text(parse_tensor_sharding(sharding).layout(meshes), range(4))
    assert text('<@mesh, [{"x"}, {}], unreduced={"y"}>') == \
        "{devices=[2,1,2]0,1,2,3 last_tile_dims={unreduced}}"
    assert text('<@mesh, [{}], unreduced={"x"}>') == \
        "{devices=[1,2,2]0,1,2,3 last_tile_dims={unreduced, replicated}}"
    assert text('<@mesh, [{}], unreduced={"x", "y"}>') == \
        "{devices=[1,4]0,1,2,3 last_tile_dims={unreduced}}"
