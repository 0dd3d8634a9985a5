"""Our PJRT C API declaration against pypjrt's layout-checked 0.114 description.

Every struct we declare must have pypjrt's size and, field by field, its
offsets; the PJRT_Api slot order and enum values must match too. Then the
live table: every slot filled and implemented (the stub for a slot without
an implementation still answers UNIMPLEMENTED by name).
"""
from __future__ import annotations

import ctypes

import pytest

from pjrt_ref.capi_shim import entry_points
from pjrt_ref.capi_shim._pjrt_ref_shim import ffi, lib
from pjrt_ref.model.dtypes import BufferType
from pjrt_ref.errors import ErrorCode

abi = pytest.importorskip("pypjrt._abi.pjrt_0_114")


def _pypjrt_structs() -> dict[str, type]:
    return {name: cls for name, cls in vars(abi).items()
            if isinstance(cls, type) and issubclass(cls, (ctypes.Structure, ctypes.Union))
            and name.startswith("PJRT_")}


def _declared(name: str):
    try:
        ctype = ffi.typeof(name)
        ffi.sizeof(ctype)            # opaque (forward-declared) structs raise here
        return ctype
    except (ffi.error, TypeError):
        return None


def _our_structs() -> dict[str, object]:
    structs = {}
    for name in _pypjrt_structs():
        ctype = _declared(name)
        if ctype is not None:
            structs[name] = ctype
    return structs


def test_version_matches_pypjrt():
    assert (entry_points.API_MAJOR, entry_points.API_MINOR) == (abi.PJRT_API_MAJOR, abi.PJRT_API_MINOR)


def test_we_declare_the_structs_we_use():
    assert len(_our_structs()) >= 100


@pytest.mark.parametrize("name", sorted(_our_structs()))
def test_struct_layout(name):
    theirs = _pypjrt_structs()[name]
    ours = ffi.typeof(name)
    assert ffi.sizeof(ours) == ctypes.sizeof(theirs), f"sizeof({name})"
    our_fields = {field: info.offset for field, info in ours.fields if field}
    their_fields = [(field, getattr(theirs, field).offset) for field, *_ in theirs._fields_
                    if not field.startswith("_")]
    for field, offset in their_fields:
        assert field in our_fields, f"{name}.{field} missing from our declaration"
        assert our_fields[field] == offset, f"offsetof({name}, {field})"
    assert len([f for f in our_fields if f in dict(their_fields)]) == len(their_fields)


def test_api_struct_and_slot_order():
    assert list(entry_points.SLOTS) == list(abi.SLOT), "slot order differs from pypjrt"
    assert ffi.sizeof("PJRT_Api") == abi.PJRT_Api_STRUCT_SIZE
    for slot, index in abi.SLOT.items():
        assert ffi.offsetof("PJRT_Api", slot) == abi.VTABLE_OFFSET + 8 * index, slot


def test_enum_values():
    checked = 0
    for name, value in vars(abi).items():
        if name.startswith(("PJRT_Buffer_Type_", "PJRT_Error_Code_", "PJRT_NamedValue_k",
                            "PJRT_HostBufferSemantics_", "PJRT_Extension_Type_",
                            "PJRT_Buffer_MemoryLayout_Type_")) and isinstance(value, int):
            if hasattr(lib, name):
                assert getattr(lib, name) == value, name
                checked += 1
    assert checked > 60
    for member in BufferType:
        assert getattr(lib, f"PJRT_Buffer_Type_{member.name}") == member.value
    for member in ErrorCode:
        assert getattr(lib, f"PJRT_Error_Code_{member.name}") == member.value


def _error_text(api, error) -> tuple[int, str]:
    code = ffi.new("PJRT_Error_GetCode_Args*", {"struct_size": ffi.sizeof("PJRT_Error_GetCode_Args"),
                                                "error": error})
    assert api.PJRT_Error_GetCode(code) == ffi.NULL
    message = ffi.new("PJRT_Error_Message_Args*", {"struct_size": ffi.sizeof("PJRT_Error_Message_Args"),
                                                   "error": error})
    api.PJRT_Error_Message(message)
    text = ffi.string(message.message, message.message_size).decode()
    destroy = ffi.new("PJRT_Error_Destroy_Args*", {"struct_size": ffi.sizeof("PJRT_Error_Destroy_Args"),
                                                   "error": error})
    api.PJRT_Error_Destroy(destroy)
    return code.code, text


def test_every_slot_filled_and_implemented():
    api = lib.GetPjrtApi()
    assert api != ffi.NULL
    assert api.struct_size == ffi.sizeof("PJRT_Api")
    assert (api.pjrt_api_version.major_version, api.pjrt_api_version.minor_version) == (0, 114)
    for slot in entry_points.SLOTS:
        assert getattr(api, slot) != ffi.NULL, slot
    from pjrt_ref import capi
    assert [slot for slot in entry_points.SLOTS if slot not in set(capi.implemented())] == []
    # every Args struct of the table is declared (none is left to build_shim.py's forward declaration)
    assert [slot for slot in entry_points.SLOTS if _declared(entry_points.args_type(slot)) is None] == []


