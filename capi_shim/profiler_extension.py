"""The C half of pjrt-ref's PJRT profiler extension, for build_shim.py.

`CDEF` is what cffi must know (the extension's types from
pjrt_profiler_extension.h, the five `extern "Python"` callbacks and the
error constructor Python calls); `C_SOURCE` is compiled into the shim after
the entry-point guards (`pjrt_ref_enter`, `PJRT_REF_ENTER`...) it reuses;
`EXTENSION_START` is the initializer of `PJRT_Api.extension_start`.

The five lifecycle functions enter Python like every PJRT slot (same guard:
no call into a finalizing interpreter, the host's pending exception parked
around the call) and land in `pjrt_ref/capi/profiler_extension.py`.
Errors are `PLUGIN_Profiler_Error`s, a small C allocation (code + message)
that the host reads and frees through the api's error_* functions without
entering Python.

To chain another extension after this one, point `pjrt_ref_profiler_extension
.base.next` at it.
"""
from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "pjrt_profiler_extension.h")

# (callback, Args type, what a call answers when Python may not be entered)
LIFECYCLE = (
    ("create", "PLUGIN_Profiler_Create_Args", "PJRT_REF_PROFILER_GONE"),
    ("destroy", "PLUGIN_Profiler_Destroy_Args", "NULL"),   # the process is exiting anyway
    ("start", "PLUGIN_Profiler_Start_Args", "PJRT_REF_PROFILER_GONE"),
    ("stop", "PLUGIN_Profiler_Stop_Args", "PJRT_REF_PROFILER_GONE"),
    ("collect_data", "PLUGIN_Profiler_CollectData_Args", "PJRT_REF_PROFILER_GONE"),
)

EXTENSION_START = "&pjrt_ref_profiler_extension.base"


def _header_declarations() -> str:
    with open(HEADER) as f:
        return "\n".join(line for line in f.read().splitlines() if not line.lstrip().startswith("#"))


def _callback(name: str, args_type: str) -> str:
    return f"PLUGIN_Profiler_Error* pjrt_ref_profiler_{name}({args_type}* args)"


CDEF = "\n".join([
    _header_declarations(),
    "PLUGIN_Profiler_Error* pjrt_ref_profiler_error_new(int code, const char* message, size_t size);",
    *(f'extern "Python" {_callback(name, args)};' for name, args, _ in LIFECYCLE),
])


def _slot(name: str, args_type: str, gone: str) -> str:
    return f"""
static PLUGIN_Profiler_Error* pjrt_ref_profiler_slot_{name}({args_type}* args) {{
    if (!pjrt_ref_enter()) return {gone};
    PJRT_REF_ENTER("PLUGIN_Profiler_{name}");
    PLUGIN_Profiler_Error* error = pjrt_ref_profiler_{name}(args);
    PJRT_REF_LEAVE;
    pjrt_ref_leave();
    return error;
}}"""


ERRORS_SOURCE = os.path.join(HERE, "profiler_errors.c")
_ERRORS = '#include "profiler_errors.c"'


def _tables() -> str:
    return """
static PLUGIN_Profiler_Api pjrt_ref_profiler_api = {
    .struct_size = offsetof(PLUGIN_Profiler_Api, collect_data) + sizeof(void*),
    .priv = NULL,
    .error_destroy = pjrt_ref_profiler_error_destroy,
    .error_message = pjrt_ref_profiler_error_message,
    .error_get_code = pjrt_ref_profiler_error_get_code,
""" + "".join(f"    .{name} = pjrt_ref_profiler_slot_{name},\n" for name, _, _ in LIFECYCLE) + """};

static PJRT_Profiler_Extension pjrt_ref_profiler_extension = {
    .base = {
        .struct_size = sizeof(PJRT_Profiler_Extension),
        .type = PJRT_Extension_Type_Profiler,
        .next = NULL,
    },
    .profiler_api = &pjrt_ref_profiler_api,
    .traceme_context_id = 0,
};
"""


C_SOURCE = "\n".join([
    _ERRORS,
    *(f"static {_callback(name, args)};" for name, args, _ in LIFECYCLE),
    *(_slot(name, args, gone) for name, args, gone in LIFECYCLE),
    _tables(),
])

DEPENDS = [HEADER, ERRORS_SOURCE, os.path.abspath(__file__)]
