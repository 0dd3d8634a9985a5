"""PJRT_Executable_Serialize / PJRT_Executable_DeserializeAndLoad (pjrt_ref/services/serialization.py).

Round trips through the C API in-process (tests/support/capi_calls.py), every kind
of damage to a blob is INVALID_ARGUMENT, nothing in a blob is ever
unpickled or run, and JAX's serialize_executable round trip works on the
plugin (child process).
"""
from __future__ import annotations

import hashlib
import pickle
import struct

import numpy as np
import pytest

from tests.support.capi_calls import PjrtCallError
from pjrt_ref.services import serialization
from tests.support.jax_support import run_jax

INVALID_ARGUMENT = 3

PROGRAM = """func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.multiply %x, %y : tensor<4xf32>
  %1 = stablehlo.add %0, %x : tensor<4xf32>
  return %1 : tensor<4xf32>
}"""
OPTIONS = b"\x12\x04opts"        # opaque bytes to pjrt-ref; any CompileOptionsProto will do


@pytest.fixture(scope="module")
def blob(api, client):
    loaded = api.compile(client, PROGRAM, OPTIONS)
    data = api.serialize(loaded)
    api.call("PJRT_LoadedExecutable_Destroy", executable=loaded)
    return data


def _run(api, client, loaded) -> np.ndarray:
    x, y = np.arange(4, dtype=np.float32), np.full(4, 3, np.float32)
    (out,) = api.execute(loaded, [api.buffer(client, x), api.buffer(client, y)], 1)
    return api.to_host(out, np.float32, (4,))


def _expect_invalid(api, client, data: bytes, *needles: str) -> str:
    with pytest.raises(PjrtCallError) as info:
        api.deserialize(client, data)
    assert info.value.code == INVALID_ARGUMENT, info.value
    for needle in needles:
        assert needle in info.value.message, info.value.message
    return info.value.message


def _reframe(program: bytes, options: bytes = b"", version: int = serialization.VERSION, flags: int = 0) -> bytes:
    """A blob with a correct digest around arbitrary content (what a deliberate forger can make)."""
    body = struct.pack("<8sIIQQ", serialization.MAGIC, version, flags, len(options), len(program)) + options + program
    return body + hashlib.sha256(body).digest()


def test_layout_matches_the_documented_format(blob):
    program = PROGRAM.encode()
    assert blob[:8] == b"PJRTREF\x00"
    assert struct.unpack_from("<IIQQ", blob, 8) == (2, 0, len(OPTIONS), len(program))
    assert blob[32:32 + len(OPTIONS)] == OPTIONS
    assert blob[32 + len(OPTIONS):-32] == program
    assert blob[-32:] == hashlib.sha256(blob[:-32]).digest()
    assert len(blob) == 64 + len(OPTIONS) + len(program)


def test_round_trip_runs_and_keeps_options_and_fingerprint(api, client, blob):
    loaded = api.deserialize(client, blob)
    np.testing.assert_array_equal(_run(api, client, loaded), [0, 4, 8, 12])
    exe = api.call("PJRT_LoadedExecutable_GetExecutable", loaded_executable=loaded).executable
    options = api.call("PJRT_Executable_GetCompileOptions", executable=exe)
    assert bytes(api_buffer(options.serialized_bytes, options.serialized_bytes_size)) == OPTIONS
    options.serialized_compile_options_deleter(options.serialized_compile_options)
    assert api.serialize(loaded) == blob                     # serialize(deserialize(b)) == b
    api.call("PJRT_Executable_Destroy", executable=exe)
    api.call("PJRT_LoadedExecutable_Destroy", executable=loaded)


def test_overridden_compile_options_replace_the_stored_ones(api, client, blob):
    loaded = api.deserialize(client, blob, options=b"\x08\x01")
    assert api.serialize(loaded) == serialization.encode(PROGRAM.encode(), b"\x08\x01")
    api.call("PJRT_LoadedExecutable_Destroy", executable=loaded)


