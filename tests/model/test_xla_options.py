"""compiler_options (CompileOptionsProto env_option_overrides): read and checked as XLA does."""
from __future__ import annotations

import pytest

from pjrt_ref.model import xla_options
from pjrt_ref.model.compile_options import parse_compile_options
from pjrt_ref.errors import InvalidArgument


def test_overrides_are_read_from_jaxlibs_own_serialization():
    from jax._src.lib import _jax

    options = _jax.CompileOptions()
    pairs = [("xla_dump_to", "/tmp/x"), ("xla_embed_ir_in_executable", True),
             ("xla_dump_max_hlo_modules", -7), ("xla_gpu_auto_spmd_partitioning_memory_budget_ratio", 0.25)]
    options.env_option_overrides = pairs
    read = parse_compile_options(options.SerializeAsString()).option_overrides
    assert sorted(read) == sorted(pairs)


def test_the_installed_xlas_debug_options_are_found():
    types = xla_options.debug_option_types()
    assert types is not None and len(types) > 100
    assert types["xla_embed_ir_in_executable"] == "bool"
    assert types["xla_dump_to"] == "string"


@pytest.mark.parametrize("name, value, accepted", [
    ("xla_embed_ir_in_executable", False, True),
    ("xla_embed_ir_in_executable", "True", True),
    ("xla_embed_ir_in_executable", "yes", False),
    ("xla_embed_ir_in_executable", 1, False),
    ("xla_dump_max_hlo_modules", 3, True),
    ("xla_dump_max_hlo_modules", "12", True),
    ("xla_dump_max_hlo_modules", 1.5, False),
    ("xla_dump_to", "/tmp", True),
    ("xla_dump_to", 3, False),
    ("not_an_option", "x", False),
    ("exec_time_optimization_effort", 0.5, True),     # JAX 0.12 leaves the effort fields in
    ("memory_fitting_effort", "-1.0", True),
    ("memory_fitting_effort", "high", False),
    ("exec_time_compilation_effort", 0.0, False),
])
def test_values_are_checked_by_the_options_type(name, value, accepted):
    if accepted:
        xla_options.check_option_overrides([(name, value)])
    else:
        with pytest.raises(InvalidArgument):
            xla_options.check_option_overrides([(name, value)])


def test_without_the_descriptor_names_are_screened_by_prefix(monkeypatch):
    monkeypatch.setattr(xla_options, "debug_option_types", lambda: None)
    xla_options.check_option_overrides([("xla_some_future_option", 1)])
    with pytest.raises(InvalidArgument, match="No such compile option: 'invalid_key'"):
        xla_options.check_option_overrides([("invalid_key", "x")])
