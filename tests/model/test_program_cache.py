"""A compile of a program compiled before hands back the same Executable
(pjrt_ref/model/program_cache.py), and only when nothing a compile reads
has changed: bytes, the options pjrt-ref reads, PJRT_REF_* settings."""
from __future__ import annotations

import numpy as np
import pytest

from pjrt_ref import settings
from pjrt_ref.errors import PjrtRefError
from pjrt_ref.model import program_cache
from pjrt_ref.model.buffer import Buffer
from pjrt_ref.model.client import Client
from pjrt_ref.model.compile_options import encode_device_assignment

from tests.support.jax_support import run_jax

SCALE = b"""
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = stablehlo.constant dense<3.0> : tensor<4xf32>
  %y = stablehlo.multiply %x, %c : tensor<4xf32>
  return %y : tensor<4xf32>
}
"""

UNKNOWN_OP = b"""
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = "stablehlo.no_such_op"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
"""


@pytest.fixture(autouse=True)
def empty_cache():
    program_cache.clear()
    yield
    program_cache.clear()


def _run(loaded, values) -> np.ndarray:
    device = loaded.client.devices[0]
    argument = Buffer(np.asarray(values, np.float32), device)
    (result,) = loaded.execute([argument], device, set())
    return np.asarray(result.array)


def test_the_same_program_compiles_to_the_same_executable_once():
    client = Client()
    first = client.compile(SCALE, "mlir", b"")
    second = client.compile(SCALE, "mlir", b"")
    assert second is not first                       # each compile is its own loaded executable
    assert second.executable is first.executable     # sharing one plan
    assert program_cache.kept() == 1
    np.testing.assert_array_equal(_run(second, [1, 2, 3, 4]), [3, 6, 9, 12])


def test_deleting_one_loaded_executable_leaves_the_other_running():
    client = Client()
    first = client.compile(SCALE, "mlir", b"")
    second = client.compile(SCALE, "mlir", b"")
    first.deleted = True          # what PJRT_LoadedExecutable_Delete does
    np.testing.assert_array_equal(_run(second, [1, 1, 1, 1]), [3, 3, 3, 3])


def test_a_changed_setting_plans_the_program_again():
    client = Client()
    optimised = client.compile(SCALE, "mlir", b"")
    with settings.override(PJRT_REF_OPTIMIZE="0"):
        plain = client.compile(SCALE, "mlir", b"")
    assert plain.executable is not optimised.executable
    assert client.compile(SCALE, "mlir", b"").executable is optimised.executable


def test_other_options_compile_apart():
    client = Client()
    default = client.compile(SCALE, "mlir", b"")
    # CompileOptionsProto field 3 (executable_build_options) holding field 9, a device assignment.
    assignment = encode_device_assignment([[0]])
    build = b"\x4a" + bytes([len(assignment)]) + assignment
    placed = client.compile(SCALE, "mlir", b"\x1a" + bytes([len(build)]) + build)
    assert placed.executable is not default.executable
    assert program_cache.kept() == 2


def test_the_capacity_bounds_what_is_kept_least_recent_first():
    client = Client()
    programs = [SCALE.replace(b"3.0", f"{k}.0".encode()) for k in range(4)]
    with settings.override(PJRT_REF_PROGRAM_CACHE="2"):
        executables = [client.compile(p, "mlir", b"").executable for p in programs]
        assert program_cache.kept() == 2
        assert client.compile(programs[3], "mlir", b"").executable is executables[3]
        assert client.compile(programs[0], "mlir", b"").executable is not executables[0]


def test_capacity_zero_keeps_nothing():
    client = Client()
    with settings.override(PJRT_REF_PROGRAM_CACHE="0"):
        first = client.compile(SCALE, "mlir", b"")
        assert client.compile(SCALE, "mlir", b"").executable is not first.executable
        assert program_cache.kept() == 0


def test_a_program_that_fails_is_not_kept_and_fails_again_the_same_way():
    client = Client()
    errors = []
    for _ in range(2):
        with pytest.raises(PjrtRefError) as caught:
            client.compile(UNKNOWN_OP, "mlir", b"")
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "no_such_op" in errors[0]
    assert program_cache.kept() == 0


def test_jax_compiling_again_after_clear_caches_gets_the_kept_program():
    """Through the C API: JAX's options proto differs from one compile to
    the next (a map in its debug options), yet the second compile hits."""
    proc = run_jax("""
        from pjrt_ref.model import program_cache
        f = lambda x: jnp.tanh(x) * 2.0
        x = jnp.arange(8.0, dtype=jnp.float32)
        results, kept = [], []
        for _ in range(2):    # one call site: the program's locations are part of its bytes
            jax.clear_caches()
            results.append(np.asarray(jax.jit(f)(x)))
            kept.append(program_cache.kept())
        assert kept[0] == kept[1], kept
        first, second = results
        np.testing.assert_array_equal(first, second)
        with jax.default_device(jax.devices("cpu")[0]):
            np.testing.assert_allclose(second, np.asarray(jax.jit(f)(x)), rtol=1e-6)
        print("ok", kept[0])
    """, JAX_PLATFORMS="pjrt_ref,cpu")
    assert proc.stdout.split()[0] == "ok"


def test_options_read_the_same_share_the_plan_and_keep_the_callers_bytes():
    """Field 1 of CompileOptionsProto is one pjrt-ref does not read: the plan
    is shared, but Serialize and GetCompileOptions give back each caller's bytes."""
    client = Client()
    plain = client.compile(SCALE, "mlir", b"")
    other = client.compile(SCALE, "mlir", b"\x08\x01")
    assert other.executable.program is plain.executable.program
    assert other.executable.compile_options == b"\x08\x01"
    assert plain.executable.compile_options == b""
    assert other.executable.fingerprint != plain.executable.fingerprint
