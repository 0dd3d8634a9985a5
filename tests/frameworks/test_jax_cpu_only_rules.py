"""Primitives JAX lowers only for the platforms it knows lower for pjrt_ref as for cpu
(pjrt_ref/frameworks/jax/cpu_only_rules.py), whatever module registers them and when."""
from __future__ import annotations

import json

from tests.support.jax_support import run_jax, run_python

IMPORT_ALL_OF_JAX = """
import importlib, pkgutil, warnings
warnings.simplefilter("ignore")
SKIP = ("internal_test_util", "test_util", "mosaic", "tpu", "gpu", "triton", "cuda", "rocm", "jax2tf")
for package in ("jax._src", "jax.experimental", "jax.extend", "jax.scipy", "jax.nn"):
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        if not any(word in info.name for word in SKIP):
            try:
                importlib.import_module(info.name)
            except Exception:      # optional dependencies (tensorstore, flatbuffers, ...)
                pass
"""


WALK = """
from jax._src.interpreters import mlir
from pjrt_ref.frameworks.jax.cpu_only_rules import cpu_only_primitives_without_rule
cpu_only = sorted(str(p) for p in mlir._platform_specific_lowerings["cpu"] if p not in mlir._lowerings)
print(json.dumps({"cpu_only": cpu_only,
                  "without": sorted(map(str, cpu_only_primitives_without_rule("pjrt_ref")))}))
"""


def test_every_primitive_with_only_platform_rules_has_a_rule_for_pjrt_ref():
    """Walks JAX's lowering registries after importing all of JAX (the plugin was
    registered first, so the rules of modules imported later count too)."""
    done = run_python('import json, jax\njax.devices("pjrt_ref")\n' + IMPORT_ALL_OF_JAX + WALK,
                      JAX_PLATFORMS="pjrt_ref,cpu", timeout=300)
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["without"] == [], f"primitives with a cpu rule and none for pjrt_ref: {found['without']}"
    assert "check" in found["cpu_only"]          # the class is not empty (checkify's check)


PROGRAMS = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
import scipy.sparse
from jax.experimental import checkify
from jax.experimental.sparse import linalg as sparse_linalg

results = {"platform": jax.devices()[0].platform}

@jax.jit
def positive_doubled(x):
    checkify.check(jnp.all(x > 0), "x must be positive: {}", x)
    return x * 2

error, out = checkify.checkify(positive_doubled)(jnp.array([1.0, -1.0]))
results["checkify"] = [error.get(), np.asarray(out).tolist()]

@jax.jit
def unchecked():
    checkify.check(False, "hi")
try:
    unchecked()
    results["unchecked"] = "no error"
except ValueError as error:
    results["unchecked"] = str(error).split(".")[0]

def no_nan(x):
    checkify.debug_check(jnp.all(x == x), "{x} has NaN", x=x)
    return x + 1
results["debug_check"] = float(jax.jit(no_nan)(jnp.ones(())))

a = (scipy.sparse.random(6, 6, density=0.5, random_state=0) + 3 * scipy.sparse.eye(6)).tocsr()
a = a.astype(np.float32)
b = np.arange(6, dtype=np.float32)
x = jax.jit(sparse_linalg.spsolve)(a.data, a.indices.astype(np.int32), a.indptr.astype(np.int32), b)
results["spsolve"] = np.asarray(x).tolist()
print(json.dumps(results))
"""


def test_checkify_and_sparse_primitives_give_cpus_results():
    """checkify's `check` and sparse's `spsolve` (host callbacks on cpu) on pjrt_ref and cpu."""
    runs = {platform: json.loads(run_python(PROGRAMS, JAX_PLATFORMS=platform, timeout=300).stdout
                                 .splitlines()[-1]) for platform in ("cpu", "pjrt_ref")}
    cpu, ours = runs["cpu"], runs["pjrt_ref"]
    assert ours.pop("platform") == "pjrt_ref" and cpu.pop("platform") == "cpu"
    assert ours["checkify"] == cpu["checkify"]
    assert ours["checkify"][0].startswith("x must be positive: [ 1. -1.]")
    assert ours["unchecked"] == cpu["unchecked"] == "Cannot abstractly evaluate a checkify"
    assert ours["debug_check"] == cpu["debug_check"] == 2.0
    import numpy as np
    np.testing.assert_allclose(ours["spsolve"], cpu["spsolve"], rtol=1e-6)


def test_platform_dependent_takes_pjrt_ref_s_own_branch_else_the_default_else_cpu_s():
    """`lax.platform_dependent` (jaxlib's FFI examples choose their target
    with it) on pjrt_ref: a branch for pjrt_ref wins, then the default (JAX's rule
    for a platform not named), then cpu's where JAX would fail."""
    proc = run_jax("""
        from jax import lax
        cases = {
            "cpu_and_cuda": lambda x: lax.platform_dependent(x, cpu=lambda v: v * 2, cuda=lambda v: v * 3),
            "with_default": lambda x: lax.platform_dependent(x, cpu=lambda v: v * 2, default=lambda v: v * 5),
            "own_branch": lambda x: lax.platform_dependent(x, cpu=lambda v: v * 2, pjrt_ref=lambda v: v * 7),
            "default_only": lambda x: lax.platform_dependent(x, cuda=lambda v: v * 3, default=lambda v: v * 5),
        }
        x = jax.device_put(jnp.ones(2), jax.devices("pjrt_ref")[0])
        print({name: float(jax.jit(f)(x)[0]) for name, f in cases.items()})
    """, JAX_PLATFORMS="pjrt_ref,cpu")
    assert proc.stdout.strip().splitlines()[-1] == \
        "{'cpu_and_cuda': 2.0, 'with_default': 5.0, 'own_branch': 7.0, 'default_only': 5.0}"


