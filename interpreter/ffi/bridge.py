"""The C bridge to XLA FFI handlers, built with cffi on first use.

xla_ffi_api.c (the `XLA_FFI_Api` table and the calls into handlers) is
compiled against the `xla/ffi/api/c_api.h` of the jaxlib that is running,
`jax.ffi.include_dir()`, which is also the header user handlers are compiled
against. cffi reads the same header (`cdef_text`) so that Python fills call
frames with the header's own struct layouts and enum values.

Why on first use, into the cache directory, and not at install time like
the shim (setup.py's `cffi_modules`):
- pip builds in an isolated environment: jaxlib would have to be a build
  requirement, downloaded again into it, and pip could pick another version
  there than the one installed beside pjrt-ref; the header must be the
  running jaxlib's;
- upgrading jaxlib later needs no reinstall of pjrt-ref: the build is kept
  per jaxlib version and source digest (`PJRT_REF_CACHE_DIR/xla-ffi/...`),
  so a new jaxlib gets a new build;
- a program that calls no FFI handler never pays for it.
The price is a C compiler the first time a process registers or calls a
handler (about a second), which whoever compiled the handler has; without
one the error says so.

The module is cffi API mode: cffi releases the GIL around each call into
it, so a handler runs without the GIL. It is loaded with RTLD_GLOBAL so
that legacy status-returning handlers find `XlaCustomCallStatusSetFailure`.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import threading

import cffi

from pjrt_ref import settings
from pjrt_ref.errors import FailedPrecondition

HERE = os.path.dirname(os.path.abspath(__file__))
C_SOURCE = os.path.join(HERE, "xla_ffi_api.c")
OWN_HEADER = os.path.join(HERE, "pjrt_ref_xla_ffi.h")
MODULE_NAME = "_pjrt_ref_xla_ffi"

_lock = threading.Lock()
_bridge = None


def include_dir() -> str:
    """jaxlib's FFI headers: what `jax.ffi.include_dir()` returns."""
    import jaxlib
    return os.path.join(os.path.dirname(jaxlib.__file__), "include")


def xla_header() -> str:
    return os.path.join(include_dir(), "xla", "ffi", "api", "c_api.h")


def _without_preprocessor(text: str) -> str:
    """`text` without preprocessor lines (continuations included) and
    without `#ifdef __cplusplus` blocks (their `extern "C" {`)."""
    text = text.replace("\\\n", " ")
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def cdef_text(xla_text: str, own_text: str) -> str:
    """What cffi's parser accepts of c_api.h and our header.

    c_api.h's two macros are expanded as its own #defines do; the
    `<struct>_STRUCT_SIZE` constant each struct's traits define (an
    offsetof, which cffi cannot evaluate) is declared `...`, so that cffi
    takes its value from the compiler: a handler checks `struct_size`
    against exactly that value. `XLA_FFI_GetApi` is XLA's own entry point,
    which this library does not define.
    """
    xla = _without_preprocessor(xla_text)
    xla = re.sub(r"XLA_FFI_DEFINE_STRUCT_TRAITS\((\w+),\s*\w+\);",
                 r"typedef struct \1 \1;\n#define \1_STRUCT_SIZE ...\n", xla)
    xla = re.sub(r"_XLA_FFI_API_STRUCT_FIELD\((\w+)\);", r"\1* \1;", xla)
    xla = re.sub(r"\b(\d+)u\b", r"\1", xla)
    xla = re.sub(r"const XLA_FFI_Api\* XLA_FFI_GetApi\(\);", "", xla)
    return xla + "\n" + _without_preprocessor(own_text)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _build_key() -> str:
    """jaxlib's version and a digest of everything compiled: one build per pair."""
    import jaxlib.version
    digest = hashlib.sha256()
    for path in (xla_header(), OWN_HEADER, C_SOURCE):
        digest.update(_read(path).encode())
    digest.update(sys.version.encode())
    return f"jaxlib-{jaxlib.version.__version__}-{digest.hexdigest()[:16]}"


def _build_dir() -> str:
    from pjrt_ref.interpreter.native.codegen import cache_dir
    return os.path.join(cache_dir(), "xla-ffi", _build_key())


def _compile(target_dir: str) -> str:
    """Compile the bridge into `target_dir` (atomically: a scratch directory
    renamed into place, so processes building at once never see half a
    library); the path of the extension module."""
    builder = cffi.FFI()
    builder.cdef(cdef_text(_read(xla_header()), _read(OWN_HEADER)))
    builder.set_source(MODULE_NAME, _read(C_SOURCE), include_dirs=[include_dir(), HERE],
                       libraries=["dl", "pthread"], extra_compile_args=["-O2"])
    os.makedirs(os.path.dirname(target_dir), exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(target_dir))
    try:
        built = builder.compile(tmpdir=scratch, verbose=False)
    except Exception as error:   # cffi raises VerificationError / CompileError / LinkError
        raise FailedPrecondition(
            "pjrt-ref could not compile its XLA FFI bridge (interpreter/ffi/xla_ffi_api.c) against "
            f"{xla_header()}: {error}. Running FFI handlers on pjrt_ref needs a C compiler "
            "(cc) the first time; the build is then kept in PJRT_REF_CACHE_DIR.") from None
    final_dir = scratch + ".done"
    os.makedirs(final_dir)
    os.replace(built, os.path.join(final_dir, os.path.basename(built)))
    try:
        os.rename(final_dir, target_dir)
    except OSError:   # another process got there first: use its build
        pass
    return _module_file(target_dir)


def _module_file(directory: str) -> str | None:
    if not os.path.isdir(directory):
        return None
    for name in os.listdir(directory):
        if name.startswith(MODULE_NAME) and name.endswith(".so"):
            return os.path.join(directory, name)
    return None


def _load(path: str):
    """Import the extension module at `path` with RTLD_GLOBAL (see the docstring).

    Not in a Python of our own: glibc crashes on RTLD_GLOBAL inside a link
    namespace made by dlmopen, and the host's handler libraries could not
    see its symbols there anyway."""
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    flags = sys.getdlopenflags()
    if not settings.runs_in_own_python():
        sys.setdlopenflags(flags | os.RTLD_GLOBAL)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.setdlopenflags(flags)
    return module


def bridge():
    """The built module (its `ffi` and `lib`), compiled first if need be."""
    global _bridge
    if _bridge is None:
        with _lock:
            if _bridge is None:
                directory = _build_dir()
                path = _module_file(directory) or _compile(directory)
                _bridge = _load(path)
    return _bridge
