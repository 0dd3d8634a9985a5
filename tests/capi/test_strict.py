"""Issue 5 item 6: strict mode (PJRT_REF_STRICT=1) checks how the caller uses the C API.

Each scenario drives the plugin through the cffi shim (`GetPjrtApi()`) in a
child process with the variable set, and checks the returned PJRT_Error and
the `pjrt_ref.strict` log line naming the entry point.
"""
from __future__ import annotations

from tests.support.jax_support import run_python

HARNESS = """
import numpy as np
from pjrt_ref.capi_shim import _pjrt_ref_shim as shim
ffi, lib = shim.ffi, shim.lib
api = lib.GetPjrtApi()
keep = []

def args(name, **fields):
    a = ffi.new(f"{name}_Args*")
    a.struct_size = fields.pop("struct_size", ffi.sizeof(f"{name}_Args"))
    for k, v in fields.items():
        setattr(a, k, v)
    return a

def raw(name, **fields):
    a = args(name, **fields)
    return getattr(api, name)(a), a

def error_text(error):
    code = args("PJRT_Error_GetCode", error=error)
    assert api.PJRT_Error_GetCode(code) == ffi.NULL
    msg = args("PJRT_Error_Message", error=error)
    api.PJRT_Error_Message(msg)
    text = ffi.string(msg.message, msg.message_size).decode()
    api.PJRT_Error_Destroy(args("PJRT_Error_Destroy", error=error))
    return code.code, text

def ok(name, **fields):
    error, a = raw(name, **fields)
    assert error == ffi.NULL, error_text(error)
    return a

def fails(name, code, *needles, **fields):
    error, _ = raw(name, **fields)
    assert error != ffi.NULL, f"{name} should have failed"
    c, text = error_text(error)
    assert c == code, (c, text)
    for needle in needles:
        assert needle in text, (needle, text)
    return text

INVALID, PRECONDITION = lib.PJRT_Error_Code_INVALID_ARGUMENT, lib.PJRT_Error_Code_FAILED_PRECONDITION
client = ok("PJRT_Client_Create").client

def host_buffer(values=(1.0, 2.0, 3.0, 4.0)):
    data = np.asarray(values, np.float32)
    dims = ffi.new("int64_t[]", [len(values)])
    keep.extend([data, dims])
    a = ok("PJRT_Client_BufferFromHostBuffer", client=client, data=ffi.cast("void*", data.ctypes.data),
           type=lib.PJRT_Buffer_Type_F32, dims=dims, num_dims=1,
           host_buffer_semantics=lib.PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
           device=device())
    if a.done_with_host_buffer != ffi.NULL:
        ok("PJRT_Event_Destroy", event=a.done_with_host_buffer)
    return a.buffer

def device():
    a = ok("PJRT_Client_AddressableDevices", client=client)
    return a.addressable_devices[0]

def to_host(buffer, **expect):
    out = ffi.new("float[4]")
    return raw("PJRT_Buffer_ToHostBuffer", src=buffer, dst=out, dst_size=16)

def destroy_client():
    ok("PJRT_Client_Destroy", client=client)
"""


def strict(code: str, **env):
    env.setdefault("PJRT_REF_STRICT", "1")
    return run_python(HARNESS + code, **env)


def test_struct_sizes_no_header_produces_are_errors():
    proc = strict("""
fails("PJRT_Client_PlatformName", INVALID, "unknown struct_size 0", client=client, struct_size=0)
fails("PJRT_Client_PlatformName", INVALID, "unknown struct_size 20", client=client, struct_size=20)
# An older header's size (ends on a field): accepted, outputs past it untouched, noted once.
older = ffi.offsetof("PJRT_Client_PlatformName_Args", "platform_name")
ok("PJRT_Client_PlatformName", client=client, struct_size=older)
# ... but an input the entry point needs lies past it: reported.
buffer = host_buffer()
fails("PJRT_Buffer_ToHostBuffer", INVALID, "too small to hold field",
      src=buffer, struct_size=ffi.offsetof("PJRT_Buffer_ToHostBuffer_Args", "host_layout"))
ok("PJRT_Buffer_Destroy", buffer=buffer)
destroy_client()
""")
    assert "pjrt-ref strict: PJRT_Client_PlatformName: unknown struct_size 0" in proc.stderr
    assert "PJRT_Client_PlatformName: struct_size 24 of struct PJRT_Client_PlatformName_Args: older" in proc.stderr
    assert "pjrt-ref strict: PJRT_Buffer_ToHostBuffer: " in proc.stderr


