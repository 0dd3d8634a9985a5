"""The table of user FFI handlers: custom-call target name -> C function.

A handler arrives here from the PJRT FFI extension's `register_handler`
(pjrt_ref/capi/ffi_extension.py), which is where JAX's
`jax.ffi.register_ffi_target(name, capsule, platform="pjrt_ref")` lands
(pjrt_ref/frameworks/jax/ffi.py), as it does for XLA's GPU plugins. XLA
keeps one such table per platform; pjrt-ref is one platform, "pjrt_ref", and
refuses registrations for any other at once, since nothing here could ever
call them.

A registration is checked before anything calls it: the pointer must lie in
a loaded library (dladdr), and a typed-FFI handler (api_version 1) is asked
for its metadata as XLA asks it (the handler fills in the XLA FFI version
its ffi.h had; a major version other than ours is refused).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from pjrt_ref import settings
from pjrt_ref.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, Unimplemented
from pjrt_ref.interpreter.ffi.bridge import bridge

PLATFORM = "pjrt_ref"
# A typed XLA FFI handler (XLA_FFI_Handler*; all the PJRT FFI extension
# registers) or a legacy custom call (XLA CPU's raw-pointer signatures,
# registered from Python with `register`: legacy.py).
TYPED_FFI, LEGACY = 1, 0
HOW_TO_REGISTER = 'jax.ffi.register_ffi_target(name, capsule, platform="pjrt_ref")'


@dataclass(frozen=True)
class Handler:
    name: str
    address: int          # the C function: XLA_FFI_Handler* (typed) or a legacy custom call
    api_version: int      # TYPED_FFI or LEGACY
    traits: int = 0


_lock = threading.Lock()
_handlers: dict[str, Handler] = {}


def register(name: str, address: int, platform: str, api_version: int, traits: int = 0) -> Handler:
    """Add a handler (what PJRT_FFI_Register_Handler does); errors are PjrtRefErrors."""
    _check_reachable(name)
    _check_platform(name, platform)
    if api_version not in (TYPED_FFI, LEGACY):
        raise InvalidArgument(f"FFI target '{name}': api_version {api_version} is neither 1 (typed "
                              "XLA FFI) nor 0 (legacy custom call)")
    _check_address(name, address)
    if api_version == TYPED_FFI:
        _check_metadata(name, address)
    handler = Handler(name, address, api_version, traits)
    with _lock:
        known = _handlers.get(name)
        if known is not None and known != handler:
            raise AlreadyExists(f"FFI target '{name}' is already registered for {PLATFORM} with "
                                "another handler")
        _handlers[name] = handler
    return handler


def lookup(name: str) -> Handler | None:
    with _lock:
        return _handlers.get(name)


def registered() -> list[str]:
    with _lock:
        return sorted(_handlers)


def unknown_target_message(name: str) -> str:
    """Why custom call target `name` cannot run, and how to make it run."""
    if settings.runs_in_own_python():    # the host's registry is in the host's jaxlib, not ours
        hint = " (if it was registered with register_ffi_target's default platform, cpu: that is another platform)"
    else:
        hint = " (it is registered for cpu, which is another platform)" if _on_cpu(name) else ""
    return (f"custom call target '{name}' is not registered in pjrt-ref{hint}: a handler for "
            f"pjrt_ref is registered with {HOW_TO_REGISTER}")


def _on_cpu(name: str) -> bool:
    """Whether jaxlib's cpu backend has a handler `name` (the common mistake:
    registering with the default platform="cpu")."""
    try:
        from jaxlib import _jax
        return name in _jax.custom_call_targets("Host")
    except (ImportError, AttributeError, TypeError, RuntimeError):   # another jaxlib
        return False


def _check_reachable(name: str) -> None:
    """Called in a host's Python while this process's plugin runs in a Python
    of its own (PJRT_REF_RUNTIME=isolated), this table is not the plugin's."""
    if settings.runs_in_own_python() or not _isolated_plugin_loaded():
        return
    raise FailedPrecondition(
        f"FFI target '{name}': this process's pjrt_ref plugin runs in a Python of its own "
        f"(PJRT_REF_RUNTIME=isolated), which a registration from this Python cannot reach: register "
        f"a typed handler with {HOW_TO_REGISTER}, or run with PJRT_REF_RUNTIME=shared")


def _isolated_plugin_loaded() -> bool:
    try:
        with open("/proc/self/maps") as maps:
            return "_pjrt_ref_isolated" in maps.read()
    except OSError:
        return False


def _check_platform(name: str, platform: str) -> None:
    if platform.lower() != PLATFORM:
        raise InvalidArgument(
            f"FFI target '{name}' is registered for platform '{platform}', which pjrt-ref does not "
            f"serve: register it for pjrt_ref with {HOW_TO_REGISTER}")


def _check_address(name: str, address: int) -> None:
    module = bridge()
    if not address or not module.lib.pjrt_ref_ffi_is_code_address(module.ffi.cast("void*", address)):
        raise InvalidArgument(f"FFI target '{name}': the handler 0x{address:x} is not a function of "
                              "any loaded library (pass jax.ffi.pycapsule(library.function))")


def _check_metadata(name: str, address: int) -> None:
    """Ask the handler for the XLA FFI version it was built with, as XLA does."""
    module = bridge()
    ffi, lib = module.ffi, module.lib
    metadata = ffi.new("XLA_FFI_Metadata*")
    error = lib.pjrt_ref_ffi_metadata(ffi.cast("XLA_FFI_Handler*", address), metadata)
    if error != ffi.NULL:
        # A handler older than the metadata extension answers with an error
        # about its arguments; XLA runs such handlers too.
        lib.pjrt_ref_ffi_error_destroy(error)
        return
    major = metadata.api_version.major_version
    if major != lib.pjrt_ref_ffi_api().api_version.major_version:
        raise Unimplemented(f"FFI target '{name}' was built with XLA FFI API {major}."
                            f"{metadata.api_version.minor_version}; pjrt-ref implements "
                            f"{lib.pjrt_ref_ffi_api().api_version.major_version}.x (jaxlib's c_api.h)")


def forget(name: str) -> None:
    """Remove a registration (tests)."""
    with _lock:
        if _handlers.pop(name, None) is None:
            raise NotFound(f"FFI target '{name}' is not registered")
