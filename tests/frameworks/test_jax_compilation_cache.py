"""JAX's persistent compilation cache on pjrt_ref (pjrt_ref/frameworks/jax/compilation_cache.py).

Each run is a fresh process, as a user's second `python script.py` is; the
cache's own monitoring events say whether it missed (and wrote) or hit.
"""
from __future__ import annotations

import json
import os

import numpy as np

from tests.support.jax_support import run_jax

PROGRAM = """
import json, sys
from jax._src import monitoring
jax.config.update("jax_compilation_cache_dir", {cache!r})
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
events = []
monitoring.register_event_listener(lambda name, **kw: events.append(name))
x = np.linspace(-3, 3, 16, dtype=np.float32)
y = jax.jit(lambda v: jnp.sin(v) * 2 + jnp.cumsum(v) @ v)(x)
print(json.dumps({{"platform": jax.devices()[0].platform, "values": np.asarray(y).tolist(),
                  "hits": events.count("/jax/compilation_cache/cache_hits"),
                  "misses": events.count("/jax/compilation_cache/cache_misses")}}))
"""


def _run(cache_dir, **env) -> dict:
    proc = run_jax(PROGRAM.format(cache=str(cache_dir)), **env)
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


def _entries(cache_dir) -> list[str]:
    return sorted(name for name in os.listdir(cache_dir) if name.endswith("-cache"))


def test_a_second_process_loads_the_executable_from_the_cache_and_gets_the_same_bits(tmp_path):
    first = _run(tmp_path)
    assert first["platform"] == "pjrt_ref"
    assert first["misses"] >= 1 and first["hits"] == 0
    written = _entries(tmp_path)
    assert any(name.startswith("jit__lambda") for name in written)

    second = _run(tmp_path)
    assert second["hits"] >= 1 and second["misses"] == 0
    assert _entries(tmp_path) == written
    assert second["values"] == first["values"]

    x = np.linspace(-3, 3, 16, dtype=np.float32)
    expected = np.sin(x) * 2 + np.cumsum(x) @ x
    np.testing.assert_allclose(second["values"], expected, rtol=1e-5, atol=1e-4)


def test_an_entry_written_under_other_settings_is_not_loaded(tmp_path):
    _run(tmp_path)
    written = _entries(tmp_path)
    other = _run(tmp_path, PJRT_REF_OPTIMIZE="0")
    assert other["hits"] == 0 and other["misses"] >= 1
    assert len(_entries(tmp_path)) > len(written)       # written again under its own key


def test_a_damaged_entry_is_refused_with_a_clear_warning_and_compiled_afresh(tmp_path):
    first = _run(tmp_path)
    run_jax(_DAMAGE.format(cache=str(tmp_path)))
    again = _run(tmp_path)
    assert "not a valid serialized pjrt-ref executable" in again["stderr"]
    assert "digest" in again["stderr"]
    assert again["values"] == first["values"]


# Rewrites the program's entry as JAX would store it (its own compression and
# time field), around a blob with one byte of the program flipped.
_DAMAGE = """
import os
from jax._src import compilation_cache as cc
cache = {cache!r}
name = next(n for n in os.listdir(cache) if n.startswith("jit__lambda") and n.endswith("-cache"))
path = os.path.join(cache, name)
blob, time = cc.extract_executable_and_time(cc.decompress_executable(open(path, "rb").read()))
blob = bytearray(blob)
blob[len(blob) // 2] ^= 0x20
open(path, "wb").write(cc.compress_executable(cc.combine_executable_and_time(bytes(blob), time)))
"""
