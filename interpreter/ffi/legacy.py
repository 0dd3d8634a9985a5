"""A legacy custom call: a handler registered with api_version 0.

Before the typed FFI, XLA CPU called a custom-call target with raw pointers
(xla/service/custom_call_target_registry.h, CustomCallApiVersion), chosen by
the op's `api_version`:

    1  ORIGINAL                   void f(void* out, const void** in)
    2  STATUS_RETURNING           void f(void* out, const void** in, XlaCustomCallStatus*)
    3  STATUS_RETURNING_UNIFIED   void f(void* out, const void** in,
                                         const char* opaque, size_t opaque_len,
                                         XlaCustomCallStatus*)

`in` holds one pointer per operand; `out` is the result's memory when the
op has one result and, for several, an array of one pointer per result (an
HLO tuple). `opaque` is the op's string `backend_config`. A handler reports
a failure with XlaCustomCallStatusSetFailure (xla_ffi_api.c defines it),
and the failure becomes the execution's error.
"""
from __future__ import annotations

from pjrt_ref.errors import Internal, InvalidArgument
from pjrt_ref.interpreter.ffi import buffers
from pjrt_ref.interpreter.ffi.bridge import bridge

LEGACY_API_VERSIONS = (1, 2, 3)


class LegacyCall:
    """The kernel of one custom call served by a legacy handler."""

    def __init__(self, op, handler) -> None:
        self.api_version = op.attrs.get("api_version", 1)
        if self.api_version not in LEGACY_API_VERSIONS:
            raise op.error(f"custom call target '{handler.name}' is registered as a legacy custom "
                           f"call (api_version=0) but called with api_version {self.api_version}; "
                           "a typed XLA FFI handler is registered with api_version=1",
                           cls=InvalidArgument)
        buffers.check_types(op)
        buffers.check_layouts(op)
        config = op.attrs.get("backend_config", "")
        self.opaque = config.encode("utf-8", "surrogateescape") if isinstance(config, str) else b""
        module = bridge()
        self.ffi, self.lib = module.ffi, module.lib
        self.op, self.handler = op, handler
        self.function = self.ffi.cast("void*", handler.address)
        self.aliased = buffers.aliases(op)

    def __call__(self, operands) -> list:
        ffi = self.ffi
        arguments, results = buffers.call_arrays(self.op, operands, self.aliased)
        inputs = ffi.new("void*[]", [buffers.address(ffi, a) for a in arguments] or 1)
        outputs = ffi.new("void*[]", [buffers.address(ffi, r) for r in results] or 1)
        out = outputs[0] if len(results) == 1 else ffi.cast("void*", outputs)
        opaque = ffi.new("char[]", self.opaque)
        status = ffi.new("char**")
        self.lib.pjrt_ref_legacy_call(self.function, self.api_version, out,
                                      ffi.cast("const void**", inputs), opaque, len(self.opaque),
                                      status)
        if status[0] != ffi.NULL:
            message = ffi.string(status[0]).decode("utf-8", "replace")
            self.lib.pjrt_ref_ffi_free(status[0])
            raise self.op.error(f"custom call '{self.handler.name}' failed: {message}", cls=Internal)
        return results
