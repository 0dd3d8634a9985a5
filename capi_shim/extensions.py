"""The C half of the extensions pjrt-ref chains on `PJRT_Api.extension_start`, for build_shim.py.

An extension is a struct that starts with a `PJRT_Extension_Base` (size,
type, the next extension) and holds function pointers. pjrt-ref's
functions there are PJRT entry points like the table's slots: an Args
struct, a `PJRT_Error*`, the same guarded wrapper into Python
(`build_shim.slot_wrapper`), one Python function each in pjrt_ref/capi/
(`<name>_extension.py`). entry_points.py lists their names; `Extension`
says which struct field each fills, and `CHAIN` the order a host walks
them in. The profiler extension (profiler_extension.py) is different (its
functions are the profiler's own) and ends the chain.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from entry_points import (CUSTOM_PARTITIONER_FUNCTIONS, FFI_FUNCTIONS, LAYOUTS_FUNCTIONS,
                          MEMORY_DESCRIPTIONS_FUNCTIONS, SHARDINGS_FUNCTIONS)

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Extension:
    struct: str                   # the C struct, as its header names it
    type_name: str                # its PJRT_Extension_Type
    header: str                   # the header declaring it, in this folder
    fields: tuple                 # (struct field, entry point) in struct order

    @property
    def variable(self) -> str:
        return "pjrt_ref_" + self.type_name.removeprefix("PJRT_Extension_Type_").lower() + "_extension"

    @property
    def start(self) -> str:
        """What points at this extension in the chain."""
        return f"&{self.variable}.base"

    def table(self, next_start: str) -> str:
        """The static struct, pointing at `next_start`."""
        fields = "".join(f"    .{field} = pjrt_ref_slot_{name},\n" for field, name in self.fields)
        return f"""
static {self.struct} {self.variable} = {{
    .base = {{
        .struct_size = sizeof({self.struct}),
        .type = {self.type_name},
        .next = (PJRT_Extension_Base*){next_start},
    }},
{fields}}};
"""


def _same_names(functions: tuple) -> tuple:
    """Fields named after their entry points."""
    return tuple((name, name) for name in functions)


FFI = Extension("PJRT_FFI_Extension", "PJRT_Extension_Type_FFI", "pjrt_ffi_extension.h",
                tuple(zip(("type_register", "user_data_add", "register_handler"), FFI_FUNCTIONS)))
LAYOUTS = Extension("PJRT_Layouts_Extension", "PJRT_Extension_Type_Layouts",
                    "pjrt_layouts_shardings.h", _same_names(LAYOUTS_FUNCTIONS))
SHARDINGS = Extension("PJRT_Shardings_Extension", "PJRT_Extension_Type_Shardings",
                      "pjrt_layouts_shardings.h", _same_names(SHARDINGS_FUNCTIONS))
MEMORY_DESCRIPTIONS = Extension("PJRT_MemoryDescriptions_Extension",
                                "PJRT_Extension_Type_MemoryDescriptions",
                                "pjrt_memory_descriptions.h", _same_names(MEMORY_DESCRIPTIONS_FUNCTIONS))
CUSTOM_PARTITIONER = Extension(
    "PJRT_Custom_Partitioner_Extension", "PJRT_Extension_Type_Custom_Partitioner",
    "pjrt_custom_partitioner.h",
    tuple(zip(("register_custom_partitioner", "register_batch_partitionable"),
              CUSTOM_PARTITIONER_FUNCTIONS)))

# The order a host finds them in, the profiler's after the last.
CHAIN = (FFI, LAYOUTS, SHARDINGS, MEMORY_DESCRIPTIONS, CUSTOM_PARTITIONER)
HEADERS = tuple(dict.fromkeys(extension.header for extension in CHAIN))


def chain(last_next: str) -> str:
    """The C for every extension of CHAIN, each pointing at the next, the last at `last_next`;
    defined last to first, so each points at one already defined."""
    nexts = [e.start for e in CHAIN[1:]] + [last_next]
    return "".join(e.table(n) for e, n in reversed(list(zip(CHAIN, nexts))))


def header_declarations() -> str:
    """The headers without preprocessor lines (what cffi's cdef parser takes)."""
    lines = []
    for header in HEADERS:
        with open(os.path.join(HERE, header)) as f:
            lines += [line for line in f.read().splitlines() if not line.lstrip().startswith("#")]
    return "\n".join(lines)


DEPENDS = [os.path.join(HERE, header) for header in HEADERS] + [os.path.abspath(__file__)]
