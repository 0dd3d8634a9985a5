"""`jax.ffi.register_ffi_target(name, capsule, platform="pjrt_ref")` on pjrt-ref.

jaxlib keeps FFI registrations per platform (jaxlib/xla_client.py,
`register_custom_call_target`): for a platform whose plugin installed a
handler (`register_custom_call_handler`) it calls that handler at once; for
any other it only queues the registration, silently, until a handler comes.
XLA's GPU plugins install one that hands each registration to the plugin
through the PJRT FFI extension's `register_handler`. pjrt-ref does the same
(`install`): the registration travels through pjrt-ref's own extension
(capi_shim/pjrt_ffi_extension.h, pjrt_ref/capi/ffi_extension.py) into the
interpreter's target table (interpreter/ffi/targets.py), where custom calls
find it.

A registration jaxlib queued before the plugin loaded is replayed when the
handler is installed; one that fails then is reported as a warning (raising
would stop JAX from starting the plugin). A later one raises at once.
"""
from __future__ import annotations

import ctypes
import warnings

PLATFORM = "pjrt_ref"
_STAGES = ("instantiate", "prepare", "initialize", "execute")


class _Handler:
    """What jaxlib calls with each registration for "pjrt_ref"."""

    def __init__(self) -> None:
        self.replaying = True    # True while jaxlib replays queued registrations

    def __call__(self, name, fn, platform, api_version=0, traits=0) -> None:
        name = name.decode() if isinstance(name, bytes) else str(name)
        try:
            _check_api_version(name, api_version)
            register_through_extension(name, _handler_address(name, fn), platform, traits)
        except Exception as error:
            if not self.replaying:
                raise
            warnings.warn(f"pjrt-ref: FFI target registration failed: {error}", RuntimeWarning,
                          stacklevel=2)


def install() -> None:
    """Make jaxlib hand registrations for "pjrt_ref" to pjrt-ref (at plugin initialisation)."""
    from jaxlib import xla_client
    handler = _Handler()
    xla_client.register_custom_call_handler(PLATFORM, handler)   # replays the queued ones
    handler.replaying = False


def _check_api_version(name: str, api_version: int) -> None:
    """The PJRT FFI extension carries typed XLA FFI handlers (api_version=1) only."""
    if api_version != 1:
        raise ValueError(
            f"FFI target '{name}': pjrt_ref runs typed XLA FFI handlers (api_version=1, written "
            "with xla/ffi/api/ffi.h); the PJRT FFI extension JAX registers through carries no "
            f"legacy custom calls (api_version={api_version})")


def _handler_address(name: str, fn) -> int:
    """The C function a registration names: a PyCapsule (jax.ffi.pycapsule),
    or a dict of stage -> capsule of which pjrt-ref runs the execute stage."""
    if isinstance(fn, dict):
        others = sorted(set(fn) - {"execute"})
        if others or "execute" not in fn:
            raise ValueError(f"FFI target '{name}': pjrt-ref calls handlers at the execute stage only; "
                             f"got stages {sorted(fn)} (pass {{'execute': capsule}} or the capsule)")
        fn = fn["execute"]
    return capsule_pointer(name, fn)


def capsule_pointer(name: str, capsule) -> int:
    """The pointer inside a PyCapsule, whatever its name; TypeError for anything else."""
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"FFI target '{name}': expected a PyCapsule holding the handler "
                        f"(jax.ffi.pycapsule(library.function)), got {type(capsule).__name__}")
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.argtypes, get_name.restype = [ctypes.py_object], ctypes.c_void_p
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.argtypes, get_pointer.restype = [ctypes.py_object, ctypes.c_void_p], ctypes.c_void_p
    return get_pointer(capsule, get_name(capsule)) or 0