def test_an_export_lowered_for_cpu_is_called_on_pjrt_ref_as_on_cpu():
    """`jax.export` for several platforms, cpu among them (JAX's
    export_harnesses_multi_platform_test does this), called on pjrt_ref: the
    cpu lowering runs, with cpu's platform-dependent choices; an export
    without cpu is refused as before."""
    proc = run_jax("""
        from jax import export, lax
        def f(x):
            y = lax.platform_dependent(x, cpu=lambda v: v * 2, cuda=lambda v: v * 3, tpu=lambda v: v * 4)
            return jnp.sin(y) + jnp.linalg.inv(jnp.eye(2) * 2 + y[:2, :2] * 0.1)[0, 0]
        x = np.arange(9, dtype=np.float32).reshape(3, 3)
        out = {}
        for platforms in (("cpu", "cuda", "tpu"), ("cuda", "cpu"), ("cpu",)):
            exported = export.export(jax.jit(f), platforms=platforms)(x)
            for device in (jax.devices("pjrt_ref")[0], jax.devices("cpu")[0]):
                out[(platforms, device.platform)] = np.asarray(exported.call(jax.device_put(x, device)))
        for platforms in (("cpu", "cuda", "tpu"), ("cuda", "cpu"), ("cpu",)):
            np.testing.assert_allclose(out[(platforms, "pjrt_ref")], out[(platforms, "cpu")], rtol=1e-6)
            np.testing.assert_allclose(out[(platforms, "pjrt_ref")], np.asarray(jax.jit(f)(x)), rtol=1e-6)
        cuda_only = export.export(jax.jit(f), platforms=("cuda",))(x)
        try:
            cuda_only.call(jax.device_put(x, jax.devices("pjrt_ref")[0]))
        except ValueError as error:
            print("refused:", "was exported for platforms" in str(error))
    """, JAX_PLATFORMS="pjrt_ref,cpu")
    assert proc.stdout.strip().splitlines()[-1] == "refused: True"


def test_a_default_rule_that_refuses_unknown_platform_names_lowers_as_for_cpu():
    """Pallas's `mpmd_map` (plgpu.kernel) has one rule for every platform, which
    picks by name and refuses "pjrt_ref"; pjrt_ref gets the rule it picks for cpu.
    Each thread of an interpreted kernel writes its own id: the same on both."""
    code = """
        import numpy as np
        from jax.experimental.pallas import mosaic_gpu as plgpu
        from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams

        def kernel(o_ref):
            thread = jax.lax.axis_index("g") * 2 + jax.lax.axis_index("t")
            o_ref[thread] = thread * 10

        def run(device):
            call = plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct((6,), jnp.int32), grid=(3,),
                                grid_names=("g",), num_threads=2, thread_name="t",
                                interpret=InterpretGPUParams())
            return np.asarray(jax.jit(call, device=device)()).tolist()

        print(run(jax.devices("pjrt_ref")[0]) == run(jax.devices("cpu")[0]) == [0, 10, 20, 30, 40, 50])
    """
    done = run_jax(code, JAX_PLATFORMS="pjrt_ref,cpu")
    assert done.stdout.split()[-1] == "True", done.stdout[-2000:] + done.stderr[-3000:]
