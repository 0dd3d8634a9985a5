"""Fuzz pjrt-ref's PJRT C API in-process: random entry points, random/NULL/stale/foreign handles,
wrong struct sizes. Usage: python tests/scripts/fuzz_capi.py [--seed S] [--calls N] [--verbose]

Every call goes through the real `PJRT_Api` table (the shim's C slots and
the Python boundary), exactly as a C host would make it. The oracle:

* the process never crashes (run it in a child process; a segfault or abort
  is the finding);
* every call either succeeds or returns a `PJRT_Error*` whose code is a
  valid `PJRT_Error_Code` and whose message can be read and destroyed;
* misuse is an error: a NULL, stale (destroyed) or foreign pointer in the
  entry point's own handle field (`PJRT_Buffer_*` -> its first
  `PJRT_Buffer*` field, ...), or a `struct_size` too small to hold that
  field, must not succeed. Violations are printed as "ACCEPTED MISUSE" and
  counted; the exit status is 1 if there are any.

What is *not* fuzzed, because the C API lets a plugin trust it (pjrt_c_api.h:
the caller owns and sizes every pointer it passes): non-NULL data pointers
that do not point at as many bytes as the caller's sizes say, and garbage
function pointers. Data pointers here are NULL or point at zeroed scratch
memory larger than any size the fuzzer passes; function pointers are NULL
or a real callback that returns 0/NULL.
"""
from __future__ import annotations

import argparse
import random
import sys

import numpy as np

from pjrt_ref.capi import handles as handle_table
from pjrt_ref.capi_shim import entry_points
from pjrt_ref.capi_shim._pjrt_ref_shim import ffi, lib

SCRATCH_BYTES = 4096
VALID_CODES = set(range(1, 17))
INTERNAL = 13
ADD = b"""func.func @main(%x: tensor<2xf32>, %y: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.add %x, %y : tensor<2xf32>
  return %0 : tensor<2xf32>
}"""
# Entry points the fuzzer leaves out, and why.
SKIP = {
    "PJRT_Error_Destroy", "PJRT_Error_Message", "PJRT_Error_GetCode",  # used by the oracle on real errors
    "PJRT_Event_Await",        # a pending event made by Event_Create would wait forever: by design
}


def _opaque_kind(ctype) -> str | None:
    """'PJRT_Buffer' for `struct PJRT_Buffer *` when PJRT_Buffer is opaque (a handle), else None."""
    if ctype.kind != "pointer" or ctype.item.kind != "struct":
        return None
    try:
        ffi.sizeof(ctype.item)
        return None
    except ffi.error:
        return ctype.item.cname.replace("struct ", "")


