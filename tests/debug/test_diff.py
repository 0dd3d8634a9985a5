"""Differential debugging (`pjrt-ref diff`, PJRT_REF_DIFF; pjrt_ref/debug/diff).

In-process tests check the comparison and how ops are cut out of a program
(the "other backend" there is pjrt-ref itself, called directly). The
end-to-end tests run the real thing: a worker process with XLA's CPU client
or a PJRT plugin, which is pjrt-ref's own library with one kernel planted
wrong by a `sitecustomize.py` on the worker's PYTHONPATH.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import jaxlib
import ml_dtypes
import numpy as np
import pytest

from tests.support.jax_support import clean_env
from tests.support.repo_paths import REPO

from pjrt_ref.debug.diff import Differ, Divergence
from pjrt_ref.debug.diff.compare import Tolerance, compare, ulp_distance
from pjrt_ref.interpreter import load
from pjrt_ref.interpreter.instrument import Instrument
from pjrt_ref.interpreter.plan import ModulePlan

EXACT = Tolerance(0.0, 0.0)


# ------------------------------------------------------------ compare
def test_ulp_distance_counts_representable_numbers_between():
    one = np.float32(1)
    up = np.nextafter(np.nextafter(one, np.float32(2)), np.float32(2))
    reference = np.array([one, 0.0, -np.float32(2 ** -149)], np.float32)
    other = np.array([up, -0.0, np.float32(2 ** -149)], np.float32)
    assert ulp_distance(reference, other).tolist() == [2, 0, 2]     # -0 and +0 are the same point
    bf16 = np.array([1.0, -1.0], ml_dtypes.bfloat16)
    assert ulp_distance(bf16, np.nextafter(bf16, np.array(0, ml_dtypes.bfloat16))).tolist() == [1, 1]


def test_compare_tolerance_nan_inf_and_integers():
    reference = np.array([1.0, np.nan, np.inf, 100.0], np.float32)
    same_specials = np.array([1.0, np.nan, np.inf, 100.0001], np.float32)
    assert compare(reference, same_specials, Tolerance(1e-5, 0.0)).agrees
    result = compare(reference, same_specials, EXACT)
    assert result.differing == 1 and result.worst[0][0] == (3,) and result.worst[0][3] == 13
    flipped = compare(reference, np.array([1.0, 1.0, -np.inf, 100.0], np.float32))
    assert flipped.differing == 2 and flipped.worst[0][3] is None      # NaN against a number first
    assert compare(np.arange(4), np.array([0, 1, 5, 3])).worst == [((2,), 2, 5, None)]
    assert compare(np.ones(3, np.float32), np.ones(4, np.float32)).problem == "types differ"


def test_default_tolerances_depend_on_the_element_type():
    default = Tolerance()
    assert default.for_dtype(np.dtype(np.float32)) == (1.3e-6, 1e-5)
    assert default.for_dtype(np.dtype(np.complex128)) == (1e-7, 1e-7)
    assert default.for_dtype(np.dtype(ml_dtypes.float8_e4m3fn)) == (0.125, 1e-5)
    assert Tolerance(rtol=0.0).for_dtype(np.dtype(np.float16)) == (0.0, 1e-5)


# ------------------------------------------------------------ one-op modules, in process
class InProcessBackend:
    """The other backend as a function call: pjrt-ref on each one-op module,
    with `perturb(op_name, results)` applied to what it returns."""

    description = "pjrt-ref in process"

    def __init__(self, perturb=None):
        self.perturb = perturb or (lambda name, results: results)
        self.modules = []

    def run(self, module_text, arguments, what):
        self.modules.append(module_text)
        return self.perturb(what.split("'")[1], load(module_text)(*arguments))


def diffed(text: str, backend, tolerance=EXACT):
    """`text` loaded with a Differ using `backend`; returns (program, differ)."""
    program = load(text)
    module_plan = ModulePlan.of_module(program.mlir_module())
    instrument = Instrument()
    instrument.differ = differ = Differ("in-process", tolerance, backend=backend)
    module_plan.instrument = instrument
    function = module_plan.function(program.entry)
    module_plan.plan_all()
    return function, differ


# A while whose body reads a value from before the loop (captured), calls a
# function, and a sort whose comparator uses a constant hoisted out of it,
# as JAX's serialized programs do.
REGIONS = """
func.func @main(%x: tensor<4xf32>, %scale: tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<f32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %three = stablehlo.constant dense<3> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %s = stablehlo.broadcast_in_dim %scale, dims = [] : (tensor<f32>) -> tensor<4xf32>
  %r:2 = stablehlo.while(%i = %zero, %c = %x) : tensor<i32>, tensor<4xf32>
    cond {
      %lt = stablehlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %cos = stablehlo.cosine %c : tensor<4xf32>
      %m = func.call @scaled(%cos, %s) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      %next = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %next, %m : tensor<i32>, tensor<4xf32>
    }
  %nan = stablehlo.constant dense<0x7FC00000> : tensor<f32>
  %sorted = "stablehlo.sort"(%r#1) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %ne = stablehlo.compare NE, %a, %a, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %ca = stablehlo.select %ne, %nan, %a : tensor<i1>, tensor<f32>
      %lt = stablehlo.compare LT, %ca, %b, TOTALORDER : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
  }) {dimension = 0 : i64, is_stable = true} : (tensor<4xf32>) -> tensor<4xf32>
  %init = stablehlo.constant dense<0.0> : tensor<f32>
  %sum = stablehlo.reduce(%sorted init: %init) applies stablehlo.add across dimensions = [0]
    : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %r#1, %sorted, %sum : tensor<4xf32>, tensor<4xf32>, tensor<f32>
}
func.func private @scaled(%v: tensor<4xf32>, %s: tensor<4xf32>) -> tensor<4xf32> {
  %p = stablehlo.multiply %v, %s : tensor<4xf32>
  return %p : tensor<4xf32>
}
"""
REGION_ARGS = (np.array([0.5, -1.0, 2.0, 0.25], np.float32), np.float32(1.5))


def test_every_op_cut_out_runs_alone_and_agrees():
    backend = InProcessBackend()
    function, differ = diffed(REGIONS, backend)
    expected = load(REGIONS)(*REGION_ARGS)
    for ours, theirs in zip(function.run(list(REGION_ARGS)), expected):
        np.testing.assert_array_equal(ours, theirs)
    compared = {unit.name for unit in differ.stats.compared}
    # the while's body ops one by one (each iteration), then the while as a whole
    assert {"stablehlo.cosine", "func.call", "stablehlo.multiply", "stablehlo.while",
            "stablehlo.sort", "stablehlo.reduce"} <= compared
    assert differ.stats.compared[next(u for u in differ.stats.compared if u.name == "stablehlo.cosine")] == 3
    assert not differ.stats.not_compared
    while_module = next(m for m in backend.modules if "stablehlo.while" in m and "func.func private @scaled" in m)
    # the loop's operands, then the broadcast scale its body captures
    assert [str(t) for t in load(while_module).input_types] == ["tensor<i32>", "tensor<4xf32>", "tensor<4xf32>"]
    sort_module = next(m for m in backend.modules if '"stablehlo.sort"' in m)
    assert [str(t) for t in load(sort_module).input_types] == ["tensor<4xf32>"]   # the NaN constant was copied in


def test_region_holding_op_that_differs_is_named_as_a_whole():
    def wrong_while(name, results):
        if name != "stablehlo.while":
            return results
        return [r + np.float32(1) if r.dtype == np.float32 else r for r in results]

    function, _ = diffed(REGIONS, InProcessBackend(wrong_while))
    with pytest.raises(Divergence) as caught:
        function.run(list(REGION_ARGS))
    message = str(caught.value)
    assert message.startswith("'stablehlo.while' at ")
    assert "result 1 differs on the other backend: 4 of 4 elements differ beyond rtol=0 atol=0" \
        in message.splitlines()[0]
    assert "compared as a whole, with its body: the ops in it agreed one by one" in message

    def wrong_reduce(name, results):
        return [r * np.float32(2) for r in results] if name == "stablehlo.reduce" else results

    function, _ = diffed(REGIONS, InProcessBackend(wrong_reduce))
    with pytest.raises(Divergence, match="(?s)'stablehlo.reduce'.*compared as a whole, with its region"):
        function.run(list(REGION_ARGS))


def test_ops_that_cannot_run_alone_are_counted_not_compared():
    text = """
    func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
      %t = stablehlo.create_token : !stablehlo.token
      %y = stablehlo.custom_call @Sharding(%x) {mhlo.sharding = "{replicated}"} : (tensor<4xf32>) -> tensor<4xf32>
      %s = "stablehlo.all_reduce"(%y) ({
        ^bb0(%a: tensor<f32>, %b: tensor<f32>):
          %sum = stablehlo.add %a, %b : tensor<f32>
          stablehlo.return %sum : tensor<f32>
      }) {replica_groups = dense<[[0]]> : tensor<1x1xi64>} : (tensor<4xf32>) -> tensor<4xf32>
      %e = stablehlo.exponential %s : tensor<4xf32>
      return %e : tensor<4xf32>
    }"""
    function, differ = diffed(text, InProcessBackend())
    function.run([np.ones(4, np.float32)])
    assert {unit.name for unit in differ.stats.compared} == {"stablehlo.exponential"}
    summary = differ.summary()
    assert "not compared: 3 ops" in summary
    assert "stablehlo.all_reduce: needs the other devices of the process grid" in summary
    assert "stablehlo.create_token: passes tokens" in summary
    assert "stablehlo.custom_call: is a custom call (@Sharding" in summary


# ------------------------------------------------------------ end to end: a planted bug
# The planted bug: in the worker only (PJRT_REF_DIFF_WORKER is set there),
# pjrt-ref's tanh returns the next float up: one ULP off.
PLANTED_TANH = """
import os
if os.environ.get("PJRT_REF_DIFF_WORKER"):
    os.environ["PJRT_REF_OPTIMIZE"] = "0"    # the registered kernels run, not fused loops
    import dataclasses
    import numpy as np
    from pjrt_ref.interpreter import registry
    right = registry.lookup("stablehlo.tanh")

    def one_ulp_up(op, x):
        result = np.asarray(right.fn(op, x))
        return np.nextafter(result, np.asarray(np.inf, result.dtype))

    registry.KERNELS["stablehlo.tanh"] = dataclasses.replace(right, fn=one_ulp_up)
