"""JAX's persistent compilation cache, opened to "pjrt_ref".

When a user sets `jax_compilation_cache_dir`, JAX stores each compiled
executable (`PJRT_Executable_Serialize`) under a key and, in a later
process, loads it back (`PJRT_Executable_DeserializeAndLoad`) instead of
compiling. JAX 0.10 decides once per process whether the cache is used
(`jax._src.compilation_cache.is_cache_used`), and only for the platforms
in a list written inside that function (tpu, gpu, cpu, neuron): every
plugin's platform is turned away, whatever it can serialize.

pjrt-ref serializes every executable (pjrt_ref/services/serialization.py),
so `open_compilation_cache` wraps that one function: for a pjrt_ref
backend it asks JAX's own function about a stand-in that reports a listed
platform and forwards everything else, so every other condition (the
cache directory set, `jax_enable_compilation_cache`, the one-time metrics)
stays JAX's. For any other backend it calls JAX's function unchanged.

What keeps a stale entry out is JAX's cache key, which hashes the
backend's `platform_version`: pjrt-ref's names its version and a
fingerprint of every `PJRT_REF_*` setting in the compile key (`pjrt_ref.settings.fingerprint`),
so a cache written by another version or under other settings is a miss.
A damaged entry fails the blob's own checks (frame and SHA-256 digest) with
INVALID_ARGUMENT, which JAX reports as a warning before compiling afresh.
"""
from __future__ import annotations

from typing import Callable

# A platform JAX 0.10's is_cache_used accepts; the stand-in reports it.
_A_LISTED_PLATFORM = "cpu"


class _ListedPlatform:
    """`backend` as JAX's cache check sees it: the platform is a listed one."""

    def __init__(self, backend) -> None:
        self._backend = backend

    platform = _A_LISTED_PLATFORM

    def __getattr__(self, name: str):
        return getattr(self._backend, name)


def open_compilation_cache(platform: str) -> None:
    """Let JAX's persistent compilation cache serve `platform` (idempotent)."""
    from jax._src import compilation_cache

    if not hasattr(compilation_cache.is_cache_used, "pjrt_ref_wraps"):
        compilation_cache.is_cache_used = _cache_check_for(platform, compilation_cache.is_cache_used)


def _cache_check_for(platform: str, jax_check: Callable) -> Callable:
    def is_cache_used(backend) -> bool:
        if getattr(backend, "platform", None) == platform:
            return jax_check(_ListedPlatform(backend))
        return jax_check(backend)

    is_cache_used.pjrt_ref_wraps = jax_check
    is_cache_used.__doc__ = jax_check.__doc__
    return is_cache_used