class Fuzzer:
    def __init__(self, seed: int, verbose: bool = False, misuse: float = 0.4) -> None:
        self.rng = random.Random(seed)
        self.misuse = misuse                      # chance of a bad handle or struct_size per field
        self.api = lib.GetPjrtApi()
        self.verbose = verbose
        self.keep: list = []                      # C memory the plugin may still point at
        self.live: dict[str, list] = {}           # kind -> live handles
        self.stale: list = []                     # destroyed handles
        self.foreign = [ffi.cast("void*", 0x1234), ffi.cast("void*", 0xdeadbeef)]
        self.misuse_accepted: list[str] = []
        self.calls = self.errors = 0
        self.internal: list[str] = []             # INTERNAL errors: reported, not fatal
        self.callbacks = 0                        # calls the plugin made to our function pointers
        self.slots = [s for s in entry_points.SLOTS if s not in SKIP]
        self._seed_objects()

    # -- a few real objects to start from -------------------------------------
    def _seed_objects(self) -> None:
        client = self._call_ok("PJRT_Client_Create").client
        self._add("PJRT_Client", client)
        if len(self.foreign) < 3:
            self.foreign.append(ffi.new("char[64]"))   # real memory, but not a handle
            self.keep.append(self.foreign[-1])
        for _ in range(2):
            self._make_buffer(client)
        code, fmt = ffi.new("char[]", ADD), ffi.new("char[]", b"mlir")
        program = ffi.new("PJRT_Program*", {"struct_size": ffi.sizeof("PJRT_Program"), "code": code,
                                            "code_size": len(ADD), "format": fmt, "format_size": 4})
        self.keep += [code, fmt, program]
        self.program = program
        loaded = self._call_ok("PJRT_Client_Compile", client=client, program=program).executable
        self._add("PJRT_LoadedExecutable", loaded)
        exe = self._call_ok("PJRT_LoadedExecutable_GetExecutable", loaded_executable=loaded).executable
        self._add("PJRT_Executable", exe)
        self._add("PJRT_Event", self._call_ok("PJRT_Event_Create").event)
        for name, field, kind in (("PJRT_Client_AddressableDevices", "addressable_devices", "PJRT_Device"),
                                  ("PJRT_Client_AddressableMemories", "addressable_memories", "PJRT_Memory")):
            args = self._call_ok(name, client=client)
            self._add(kind, getattr(args, field)[0])
        device = self.live["PJRT_Device"][-1]
        self._add("PJRT_DeviceDescription", self._call_ok("PJRT_Device_GetDescription", device=device).device_description)
        self._add("PJRT_TopologyDescription", self._call_ok("PJRT_Client_TopologyDescription", client=client).topology)

    def _make_buffer(self, client) -> None:
        data = np.arange(2, dtype=np.float32)
        dims = ffi.new("int64_t[]", [2])
        self.keep += [data, dims]
        args = self._call_ok("PJRT_Client_BufferFromHostBuffer", client=client, data=ffi.cast("void*", data.ctypes.data),
                             type=lib.PJRT_Buffer_Type_F32, dims=dims, num_dims=1,
                             host_buffer_semantics=lib.PJRT_HostBufferSemantics_kImmutableOnlyDuringCall)
        self._add("PJRT_Buffer", args.buffer)
        self._add("PJRT_Event", args.done_with_host_buffer)

    def _call_ok(self, name: str, **fields):
        args = ffi.new(f"{name}_Args*")
        args.struct_size = ffi.sizeof(f"{name}_Args")
        for key, value in fields.items():
            setattr(args, key, value)
        error = getattr(self.api, name)(args)
        if error != ffi.NULL:
            raise RuntimeError(f"setup call {name} failed: {self._read_error(error)}")
        return args

    def _add(self, kind: str, handle) -> None:
        if handle != ffi.NULL:
            handle = ffi.cast("void*", handle)
            self.live.setdefault(kind, []).append(handle)
            self.stale = [h for h in self.stale if h != handle]   # its address was reused

    # -- random values ----------------------------------------------------------
    def handle(self, kind: str | None):
        """A handle for a field of `kind`: usually a live one of that kind, else any misuse."""
        if self.rng.random() >= self.misuse and self.live.get(kind):
            return self.rng.choice(self.live[kind]), "live"
        roll = self.rng.random() * 0.4 + 0.6
        if roll < 0.7:
            return ffi.NULL, "null"
        if roll < 0.8 and self.stale:
            return self.rng.choice(self.stale), "stale"
        if roll < 0.9:
            return self.rng.choice(self.foreign), "foreign"
        others = [h for other, handles in self.live.items() if other != kind for h in handles]
        return (self.rng.choice(others), "other-kind") if others else (ffi.NULL, "null")

    def scratch(self, ctype):
        """NULL or zeroed scratch memory for a data pointer; arrays of handles for `T**`, `T***`."""
        if self.rng.random() < 0.25:
            return ffi.NULL
        if ctype.item.kind == "pointer":
            inner = ctype.item
            if inner.item.kind == "pointer":                       # T*** (argument_lists)
                rows = [self.scratch(inner) for _ in range(8)]
                array = ffi.new(f"{inner.cname}[8]", [ffi.cast(inner, r) for r in rows])
            elif _opaque_kind(inner):                              # T** (an array of handles)
                kind = _opaque_kind(inner)
                array = ffi.new(f"{inner.cname}[64]", [ffi.cast(inner, self.handle(kind)[0]) for _ in range(64)])
            else:
                array = ffi.new(f"{inner.cname}[64]")
            self.keep.append(array)
            return array
        if ctype.item.kind == "struct" and not _opaque_kind(ctype):
            if ctype.item.cname == "PJRT_Program" and self.rng.random() < 0.5:
                return self.program
            structs = ffi.new(f"{ctype.item.cname}[8]")      # as many as any count we pass
            if "struct_size" in dict(ctype.item.fields):
                for struct in structs:
                    struct.struct_size = self.rng.choice([ffi.sizeof(ctype.item), 0, 8])
            self.keep.append(structs)
            return structs
        memory = ffi.new("char[]", SCRATCH_BYTES)
        if self.rng.random() < 0.5:                                # small int64s: plausible dims
            ints = ffi.cast("int64_t*", memory)
            for i in range(8):
                ints[i] = self.rng.randint(0, 2)
        self.keep.append(memory)
        return ffi.cast(ctype, memory)

    def callback(self, ftype):
        """A real C function of type `ftype` that records its call and returns 0/NULL."""
        result = ftype.result

        def called(*_):
            self.callbacks += 1
            return None if result.kind == "void" else (ffi.NULL if result.kind == "pointer" else 0)
        function = ffi.callback(ftype, called)
        self.keep.append(function)
        return function

    def integer(self, name: str, ctype):
        if ctype.cname in ("_Bool", "bool"):
            return self.rng.random() < 0.5
        if ctype.cname in ("float", "double"):
            return self.rng.choice([0.0, 1.0, -1.0, float("nan")])
        small = self.rng.randint(0, 4)
        if self.rng.random() < 0.9 or any(word in name for word in ("size", "num_", "dims", "count")):
            return small                       # counts of caller memory stay within the scratch
        if ctype.kind == "enum":
            return self.rng.randint(0, 40)
        signed = not (ctype.cname.startswith(("u", "unsigned")) or ctype.cname == "size_t")
        return self.rng.choice([2**31 - 1, -1 if signed else 2**32 - 1, 99])

    # -- one call -----------------------------------------------------------------
    def fill(self, name: str):
        """Random Args for `name`; returns (args, how the primary handle field was filled, its end)."""
        struct_name = f"{name}_Args"
        ctype = ffi.typeof(struct_name)
        try:
            args = ffi.new(f"{struct_name}*")
        except TypeError:            # Args we do not declare (unimplemented slots): zeroed bytes
            raw = ffi.new("char[256]")
            self.keep.append(raw)
            args = ffi.cast(f"{struct_name}*", raw)
            ffi.cast("size_t*", raw)[0] = self.rng.choice([0, 8, 256])
            return args, None, 0
        self.keep.append(args)
        primary, primary_how, primary_end = _primary_field(name, ctype), None, 0
        for field, info in ctype.fields:
            if field in ("struct_size", "extension_start"):
                continue
            ftype = info.type
            kind = _opaque_kind(ftype)
            if kind:
                value, how = self.handle(kind)
                setattr(args, field, ffi.cast(ftype, value))
                if field == primary:
                    primary_how, primary_end = how, info.offset + ffi.sizeof(ftype)
            elif ftype.kind == "function":                         # cffi's kind for function pointers
                if self.rng.random() < 0.5:                        # else NULL; never a garbage function
                    setattr(args, field, self.callback(ftype))
            elif ftype.kind == "pointer":
                setattr(args, field, self.scratch(ftype))
            elif ftype.kind in ("primitive", "enum"):
                setattr(args, field, self.integer(field, ftype))
        size = ffi.sizeof(ctype)
        bad_sizes = [0, 8, 16, size // 2, size + 64]
        args.struct_size = self.rng.choice(bad_sizes) if self.rng.random() < self.misuse else size
        return args, primary_how, primary_end

    def step(self) -> None:
        if any(not self.live.get(kind) for kind in _CORE_KINDS):
            self._seed_objects()                  # destroyed along the way: make fresh ones
        name = self.rng.choice(self.slots)
        args_is_null = self.rng.random() < 0.02
        if args_is_null:
            args, how, end = ffi.NULL, "null-args", 0
        else:
            args, how, end = self.fill(name)
        if self.verbose:
            print(f"{self.calls}: {name} primary={how} struct_size={_struct_size(args)}", flush=True)
        error = getattr(self.api, name)(ffi.cast(f"{name}_Args*", args))
        self.calls += 1
        if name in entry_points.RETURNS_VOID:
            return
        if error != ffi.NULL:
            self.errors += 1
            code, message = self._read_error(error)
            assert code in VALID_CODES, f"{name}: invalid error code {code}"
            if code == INTERNAL:               # an error, but a bug of ours rather than the caller's misuse
                self.internal.append(message)
                print("INTERNAL:", message, flush=True)
            return
        misuse = how in ("null", "stale", "foreign", "other-kind", "null-args") or \
            (how is not None and _struct_size(args) < end)
        if misuse:
            detail = f"{name} succeeded with primary handle {how}, struct_size={_struct_size(args)}"
            self.misuse_accepted.append(detail)
            print("ACCEPTED MISUSE:", detail, flush=True)
        if how is not None:
            self.harvest(name, args)

    def harvest(self, name: str, args) -> None:
        """Record handles a successful call produced or destroyed."""
        ctype = ffi.typeof(args).item
        if name.endswith("_Destroy") or name in ("PJRT_Buffer_Delete",):
            primary = _primary_field(name, ctype)
            if primary and name.endswith("_Destroy"):
                handle = ffi.cast("void*", getattr(args, primary))
                if handle_table.is_live(handle):
                    return              # e.g. a client's own topology: Destroy is a no-op
                for handles in self.live.values():
                    for h in list(handles):
                        if h == handle:
                            handles.remove(h)
                self.stale.append(handle)
            return
        for field, info in ctype.fields:
            kind = _opaque_kind(info.type)
            end = info.offset + ffi.sizeof(info.type)
            if kind and end <= args.struct_size and field in _OUTPUT_FIELDS:
                self._add(kind, getattr(args, field))

    def _read_error(self, error) -> tuple[int, str]:
        code = ffi.new("PJRT_Error_GetCode_Args*", {"struct_size": ffi.sizeof("PJRT_Error_GetCode_Args"),
                                                    "error": error})
        assert self.api.PJRT_Error_GetCode(code) == ffi.NULL
        message = ffi.new("PJRT_Error_Message_Args*", {"struct_size": ffi.sizeof("PJRT_Error_Message_Args"),
                                                       "error": error})
        self.api.PJRT_Error_Message(message)
        text = ffi.string(message.message, message.message_size).decode("utf-8", "replace")
        self.api.PJRT_Error_Destroy(ffi.new("PJRT_Error_Destroy_Args*", {
            "struct_size": ffi.sizeof("PJRT_Error_Destroy_Args"), "error": error}))
        return int(code.code), text


# Kinds the fuzzer keeps at least one live handle of (re-created when all are destroyed).
_CORE_KINDS = ("PJRT_Client", "PJRT_Buffer", "PJRT_LoadedExecutable", "PJRT_Executable", "PJRT_Event")

# Handle fields a successful call fills in (outputs), as named in pjrt_c_api.h.
_OUTPUT_FIELDS = {"client", "executable", "loaded_executable", "buffer", "event", "device_description",
                  "topology", "context", "dst_buffer", "transfer_manager", "done_with_host_buffer",
                  "default_memory", "memory", "device", "addressable_device"}


def _struct_size(args) -> int | str:
    return "NULL" if args == ffi.NULL else int(ffi.cast("size_t*", args)[0])


def _primary_field(name: str, ctype) -> str | None:
    """The entry point's own handle field: `PJRT_Buffer_X` -> its first `PJRT_Buffer*` field.

    None for constructors (Create, Compile, ...) whose first field of that kind is an output.
    """
    parts = name.split("_")
    kind = "_".join(parts[:2])                              # PJRT_Buffer, PJRT_Client, ...
    if parts[1] in ("Plugin", "Compile") or parts[-1] == "Create" or name in (
            "PJRT_Executable_DeserializeAndLoad", "PJRT_TopologyDescription_Deserialize"):
        return None
    for field, info in ctype.fields:
        if _opaque_kind(info.type) == kind:
            return field
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--misuse", type=float, default=0.4,
                        help="chance of a bad handle / struct_size per field (low: deeper, valid-looking calls)")
    parser.add_argument("--verbose", action="store_true")
    options = parser.parse_args(argv)
    fuzzer = Fuzzer(options.seed, options.verbose, options.misuse)
    for _ in range(options.calls):
        fuzzer.step()
    print(f"seed {options.seed}: {fuzzer.calls} calls, {fuzzer.errors} errors, "
          f"{len(fuzzer.misuse_accepted)} accepted misuses, {len(fuzzer.internal)} INTERNAL errors, "
          f"{sum(len(h) for h in fuzzer.live.values())} live handles, {len(fuzzer.stale)} stale, "
          f"{fuzzer.callbacks} callbacks")
    return 1 if fuzzer.misuse_accepted else 0


if __name__ == "__main__":
    sys.exit(main())