"""
# Or the same tanh crashes the worker, hangs, or is missing.
CRASHING_TANH = PLANTED_TANH.replace("return np.nextafter(result, np.asarray(np.inf, result.dtype))",
                                     "os.abort()")
HANGING_TANH = PLANTED_TANH.replace("return np.nextafter(result, np.asarray(np.inf, result.dtype))",
                                    "__import__('time').sleep(600)")
MISSING_TANH = PLANTED_TANH.replace("registry.KERNELS[\"stablehlo.tanh\"] = dataclasses.replace(right, fn=one_ulp_up)",
                                    "del registry.KERNELS[\"stablehlo.tanh\"]")

MODEL = '''\
import jax, jax.numpy as jnp, numpy as np

def layer(x, w):
    h = jnp.tanh(x @ w)
    return jax.lax.fori_loop(0, 2, lambda i, c: c * 0.5 + jnp.sin(c), h).sum(axis=0)

x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)
w = np.linspace(-1, 1, 18, dtype=np.float32).reshape(6, 3)
np.save("x.npy", x); np.save("w.npy", w)
open("layer.mlir", "w").write(jax.jit(layer).lower(x, w).as_text(debug_info=True))
'''


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A directory with layer.mlir (tanh on line 4 of model.py), x.npy, w.npy, and
    sitecustomize directories planting the three faults."""
    path = tmp_path_factory.mktemp("diff")
    (path / "model.py").write_text(MODEL)
    subprocess.run([sys.executable, "model.py"], cwd=path, env=clean_env(JAX_PLATFORMS="cpu"), check=True)
    for name, text in (("planted", PLANTED_TANH), ("crashing", CRASHING_TANH), ("hanging", HANGING_TANH),
                       ("missing", MISSING_TANH)):
        (path / name).mkdir()
        (path / name / "sitecustomize.py").write_text(text)
    return path


