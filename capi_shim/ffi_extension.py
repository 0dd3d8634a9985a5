"""The C half of pjrt-ref's PJRT FFI extension, for build_shim.py.

Its three functions are PJRT entry points like the Layouts and Shardings
extensions' (an Args struct, a `PJRT_Error*`, the same guarded wrapper,
`build_shim.slot_wrapper`), implemented in pjrt_ref/capi/ffi_extension.py;
entry_points.py lists them (`FFI_FUNCTIONS`). `table(next_start)` is the C
for the extension struct, pointing at `next_start`; `START` is what
`PJRT_Api.extension_start` then points at.
"""
from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "pjrt_ffi_extension.h")

START = "&pjrt_ref_ffi_extension.base"

# struct field -> entry point (pjrt_ffi_extension.h's PJRT_FFI_Extension)
FIELDS = {
    "type_register": "PJRT_FFI_Type_Register",
    "user_data_add": "PJRT_FFI_UserData_Add",
    "register_handler": "PJRT_FFI_Register_Handler",
}


def header_declarations() -> str:
    with open(HEADER) as f:
        return "\n".join(line for line in f.read().splitlines() if not line.lstrip().startswith("#"))


def table(next_start: str) -> str:
    fields = "".join(f"    .{field} = pjrt_ref_slot_{name},\n" for field, name in FIELDS.items())
    return f"""
static PJRT_FFI_Extension pjrt_ref_ffi_extension = {{
    .base = {{
        .struct_size = sizeof(PJRT_FFI_Extension),
        .type = PJRT_Extension_Type_FFI,
        .next = (PJRT_Extension_Base*){next_start},
    }},
{fields}}};
"""


DEPENDS = [HEADER, os.path.abspath(__file__)]
