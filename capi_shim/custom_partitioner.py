"""The C half of pjrt-ref's Custom Partitioner extension, for build_shim.py.

Its two functions are PJRT entry points like the table's slots: Args struct
(pjrt_custom_partitioner.h), `PJRT_Error*` result, the same guarded wrapper
into Python (`build_shim.slot_wrapper`), implemented in
pjrt_ref/capi/custom_partitioner_extension.py. The host finds them in a
struct on the `PJRT_Api.extension_start` chain; `table(next_start)` is the
C for it, pointing at `next_start`, and `START` what points at it.
"""
from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "pjrt_custom_partitioner.h")

START = "&pjrt_ref_custom_partitioner_extension.base"
# The extension struct's fields, in order, and the entry point behind each
# (entry_points.py, CUSTOM_PARTITIONER_FUNCTIONS).
FIELDS = {
    "register_custom_partitioner": "PJRT_Register_Custom_Partitioner",
    "register_batch_partitionable": "PJRT_Register_Batch_Partitionable",
}


def header_declarations() -> str:
    with open(HEADER) as f:
        return "\n".join(line for line in f.read().splitlines() if not line.lstrip().startswith("#"))


def table(next_start: str) -> str:
    fields = "".join(f"    .{field} = pjrt_ref_slot_{name},\n" for field, name in FIELDS.items())
    return f"""
static PJRT_Custom_Partitioner_Extension pjrt_ref_custom_partitioner_extension = {{
    .base = {{
        .struct_size = sizeof(PJRT_Custom_Partitioner_Extension),
        .type = PJRT_Extension_Type_Custom_Partitioner,
        .next = (PJRT_Extension_Base*){next_start},
    }},
{fields}}};
"""


DEPENDS = [HEADER, os.path.abspath(__file__)]
