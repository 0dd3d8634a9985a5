"""What GetPjrtApi runs, once per process, to bind the plugin's slots to Python.

capi_shim/build_shim.py compiles this file's text into the shim, and
`pjrt_ref_run_boot` (capi_shim/python_boot.c) runs it under the GIL, after
creating the shim's extension module, by calling `boot(shim)` with that
module. Its one job is to find `pjrt_ref.capi` and let it install every
`extern "Python"` slot callback.

It cannot start with `import pjrt_ref`: a C host's freshly started Python
may not see the environment pjrt_ref is installed in. Then the shim's own
location says where the package is.
"""
import os
import site


def package_root(shim_path: str) -> str:
    """The sys.path entry that holds pjrt_ref, given the shim library's path.

    Installed: .../site-packages/pjrt_ref/capi_shim/<shim>.so -> site-packages.
    A source tree (editable install): <tree>/capi_shim/<shim>.so -> <tree>.
    """
    parent = os.path.dirname(os.path.dirname(shim_path))
    return os.path.dirname(parent) if os.path.basename(parent) == "pjrt_ref" else parent


def import_capi(shim):
    try:
        import pjrt_ref.capi as capi
    except ImportError:
        shim_path = shim.ffi.string(shim.lib.pjrt_ref_shim_path()).decode()
        site.addsitedir(package_root(shim_path))     # .pth files included
        import pjrt_ref.capi as capi
    return capi


def boot(shim) -> None:
    """Bind the slots of `shim` (the module `pjrt_ref.capi_shim._pjrt_ref_shim`)."""
    import_capi(shim).install(shim.ffi, shim.lib)