# The C API as a host sees it, declared for ctypes (this layer talks to the
# plugin through its C API only, like jaxlib): the head of PJRT_Api and its
# first two slots, the extension chain, and the FFI extension's struct
# (capi_shim/pjrt_c_api.h, pjrt_ffi_extension.h).
class _ExtensionBase(ctypes.Structure):
    pass


_ExtensionBase._fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int),
                           ("next", ctypes.POINTER(_ExtensionBase))]
_EXTENSION_TYPE_FFI = 5     # PJRT_Extension_Type_FFI


class _ErrorDestroyArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("error", ctypes.c_void_p)]


class _ErrorMessageArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.c_void_p),
                ("error", ctypes.c_void_p), ("message", ctypes.c_void_p),
                ("message_size", ctypes.c_size_t)]


class _Api(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(_ExtensionBase)),
                ("version_struct_size", ctypes.c_size_t), ("version_extension_start", ctypes.c_void_p),
                ("major_version", ctypes.c_int), ("minor_version", ctypes.c_int),
                ("PJRT_Error_Destroy", ctypes.CFUNCTYPE(None, ctypes.POINTER(_ErrorDestroyArgs))),
                ("PJRT_Error_Message", ctypes.CFUNCTYPE(None, ctypes.POINTER(_ErrorMessageArgs)))]


class _RegisterHandlerArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("target_name", ctypes.c_char_p),
                ("target_name_size", ctypes.c_size_t), ("handler", ctypes.c_void_p),
                ("platform_name", ctypes.c_char_p), ("platform_name_size", ctypes.c_size_t),
                ("traits", ctypes.c_uint32)]


class _FfiExtension(ctypes.Structure):
    _fields_ = [("base", _ExtensionBase), ("type_register", ctypes.c_void_p),
                ("user_data_add", ctypes.c_void_p),
                ("register_handler", ctypes.CFUNCTYPE(ctypes.c_void_p,
                                                      ctypes.POINTER(_RegisterHandlerArgs)))]


def register_through_extension(name: str, address: int, platform: str, traits: int) -> None:
    """Call the PJRT FFI extension's register_handler, as jaxlib does for GPU plugins;
    its error becomes a ValueError with the plugin's message."""
    api = _api()
    target, platform_name = name.encode(), platform.encode()
    args = _RegisterHandlerArgs(ctypes.sizeof(_RegisterHandlerArgs), target, len(target), address,
                                platform_name, len(platform_name), int(traits))
    error = _ffi_extension(api).register_handler(ctypes.byref(args))
    if error:
        raise ValueError(_take_message(api, error))


def _api() -> _Api:
    """The PJRT_Api JAX loaded for "pjrt_ref" (the capsule register_plugin returned)."""
    from jax._src import xla_bridge
    capsule = xla_bridge._backend_factories[PLATFORM].c_api
    return ctypes.cast(capsule_pointer("pjrt_ref's PJRT_Api", capsule), ctypes.POINTER(_Api)).contents


def _ffi_extension(api: _Api) -> _FfiExtension:
    """The PJRT_FFI_Extension on the plugin's `extension_start` chain."""
    base = api.extension_start
    while base and base.contents.type != _EXTENSION_TYPE_FFI:
        base = base.contents.next
    if not base:   # pragma: no cover - the shim always chains it
        raise ValueError("the pjrt-ref plugin offers no PJRT FFI extension")
    return ctypes.cast(base, ctypes.POINTER(_FfiExtension)).contents


def _take_message(api: _Api, error: int) -> str:
    """A PJRT_Error's message, the error then destroyed, through the PJRT_Api as a host does."""
    message = _ErrorMessageArgs(ctypes.sizeof(_ErrorMessageArgs), None, error, None, 0)
    api.PJRT_Error_Message(ctypes.byref(message))
    text = ctypes.string_at(message.message, message.message_size).decode("utf-8", "replace")
    api.PJRT_Error_Destroy(ctypes.byref(_ErrorDestroyArgs(ctypes.sizeof(_ErrorDestroyArgs), None, error)))
    return text