def test_every_truncation_is_invalid_argument(api, client, blob):
    for size in sorted({0, 1, 8, 31, 32, 63, 64, len(blob) // 2, len(blob) - 32, len(blob) - 1}):
        _expect_invalid(api, client, blob[:size], "not a valid serialized pjrt-ref executable")


def test_flipping_any_byte_is_invalid_argument(api, client, blob):
    """One bit flipped at every offset (header, options, program, digest): always rejected."""
    for offset in range(len(blob)):
        tampered = bytearray(blob)
        tampered[offset] ^= 0x01
        _expect_invalid(api, client, bytes(tampered), "not a valid serialized pjrt-ref executable")


@pytest.mark.parametrize("mutation, needle", [
    (lambda b: b + b"\x00", "truncated or padded"),
    (lambda b: b"XJRTREF\x00" + b[8:], "bad magic"),
    (lambda b: _reframe(PROGRAM.encode(), version=3), "format version 3"),
    (lambda b: _reframe(PROGRAM.encode(), flags=1), "unknown flags"),
    (lambda b: _reframe(b""), "empty program"),
    (lambda b: b[:16] + struct.pack("<QQ", 2**63, 2**63) + b[32:], "header describes"),
    (lambda b: b[:-32] + bytes(32), "digest mismatch"),
    (lambda b: b"pjrt-ref executable v1\n" + struct.pack("<QQ", 0, len(PROGRAM)) + PROGRAM.encode(), "bad magic"),
])
def test_damage_is_named(api, client, blob, mutation, needle):
    _expect_invalid(api, client, mutation(blob), needle)


def test_a_forged_digest_only_reaches_the_stablehlo_parser(api, client):
    """A correct digest around garbage: the parser rejects it like PJRT_Client_Compile would."""
    _expect_invalid(api, client, _reframe(b"\x00\x01 not mlir"))
    _expect_invalid(api, client, _reframe(b"ML\xefR\x00 truncated bytecode"))


class _Marker:
    ran = False


def _set_marker():
    _Marker.ran = True


class _Payload:
    def __reduce__(self):
        return (_set_marker, ())


def test_a_pickle_in_the_blob_is_never_unpickled(api, client):
    """pickle.loads of this payload would call _set_marker; deserialization must not."""
    payload = pickle.dumps(_Payload())
    for data in (payload, _reframe(payload), _reframe(PROGRAM.encode(), options=payload)[:-1]):
        with pytest.raises(PjrtCallError):
            api.deserialize(client, data)
    assert not _Marker.ran
    # The options are read as the CompileOptionsProto they claim to be (for the
    # replica/partition counts and device assignment), never unpickled.
    with pytest.raises(PjrtCallError, match="CompileOptionsProto") as info:
        api.deserialize(client, _reframe(PROGRAM.encode(), options=payload))
    assert info.value.code == INVALID_ARGUMENT and not _Marker.ran
    loaded = api.deserialize(client, _reframe(PROGRAM.encode()))
    np.testing.assert_array_equal(_run(api, client, loaded), [0, 4, 8, 12])
    api.call("PJRT_LoadedExecutable_Destroy", executable=loaded)


def test_null_blob_is_invalid_argument(api, client):
    from pjrt_ref.capi_shim._pjrt_ref_shim import ffi
    with pytest.raises(PjrtCallError) as info:
        api.call("PJRT_Executable_DeserializeAndLoad", client=client, serialized_executable=ffi.NULL,
                 serialized_executable_size=100)
    assert info.value.code == INVALID_ARGUMENT


def api_buffer(pointer, size: int):
    from pjrt_ref.capi_shim._pjrt_ref_shim import ffi
    return ffi.buffer(pointer, size)


def test_jax_serialize_executable_round_trip_and_tampering():
    """JAX's serialize_executable (pickle on JAX's side; our blob inside) and a tampered raw blob."""
    proc = run_jax("""
        from jax.experimental import serialize_executable as se
        from jax._src.lib import xla_client as xc
        f = jax.jit(lambda x, y: jnp.sin(x) * y + 1)
        x, y = jnp.arange(4.0), jnp.full(4, 2.0)
        compiled = f.lower(x, y).compile()
        blob, in_tree, out_tree = se.serialize(compiled)
        g = se.deserialize_and_load(blob, in_tree, out_tree)
        np.testing.assert_allclose(g(x, y), np.sin(np.arange(4.0)) * 2 + 1, rtol=1e-6)
        backend = jax.devices()[0].client
        raw = backend.serialize_executable(compiled.runtime_executable())
        assert b"PJRTREF" in raw
        devices = xc.DeviceList(tuple(backend.devices()))
        again = backend.deserialize_executable(raw, devices)
        bad = bytearray(raw); bad[raw.index(b"PJRTREF") + 40] ^= 0xFF
        try:
            backend.deserialize_executable(bytes(bad), devices)
        except Exception as e:
            assert "INVALID_ARGUMENT" in str(e) and "digest mismatch" in str(e), e
        else:
            raise AssertionError("tampered blob was accepted")
        print("ok")
    """)
    assert "ok" in proc.stdout
