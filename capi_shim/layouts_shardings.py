"""The C half of pjrt-ref's Layouts and Shardings extensions, for build_shim.py.

Their functions are PJRT entry points like the `PJRT_Api` slots: each has
an Args struct (pjrt_layouts_shardings.h), returns a `PJRT_Error*`, enters
Python through the same guarded wrapper (`build_shim.slot_wrapper`) and is
implemented in pjrt_ref/capi/layouts_extension.py and
shardings_extension.py. Only where the host finds them differs: in two
structs on the `PJRT_Api.extension_start` chain instead of the table.

Their names, in struct order, are in entry_points.py (`LAYOUTS_FUNCTIONS`,
`SHARDINGS_FUNCTIONS`). `tables(next_start, layouts, shardings)` is the C
for the two structs, the Shardings one pointing at `next_start` (the
next extension on the chain: build_shim.py says which); `START` is what `PJRT_Api.extension_start` then
points at.
"""
from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "pjrt_layouts_shardings.h")

START = "&pjrt_ref_layouts_extension.base"

# The deleter MemoryLayout_Serialize hands out: a serialized layout is the
# layout's own bytes, which live as long as the process (layouts_extension.py).
KEEP_SERIALIZED_LAYOUT = """
void pjrt_ref_keep_serialized_layout(PJRT_Layouts_SerializedLayout* serialized) { (void)serialized; }
"""
HELPERS_CDEF = "void pjrt_ref_keep_serialized_layout(PJRT_Layouts_SerializedLayout* serialized);"


def header_declarations() -> str:
    with open(HEADER) as f:
        return "\n".join(line for line in f.read().splitlines() if not line.lstrip().startswith("#"))


def _struct(variable: str, struct: str, type_name: str, functions: tuple, next_start: str) -> str:
    fields = "".join(f"    .{name} = pjrt_ref_slot_{name},\n" for name in functions)
    return f"""
static {struct} {variable} = {{
    .base = {{
        .struct_size = sizeof({struct}),
        .type = {type_name},
        .next = (PJRT_Extension_Base*){next_start},
    }},
{fields}}};
"""


def tables(next_start: str, layouts: tuple, shardings: tuple) -> str:
    """The Layouts struct (functions `layouts`), then the Shardings struct it
    points to (`shardings`), which points to `next_start`."""
    return (KEEP_SERIALIZED_LAYOUT
            + _struct("pjrt_ref_shardings_extension", "PJRT_Shardings_Extension",
                      "PJRT_Extension_Type_Shardings", shardings, next_start)
            + _struct("pjrt_ref_layouts_extension", "PJRT_Layouts_Extension",
                      "PJRT_Extension_Type_Layouts", layouts, "&pjrt_ref_shardings_extension.base"))


DEPENDS = [HEADER, os.path.abspath(__file__)]