def plugin_path() -> str:
    import pjrt_ref

    return pjrt_ref.library_path()


def pjrt_ref_diff(cwd, *args, fault: str | None = None, timeout: float = 300):
    env = clean_env(**({"PYTHONPATH": str(cwd / fault)} if fault else {}))
    return subprocess.run([sys.executable, "-m", "pjrt_ref.cli.main", "diff", "layer.mlir", "--arg", "x.npy",
                           "--arg", "w.npy", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_cli_names_the_planted_op_and_its_line(model_dir):
    proc = pjrt_ref_diff(model_dir, "--against", plugin_path(), "--rtol", "0", "--atol", "0",
                         "--save-op", "tanh_op", fault="planted")
    assert proc.returncode == 1, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"pjrt-ref diff: first difference: 'stablehlo.tanh' at {model_dir}/model.py:4:"), first
    assert "elements differ beyond rtol=0 atol=0, by up to 1 ULP" in first
    assert "  worst elements of result 0 (pjrt-ref vs other):" in proc.stdout
    assert proc.stdout.count("(1 ULP)") == 5
    # --save-op: the op alone, with the operand it was given (x @ w)
    text = (model_dir / "tanh_op" / "op.mlir").read_text()
    assert text.count(" = stablehlo.") == 1 and " = stablehlo.tanh %arg0 " in text
    op = load(text)
    x, w = np.load(model_dir / "x.npy"), np.load(model_dir / "w.npy")
    operand = np.load(model_dir / "tanh_op" / "arg0.npy")
    np.testing.assert_allclose(operand, x @ w, rtol=1e-6)
    (result,) = op(operand)
    np.testing.assert_allclose(result, np.tanh(operand), rtol=1e-6)
    # Without the planted bug, the same run agrees exactly.
    clean = pjrt_ref_diff(model_dir, "--against", plugin_path(), "--rtol", "0", "--atol", "0")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "ops compared agree with pjrt_ref" in clean.stdout and "within rtol=0 atol=0" in clean.stdout


def test_jax_raises_at_the_planted_op_and_prints_once(model_dir):
    script = textwrap.dedent('''\
        import jax, jax.numpy as jnp

        def f(x):
            jax.debug.print("before tanh: {}", x.sum())
            return jnp.tanh(x) * 2.0

        try:
            jax.jit(f)(jnp.arange(8.0) / 8)
        except Exception as error:
            print(type(error).__name__, error)
        print("still alive", int(jnp.add(40, 2)))
        ''')
    (model_dir / "print_model.py").write_text(script)
    env = clean_env(JAX_PLATFORMS="pjrt_ref,cpu", PJRT_REF_DIFF=plugin_path(), PJRT_REF_DIFF_RTOL="0",
                    PJRT_REF_DIFF_ATOL="0", PYTHONPATH=str(model_dir / "planted"))
    proc = subprocess.run([sys.executable, "print_model.py"], cwd=model_dir, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "before tanh: 3.5"                  # printed once, as without PJRT_REF_DIFF
    assert proc.stdout.count("before tanh") == 1
    assert lines[1].startswith(f"JaxRuntimeError INTERNAL: 'stablehlo.tanh' at {model_dir}/print_model.py:5:"), \
        proc.stdout
    assert "by up to 1 ULP (PJRT_REF_DIFF)" in lines[1]
    assert lines[-1] == "still alive 42"


def test_w4_like_training_step_agrees_with_xla_cpu(tmp_path):
    script = textwrap.dedent(f'''\
        import sys, numpy as np, jax
        sys.path.insert(0, {str(REPO)!r})      # for the test helpers, imported as a package
        from tests.support.jit_support import mlp_training_step
        step, args = mlp_training_step(np.random.default_rng(0), (784, 512, 512, 10), batch=128)
        open("step.mlir", "w").write(jax.jit(step).lower(*args).as_text(debug_info=True))
        for i, a in enumerate(jax.tree_util.tree_leaves(args)):
            np.save(f"arg{{i}}.npy", a)
        ''')
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=clean_env(JAX_PLATFORMS="cpu"), check=True)
    arguments = [a for i in range(8) for a in ("--arg", f"arg{i}.npy")]
    proc = subprocess.run([sys.executable, "-m", "pjrt_ref.cli.main", "diff", "step.mlir", "--against", "cpu",
                           *arguments], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, closest = proc.stdout.splitlines()[:2]
    assert first.startswith("pjrt-ref diff: all ") and first.endswith(
        f"ops compared agree with XLA cpu (jaxlib {jaxlib.__version__}) within the default tolerances")
    assert int(first.split()[3]) > 100                  # every op of the step, forward and backward
    assert closest.startswith("  closest to the tolerance: 'stablehlo.")


# ------------------------------------------------------------ bad input: one line, and the process lives
def test_a_plugin_that_does_not_load_is_one_line(model_dir):
    (model_dir / "not_a_plugin.so").write_text("not a shared library")
    for against, said in (("not_a_plugin.so", f"{model_dir}/not_a_plugin.so"),
                          ("/no/such/plugin.so", "no such file: /no/such/plugin.so")):
        proc = pjrt_ref_diff(model_dir, "--against", against)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr.startswith("pjrt-ref diff: error: cannot load the other backend ")
        assert said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_a_missing_op_is_one_line(model_dir):
    proc = pjrt_ref_diff(model_dir, "--against", plugin_path(), fault="missing")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"pjrt-ref diff: error: pjrt_ref ({plugin_path()}) cannot compile "
                                  f"'stablehlo.tanh' at {model_dir}/model.py:4:")
    assert proc.stderr.rstrip().endswith("op is not supported by pjrt-ref")


def test_a_crashing_plugin_is_one_line(model_dir):
    proc = pjrt_ref_diff(model_dir, "--against", plugin_path(), fault="crashing")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "worker (pid " in proc.stderr and f"{plugin_path()}) died of SIGABRT while running " \
        f"'stablehlo.tanh' at {model_dir}/model.py:4:" in proc.stderr


@pytest.mark.slow
def test_a_hanging_plugin_is_one_line(model_dir):
    # Long enough for the ops before tanh to compile on a loaded machine; tanh itself never answers.
    proc = pjrt_ref_diff(model_dir, "--against", plugin_path(), "--timeout", "15", fault="hanging")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{plugin_path()}) did not answer within 15 s while running 'stablehlo.tanh'" in proc.stderr


def test_a_crashing_plugin_under_jax_is_an_exception_and_the_process_lives(model_dir):
    script = textwrap.dedent('''\
        import jax, jax.numpy as jnp
        for attempt in range(2):          # the worker is started again after a crash
            try:
                jax.jit(jnp.tanh)(jnp.ones(3))
            except Exception as error:
                print(type(error).__name__, str(error).splitlines()[0])
        print("still alive", int(jnp.add(40, 2)))
        ''')
    env = clean_env(JAX_PLATFORMS="pjrt_ref,cpu", PJRT_REF_DIFF=plugin_path(),
                    PYTHONPATH=str(model_dir / "crashing"))
    proc = subprocess.run([sys.executable, "-c", script], cwd=model_dir, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    errors = proc.stdout.splitlines()[:2]
    for line in errors:
        assert line.startswith("JaxRuntimeError UNAVAILABLE: the other backend's worker (pid ")
        assert "died of SIGABRT while running 'stablehlo.tanh'" in line
    assert proc.stdout.splitlines()[2] == "still alive 42"
