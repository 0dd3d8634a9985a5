"""The PJRT FFI extension (capi_shim/pjrt_ffi_extension.h) driven from C as a
host would: registrations a plugin cannot serve are clear errors, never
crashes, and type ids follow XLA_FFI_Type_Register's rule. (Its struct
layouts are checked against pypjrt in test_capi_abi.py; handlers running
under JAX are tests/frameworks/test_jax_ffi.py's.)
"""
from __future__ import annotations

import pytest

from tests.support.capi_calls import Api, PjrtCallError, extension
from pjrt_ref.capi_shim._pjrt_ref_shim import ffi, lib
from pjrt_ref.errors import ErrorCode


def _extension():
    return extension(lib.PJRT_Extension_Type_FFI, "PJRT_FFI_Extension")


def call(field: str, args_type: str, **fields):
    """Call the extension's `field` with fresh Args; its error as PjrtCallError."""
    keep = []
    args = ffi.new(f"{args_type}*")
    args.struct_size = ffi.sizeof(args_type)
    for name, value in fields.items():
        if isinstance(value, bytes):
            keep.append(ffi.new("char[]", value))
            setattr(args, name, keep[-1])
            setattr(args, name + "_size", len(value))
        else:
            setattr(args, name, value)
    error = getattr(_extension(), field)(args)
    if error != ffi.NULL:
        raise PjrtCallError(field, *Api().take_error(error))
    return args


def register(target: bytes, platform: bytes, handler):
    return call("register_handler", "PJRT_FFI_Register_Handler_Args", target_name=target,
                platform_name=platform, handler=handler)


def test_another_platform_is_refused_naming_the_target_and_the_way():
    with pytest.raises(PjrtCallError) as caught:
        register(b"axpb", b"cpu", ffi.cast("void*", lib.GetPjrtApi))
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    assert "'axpb'" in caught.value.message and 'platform="pjrt_ref"' in caught.value.message


@pytest.mark.parametrize("handler", [0, 1, 0x1234])
def test_a_handler_that_is_not_code_is_refused(handler):
    with pytest.raises(PjrtCallError) as caught:
        register(b"bad", b"pjrt_ref", ffi.cast("void*", handler))
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    assert "not a function of any loaded library" in caught.value.message


def test_type_ids():
    first = call("type_register", "PJRT_FFI_Type_Register_Args", type_name=b"test.State", type_id=0)
    assert first.type_id > 0
    again = call("type_register", "PJRT_FFI_Type_Register_Args", type_name=b"test.State", type_id=0)
    assert again.type_id == first.type_id
    with pytest.raises(PjrtCallError) as caught:
        call("type_register", "PJRT_FFI_Type_Register_Args", type_name=b"test.State",
             type_id=first.type_id + 1000)
    assert "test.State" in caught.value.message


def test_user_data_on_a_bad_context_is_refused():
    with pytest.raises(PjrtCallError) as caught:
        call("user_data_add", "PJRT_FFI_UserData_Add_Args", context=ffi.cast("PJRT_ExecuteContext*", 8))
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