def test_jax_runs_clean_under_strict_mode():
    """JAX (an older pjrt_c_api.h than ours) uses the API correctly: no violation logged."""
    from tests.support.jax_support import run_jax
    proc = run_jax("""
        x = jnp.arange(8.0)
        y = jax.jit(lambda a: jnp.sin(a) * 2, donate_argnums=0)(x)
        assert x.is_deleted() and float(y.sum()) != 0
        print(float(jax.jit(lambda a: a @ a.T)(jnp.ones((4, 3))).sum()))
    """, PJRT_REF_STRICT="1")
    lines = [l for l in proc.stderr.splitlines() if l.startswith("pjrt-ref strict:")]
    assert all(": older (smaller) than" in l or "newer" in l for l in lines), lines


def test_null_foreign_and_wrong_kind_handles():
    proc = strict("""
fails("PJRT_Buffer_IsDeleted", INVALID, "NULL PJRT_Buffer where a value is required", buffer=ffi.NULL)
fails("PJRT_Buffer_IsDeleted", INVALID, "not a handle pjrt-ref issued",
      buffer=ffi.cast("PJRT_Buffer*", 0x1234))
fails("PJRT_Buffer_IsDeleted", INVALID, "is a PJRT_Client handle, passed where a PJRT_Buffer",
      buffer=ffi.cast("PJRT_Buffer*", client))
assert api.PJRT_Buffer_IsDeleted(ffi.NULL) != ffi.NULL        # NULL Args
destroy_client()
""")
    assert "PJRT_Buffer_IsDeleted: NULL PJRT_Buffer" in proc.stderr
    assert "PJRT_Buffer_IsDeleted: Args pointer is NULL" in proc.stderr


def test_double_destroy_and_use_after_destroy():
    proc = strict("""
buffer = host_buffer()
ok("PJRT_Buffer_Destroy", buffer=buffer)
fails("PJRT_Buffer_Destroy", INVALID, "double destroy of PJRT_Buffer", "already destroyed by PJRT_Buffer_Destroy",
      buffer=buffer)
fails("PJRT_Buffer_ElementType", INVALID, "use of destroyed PJRT_Buffer", buffer=buffer)
# An error destroyed twice: PJRT_Error_Destroy returns void, so it is logged only.
error, _ = raw("PJRT_Buffer_IsDeleted", buffer=ffi.NULL)
api.PJRT_Error_Destroy(args("PJRT_Error_Destroy", error=error))
api.PJRT_Error_Destroy(args("PJRT_Error_Destroy", error=error))
destroy_client()
""")
    assert "PJRT_Buffer_Destroy: double destroy of PJRT_Buffer" in proc.stderr
    assert "PJRT_Error_Destroy: double destroy of PJRT_Error" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_use_after_delete_and_after_donation():
    proc = strict("""
buffer = host_buffer()
ok("PJRT_Buffer_Delete", buffer=buffer)
error, _ = to_host(buffer)
c, text = error_text(error)
assert c == PRECONDITION and "after it was deleted by PJRT_Buffer_Delete" in text, text
ok("PJRT_Buffer_IsDeleted", buffer=buffer)                  # asking is fine
ok("PJRT_Buffer_Destroy", buffer=buffer)

src = b'''func.func @main(%x: tensor<4xf32> {jax.buffer_donor = true}) -> tensor<4xf32> {
  %0 = stablehlo.add %x, %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}'''
code, fmt = ffi.new("char[]", src), ffi.new("char[]", b"mlir")
program = ffi.new("PJRT_Program*", {"struct_size": ffi.sizeof("PJRT_Program"), "code": code,
                                    "code_size": len(src), "format": fmt, "format_size": 4})
program.struct_size = 3
fails("PJRT_Client_Compile", INVALID, "unknown struct_size 3 for struct PJRT_Program", client=client,
      program=program)
program.struct_size = ffi.sizeof("PJRT_Program")
exe = ok("PJRT_Client_Compile", client=client, program=program).executable
donated = host_buffer()
row = ffi.new("PJRT_Buffer*[1]", [donated]); lists = ffi.new("PJRT_Buffer**[1]", [row])
out = ffi.new("PJRT_Buffer*[1]"); outs = ffi.new("PJRT_Buffer**[1]", [out])
ok("PJRT_LoadedExecutable_Execute", executable=exe, argument_lists=lists, num_devices=1, num_args=1,
   output_lists=outs)
error, _ = to_host(donated)
c, text = error_text(error)
assert c == PRECONDITION and "donated to PJRT_LoadedExecutable_Execute" in text, text
fails("PJRT_LoadedExecutable_Execute", PRECONDITION, "donated", executable=exe, argument_lists=lists,
      num_devices=1, num_args=1, output_lists=outs)
for b in (donated, out[0]):
    ok("PJRT_Buffer_Destroy", buffer=b)
ok("PJRT_LoadedExecutable_Delete", executable=exe)
fresh = host_buffer(); row[0] = fresh
fails("PJRT_LoadedExecutable_Execute", PRECONDITION, "run after PJRT_LoadedExecutable_Delete", executable=exe,
      argument_lists=lists, num_devices=1, num_args=1, output_lists=outs)
ok("PJRT_Buffer_Destroy", buffer=fresh)
ok("PJRT_LoadedExecutable_Destroy", executable=exe)
destroy_client()
""")
    assert "PJRT_Buffer_ToHostBuffer: use of PJRT_Buffer after it was donated" in proc.stderr
    assert "leak report: nothing left alive" in proc.stderr


