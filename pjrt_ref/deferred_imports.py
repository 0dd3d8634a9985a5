"""The imports that stay inside functions, and why: every other import is at its module's top.

An import inside a function is allowed only for a module named in DEFERRED
(a key covers the module and its submodules), or anywhere in a module named
in DEFERRED_IN: it defers a load that is heavy, or
that a process may never need, until the code that needs it runs. Each
reason says what the load costs or why it must wait; the costs are
`python -X importtime` in a process that has already imported numpy and
`pjrt_ref.capi` (what a framework's process has once it loads the plugin),
on the 2-core AMD EPYC (AVX-512) machine of this project's benchmarks, under load.

tests/project/test_deferred_imports.py holds every product module (and the
benchmarks) to this list, and fails on a key no import uses. An import inside
a `try` that catches ImportError (its body or its handlers) is a fallback
probed at call time (capi_shim/boot.py retries `pjrt_ref.capi` after adding
the shim's site directory) and is not a deferral.
"""
from __future__ import annotations

DEFERRED = {
    # Third-party packages.
    "jax": "JAX itself (about 0.9 s to import): only the code that hooks into JAX or drives it needs it, and "
           "pjrt-ref also runs in processes without JAX (a C host, PyTorch/XLA).",
    "jaxlib": "jaxlib's MLIR bindings (`jaxlib.mlir.ir` about 45 ms, each generated dialect module 30 to "
              "40 ms more): a compile from bytecode the checker already parsed never needs them, so they "
              "must not sit on the path to the first result (issue 32, W0).",
    "numba": "numba (about 0.4 s; `numba.core.errors` alone 0.24 s): loaded when a kernel is first "
             "compiled, in the background, never on the path to the first result (issue 32, W0).",
    "llvmlite": "llvmlite's binding layer (about 40 ms), numba's backend: needed only when the compiled "
                "code looks for a symbol in the process, after numba has loaded it.",
    "scipy": "scipy.linalg and scipy.fft (about 0.4 s each): only the FFT and LAPACK custom-call kernels "
             "use them, when a program has such an op.",
    "torch": "optional (the `torch` extra): PyTorch's test tree is loaded only inside `pjrt-ref torch-tests`.",
    # Project modules that are heavy: they import one of the above at their top, or the interpreter's engine.
    "pjrt_ref.spmd.partitioner": "imports `pjrt_ref.spmd.per_device` at its top, which imports "
                                 "`jaxlib.mlir.ir` (see jaxlib); only a multi-device program needs it.",
    "pjrt_ref.capi.executable": "imports `pjrt_ref.spmd.partitioner` (jaxlib's MLIR bindings) at its top: "
                                "`import pjrt_ref.capi` must stay light, `install()` loads it.",
    "pjrt_ref.capi.layouts_extension": "imports `pjrt_ref.capi.executable` (see there); loaded by `install()`.",
    "pjrt_ref.capi.shardings_extension": "imports `pjrt_ref.spmd.partitioner` (see there); loaded by "
                                         "`install()`.",
    "pjrt_ref.interpreter.program": "the interpreter's engine (the planner, the optimiser, native code: "
                                    "about 60 modules, 80 to 100 ms): the layers above import light pieces "
                                    "of the interpreter at start-up and load it on the first compile "
                                    "(interpreter/__init__.py's `__getattr__` gives `load` and `Program`).",
    "pjrt_ref.frameworks.torch.plugin": "imports torch_xla at its top (optional, the `torch` extra): "
                                        "`pjrt-ref torch-tests` runs PyTorch/XLA's tests without loading it.",
    "pjrt_ref.debug.diff": "PJRT_REF_DIFF's differ and its one-op cutter (about 16 ms): loaded only when "
                           "the switch is on, never on a plain run's path to the first result.",
    "pjrt_ref.distributed": "the cross-process transport (about 17 ms, and mpi4py when it runs over MPI): "
                            "only a client of several processes (PJRT_Client_Create with num_nodes > 1) "
                            "needs it.",
    "pjrt_ref.interpreter.ops": "the op families: the registry loads each on the first op of its kind "
                                "(interpreter/op_index.py), so the plugin's start loads none "
                                "(tests/frameworks/test_jax_plugin.py::test_plugin_costs_little_at_startup).",
    "pjrt_ref.interpreter.plan": "the planner, which loads the engine with it (see "
                                 "pjrt_ref.interpreter.program); `pjrt_ref.debug` and the cost model "
                                 "need it only once a program is planned.",
    # Imports that break a cycle of top-level imports (the module named imports, at its top, the importer).
    "pjrt_ref.interpreter.ffi.attributes": "cycle: ffi/attributes.py imports interpreter/attributes.py, "
                                           "which reads custom-call attributes through it.",
    "pjrt_ref.interpreter.native.codegen": "cycle: codegen imports tensor_ops (and through it translator and "
                                           "float64_math), which compile through codegen.",
    "pjrt_ref.interpreter.native.tensor_ops": "cycle: tensor_ops imports translator, which hands tensor ops "
                                              "to it.",
    "pjrt_ref.interpreter.native.translator": "cycle: translator imports numpy_loops and small_products, "
                                              "which use its names.",
    "pjrt_ref.interpreter.native.blas": "cycle: blas imports products, product_strategy and codegen, which "
                                        "imports tensor_ops and with it small_products, which uses blas.",
}

# Modules all of whose function-level imports are deferred, whatever they import.
DEFERRED_IN = {
    "pjrt_ref": "pjrt_ref/__init__.py imports no module of pjrt_ref at its top but package_home: in a "
                "checkout, package_home maps the folders an install puts inside pjrt_ref only at the end of "
                "__init__, and a package of __init__ and package_home alone must import "
                "(tests/project/test_package_home.py).",
    "pjrt_ref.interpreter": "interpreter/__init__.py's `__getattr__` (PEP 562) loads `load`, `Program`, `register` "
                            "and `KERNELS` on first use: importing any light piece of the interpreter (the loader, "
                            "the process grid) loads about 100 modules, not 115 with the registry and op index.",
    "pjrt_ref.cli.main": "`pjrt-ref` imports a subcommand's module only when that subcommand runs: each loads "
                         "numpy (about 0.15 s) and most the interpreter's engine (the fuzzer about 0.3 s more), "
                         "which `pjrt-ref library-path`, run inside a shell's `$(...)`, and `--help` never need.",
}


def deferred(module: str) -> str | None:
    """The key of DEFERRED that covers `module` (itself or a package above it), or None."""
    for key in DEFERRED:
        if module == key or module.startswith(key + "."):
            return key
    return None