def test_the_unimplemented_stub_names_its_entry_point():
    """No slot uses it at 0.114, but a slot appended to the table before its
    implementation answers this (pjrt_ref/capi/__init__.py `install`)."""
    from pjrt_ref.capi import _boundary
    api = lib.GetPjrtApi()
    stub = _boundary.unimplemented_callback("PJRT_Some_Future_EntryPoint")
    error = ffi.cast("PJRT_Error*", stub(ffi.NULL))
    code, text = _error_text(api, error)
    assert code == lib.PJRT_Error_Code_UNIMPLEMENTED
    assert "PJRT_Some_Future_EntryPoint" in text


def test_stale_handle_is_an_error_not_a_crash():
    api = lib.GetPjrtApi()
    args = ffi.new("PJRT_Buffer_IsDeleted_Args*", {"struct_size": ffi.sizeof("PJRT_Buffer_IsDeleted_Args"),
                                                   "buffer": ffi.cast("PJRT_Buffer*", 0x1234)})
    code, text = _error_text(api, api.PJRT_Buffer_IsDeleted(args))
    assert code == lib.PJRT_Error_Code_INVALID_ARGUMENT
    assert "not a live PJRT_Buffer" in text


def test_short_struct_size_is_respected():
    """An older caller's smaller struct: we neither read nor write past struct_size."""
    api = lib.GetPjrtApi()
    create = ffi.new("PJRT_Client_Create_Args*", {"struct_size": ffi.sizeof("PJRT_Client_Create_Args")})
    assert api.PJRT_Client_Create(create) == ffi.NULL
    args = ffi.new("PJRT_Client_PlatformName_Args*")
    args.struct_size = ffi.offsetof("PJRT_Client_PlatformName_Args", "platform_name_size")
    args.client = create.client
    args.platform_name_size = 12345              # beyond the caller's struct: must stay untouched
    assert api.PJRT_Client_PlatformName(args) == ffi.NULL
    assert ffi.string(args.platform_name, 8) == b"pjrt_ref"
    assert args.platform_name_size == 12345
    destroy = ffi.new("PJRT_Client_Destroy_Args*", {"struct_size": ffi.sizeof("PJRT_Client_Destroy_Args"),
                                                    "client": create.client})
    assert api.PJRT_Client_Destroy(destroy) == ffi.NULL


def test_hlo_program_that_is_no_module_is_invalid_argument():
    # "hlo" programs are converted to StableHLO (pjrt_ref/model/program_formats.py,
    # tests/model/test_program_formats.py); these two bytes hold no entry computation.
    api = lib.GetPjrtApi()
    create = ffi.new("PJRT_Client_Create_Args*", {"struct_size": ffi.sizeof("PJRT_Client_Create_Args")})
    assert api.PJRT_Client_Create(create) == ffi.NULL
    code = ffi.new("char[]", b"\x08\x01")
    fmt = ffi.new("char[]", b"hlo")
    program = ffi.new("PJRT_Program*", {"struct_size": ffi.sizeof("PJRT_Program"), "code": code,
                                        "code_size": 2, "format": fmt, "format_size": 3})
    compile_args = ffi.new("PJRT_Client_Compile_Args*", {
        "struct_size": ffi.sizeof("PJRT_Client_Compile_Args"), "client": create.client, "program": program})
    code_, text = _error_text(api, api.PJRT_Client_Compile(compile_args))
    assert code_ == lib.PJRT_Error_Code_INVALID_ARGUMENT and "'hlo'" in text and "HloModuleProto" in text
    destroy = ffi.new("PJRT_Client_Destroy_Args*", {"struct_size": ffi.sizeof("PJRT_Client_Destroy_Args"),
                                                    "client": create.client})
    assert api.PJRT_Client_Destroy(destroy) == ffi.NULL


def test_get_pjrt_api_from_threads_without_the_gil():
    """First call races from 8 threads (ctypes drops the GIL): one init, one table."""
    from tests.support.jax_support import run_python
    run_python("""
        import ctypes, threading
        import pjrt_ref
        lib = ctypes.CDLL(pjrt_ref.library_path(), mode=ctypes.RTLD_LOCAL)
        lib.GetPjrtApi.restype = ctypes.c_void_p
        results, barrier = [], threading.Barrier(8)
        def call():
            barrier.wait()
            results.append(lib.GetPjrtApi())
        threads = [threading.Thread(target=call) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join(60)
        assert len(results) == 8 and len(set(results)) == 1 and results[0], results
    """)
