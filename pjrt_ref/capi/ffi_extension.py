"""The PJRT FFI extension (capi_shim/pjrt_ffi_extension.h): how a host hands
pjrt-ref the XLA FFI handlers registered for its platform.

    register_handler   add a typed XLA FFI handler to the table the
                       interpreter's custom calls look in
                       (interpreter/ffi/targets.py)
    type_register      give a user type name an id (XLA_FFI_Type_Register's
                       registry, shared with handlers: interpreter/ffi)
    user_data_add      attach user data to a PJRT_ExecuteContext; an
                       execution given that context hands it to handlers
                       (XLA_FFI_ExecutionContext_Get)

jaxlib calls register_handler for XLA's GPU plugins when a user registers
a target for their platform; pjrt-ref's JAX hook does the same for
"pjrt_ref" (pjrt_ref/frameworks/jax/ffi.py).
"""
from __future__ import annotations

import functools

from pjrt_ref.errors import InvalidArgument
from pjrt_ref.interpreter.ffi import context as ffi_context
from pjrt_ref.interpreter.ffi import targets
from pjrt_ref.interpreter.ffi.bridge import bridge
from pjrt_ref.capi import handles
from pjrt_ref.capi import cdata
from pjrt_ref.capi._boundary import entry_point
from pjrt_ref.capi.cdata import Args, text_arg


class ExecuteContext:
    """PJRT_ExecuteContext: the user data FFI handlers of one execution see,
    (type_id, data address) per user_data_add. The data stays the caller's."""

    def __init__(self) -> None:
        self.user_data: list[tuple[int, int]] = []

    def execution_info(self, launch_id: int) -> ffi_context.ExecutionInfo:
        return ffi_context.ExecutionInfo(run_id=launch_id, user_data=tuple(self.user_data))

    def destroy(self) -> None:
        self.user_data.clear()


def attached_ffi_context(options):
    """A context in which FFI handlers see the user data of `options.context`
    (a PJRT_ExecuteContext), or None when there is none to attach: most
    executions, which then pay one field read and enter no context."""
    if options == cdata.NULL or options.struct_size < _context_end():
        return None
    context = options.context
    if context == cdata.NULL:
        return None
    execute_context = handles.get(context, ExecuteContext, "PJRT_ExecuteContext")
    return ffi_context.attach(execute_context.execution_info(options.launch_id))


@functools.cache
def _context_end() -> int:
    return cdata.ffi.offsetof("PJRT_ExecuteOptions", "context") + cdata.ffi.sizeof("void*")


@entry_point("PJRT_FFI_Register_Handler")
def register_handler(args: Args) -> None:
    """PJRT_FFI_Register_Handler: the typed XLA FFI handler `handler` (an
    XLA_FFI_Handler*) serves custom call `target_name` on `platform_name`,
    which must be pjrt_ref's."""
    name = text_arg(args.target_name, args.target_name_size, "target_name")
    platform = text_arg(args.platform_name, args.platform_name_size, "platform_name")
    address = int(cdata.ffi.cast("uintptr_t", args.handler))
    targets.register(name, address, platform=platform, api_version=targets.TYPED_FFI,
                     traits=int(args.get("traits", 0)))


@entry_point("PJRT_FFI_Type_Register")
def type_register(args: Args) -> None:
    """PJRT_FFI_Type_Register: the id of `type_name` (a new one for type_id 0);
    `type_info`'s deleter frees a handler's state of that type."""
    name = cdata.bytes_arg(args.type_name, args.type_name_size, "type_name")
    type_info = args.get("type_info", cdata.NULL)
    module = bridge()
    deleter = module.ffi.NULL if type_info == cdata.NULL else module.ffi.cast("void(*)(void*)",
                                                                                type_info.deleter)
    type_id = module.ffi.new("int64_t*", args.type_id)
    error = module.lib.pjrt_ref_ffi_type_register(name, len(name), type_id, deleter)
    if error != module.ffi.NULL:
        message = module.ffi.string(module.lib.pjrt_ref_ffi_error_message(error)).decode()
        module.lib.pjrt_ref_ffi_error_destroy(error)
        raise InvalidArgument(f"PJRT_FFI_Type_Register: {message}")
    args.type_id = type_id[0]


@entry_point("PJRT_FFI_UserData_Add")
def user_data_add(args: Args) -> None:
    """PJRT_FFI_UserData_Add: attach `user_data` to `context`."""
    context = handles.get(args.context, ExecuteContext, "PJRT_ExecuteContext")
    user_data = args.user_data
    context.user_data.append((int(user_data.type_id), int(cdata.ffi.cast("uintptr_t", user_data.data)),
                              user_data.deleter))