def test_external_references_misused():
    """Decreasing below zero is an error; destroying a buffer whose external
    references are still held is logged (the pointers they guarded go)."""
    proc = strict("""
buffer = host_buffer()
fails("PJRT_Buffer_DecreaseExternalReferenceCount", INVALID, "external reference count is already 0",
      buffer=buffer)
ok("PJRT_Buffer_IncreaseExternalReferenceCount", buffer=buffer)
ok("PJRT_Buffer_Delete", buffer=buffer)
fails("PJRT_Buffer_IncreaseExternalReferenceCount", PRECONDITION, "after it was deleted", buffer=buffer)
ok("PJRT_Buffer_Destroy", buffer=buffer)
fails("PJRT_Buffer_DecreaseExternalReferenceCount", INVALID, "use of destroyed PJRT_Buffer", buffer=buffer)
destroy_client()
""")
    assert "PJRT_Buffer_Destroy: PJRT_Buffer 0x" in proc.stderr
    assert "destroyed with 1 external reference(s) still held" in proc.stderr
    assert "leak report: nothing left alive" in proc.stderr


def test_leak_report_at_client_destroy():
    proc = strict("""
leaked = host_buffer()
event = ok("PJRT_Buffer_ReadyEvent", buffer=leaked).event
error, _ = raw("PJRT_Buffer_IsDeleted", buffer=ffi.NULL)   # never destroyed
destroy_client()
""")
    line = next(l for l in proc.stderr.splitlines() if "leak report" in l)
    assert "PJRT_Client_Destroy" in line
    for needle in ("1 PJRT_Buffer never destroyed", "1 PJRT_Event never destroyed",
                   "1 PJRT_Error never destroyed"):
        assert needle in line, line
    at_exit = next(l for l in proc.stderr.splitlines() if "at exit: leak report" in l)
    assert "1 PJRT_Error never destroyed; 1 PJRT_Event never destroyed" in at_exit
    assert "newer" not in proc.stderr            # sizeof(Args), tail padding included, is our size


def test_off_by_default():
    proc = strict("""
fails("PJRT_Buffer_IsDeleted", INVALID, "not a live PJRT_Buffer", buffer=ffi.cast("PJRT_Buffer*", 0x1234))
short = ffi.offsetof("PJRT_Client_PlatformName_Args", "platform_name_size")
error, a = raw("PJRT_Client_PlatformName", client=client, struct_size=short)
assert error == ffi.NULL
destroy_client()
""", PJRT_REF_STRICT="0")
    assert "strict" not in proc.stderr


def test_fuzzer_under_strict_mode_never_crashes_nor_accepts_misuse():
    """tests/scripts/fuzz_capi.py's random calls (NULL/stale/foreign handles, bad sizes) with strict mode on."""
    import subprocess
    import sys

    from tests.support.jax_support import clean_env
    from tests.support.repo_paths import SCRIPTS
    fuzzer = SCRIPTS / "fuzz_capi.py"
    proc = subprocess.run([sys.executable, str(fuzzer), "--seed", "7", "--calls", "1500"],
                          env=clean_env(PJRT_REF_STRICT="1"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "0 accepted misuses" in proc.stdout
    assert "pjrt-ref strict: " in proc.stderr and "Traceback" not in proc.stderr
