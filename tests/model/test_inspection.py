"""Issue 5 item 7: inspection from JAX (as_text, cost_analysis, memory_analysis).

JAX runs under the plugin in a child process (tests/support/jax_support.py);
the per-op cost model itself (interpreter/cost.py) is checked in-process.
"""
from __future__ import annotations

import json

from pjrt_ref.interpreter import load
from pjrt_ref.interpreter.cost import cost_analysis, temp_bytes

from tests.support.jax_support import run_jax, run_python

MATMUL = """
func.func @main(%a: tensor<32x16xf32>, %b: tensor<16x8xf32>) -> tensor<32x8xf32> {
  %d = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<32x16xf32>, tensor<16x8xf32>) -> tensor<32x8xf32>
  return %d : tensor<32x8xf32>
}
"""

CHAIN = """
func.func @main(%a: tensor<32x16xf32>, %b: tensor<16x8xf32>) -> tensor<8xf32> {
  %d = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<32x16xf32>, tensor<16x8xf32>) -> tensor<32x8xf32>
  %t = stablehlo.tanh %d : tensor<32x8xf32>
  %s = stablehlo.add %t, %t : tensor<32x8xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%s init: %z) applies stablehlo.add across dimensions = [0] : (tensor<32x8xf32>, tensor<f32>) -> tensor<8xf32>
  return %r : tensor<8xf32>
}
"""


def test_matmul_flops_closed_form():
    cost = cost_analysis(load(MATMUL))
    assert cost["flops"] == 2 * 32 * 8 * 16 == 8192
    assert cost["bytes accessed"] == (32 * 16 + 16 * 8 + 32 * 8) * 4


def test_per_op_families():
    cost = cost_analysis(load(CHAIN))
    # dot 8192 + add 256 (elementwise: 1 per element) + reduce 31 * 8 (n - 1 per output)
    assert cost["flops"] == 8192 + 256 + 31 * 8
    assert cost["transcendentals"] == 256            # tanh: one per element, not a flop
    # peak live intermediates: d, t, s (1 KiB each) with d dead after t ... at most two at once
    assert temp_bytes(load(CHAIN)) == 2 * 32 * 8 * 4


def test_composite_and_call_cost_their_functions():
    program = load("""
func.func @main(%a: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.composite "my.double" %a {decomposition = @double} : (tensor<8xf32>) -> tensor<8xf32>
  %1 = func.call @double(%0) : (tensor<8xf32>) -> tensor<8xf32>
  return %1 : tensor<8xf32>
}
func.func private @double(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.add %x, %x : tensor<8xf32>
  %1 = stablehlo.exponential %0 : tensor<8xf32>
  return %1 : tensor<8xf32>
}
""")
    cost = cost_analysis(program)
    assert (cost["flops"], cost["transcendentals"]) == (16.0, 16.0)


INSPECT = """
def f(a, b):
    return jnp.tanh(a @ b).sum(axis=0)
a = np.ones((32, 16), np.float32); b = np.ones((16, 8), np.float32)
c = jax.jit(f).lower(a, b).compile()
m = c.memory_analysis()
print(json.dumps({"text": c.as_text(), "cost": c.cost_analysis(),
                  "mem": {"argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes,
                          "temp": m.temp_size_in_bytes},
                  "matmul": jax.jit(jnp.matmul).lower(a, b).compile().cost_analysis()["flops"]}))
"""


def _inspect(platform: str) -> dict:
    proc = run_jax("import json\n" + INSPECT, JAX_PLATFORMS=platform)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_jax_compiled_inspection_matches_cpu():
    ours, cpu = _inspect("pjrt_ref"), _inspect("cpu")
    assert ours["matmul"] == 8192.0 == cpu["matmul"]
    # Unfused and fused programs do the same arithmetic: flops and transcendentals agree.
    assert ours["cost"]["flops"] == cpu["cost"]["flops"] == 8192 + 31 * 8
    assert ours["cost"]["transcendentals"] == cpu["cost"]["transcendentals"] == 256
    # Bytes accessed differ by design (XLA fuses tanh into the reduce; we count every op).
    assert ours["cost"]["bytes accessed"] >= cpu["cost"]["bytes accessed"] > 0
    assert ours["mem"]["argument"] == cpu["mem"]["argument"] == (32 * 16 + 16 * 8) * 4
    assert ours["mem"]["output"] == 8 * 4 and ours["mem"]["temp"] > 0
    # as_text: the program the plugin runs (JAX shows it as HLO text).
    assert "dot(" in ours["text"] and "tanh(" in ours["text"] and "reduce(" in ours["text"]


# Programs whose flops and transcendentals the cpu backend's HloCostAnalysis counts
# the same way we do (fusion changes bytes accessed, not arithmetic). Not here: programs
# XLA simplifies first (CSE of a repeated `x - mean` in a layer norm) or that JAX lowers
# differently per platform (`lax.erf` is one op on cpu, a polynomial for pjrt_ref).
AGREEMENT = """
import json
from jax import lax
cases = {
    "elementwise": (lambda a: (a * 2 + 1) / (a - 3), [np.ones((16, 8), np.float32)]),
    "exp_log": (lambda a: jnp.log(jnp.exp(a) + 1.0), [np.ones((16, 8), np.float32)]),
    "batched_dot": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
                    [np.ones((4, 8, 5), np.float32), np.ones((4, 5, 3), np.float32)]),
    "conv_same": (lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "SAME"),
                  [np.ones((2, 3, 8, 8), np.float32), np.ones((4, 3, 3, 3), np.float32)]),
    "conv_strided_dilated": (lambda x, k: lax.conv_general_dilated(
        x, k, (2, 1), ((1, 2), (0, 1)), lhs_dilation=(1, 2), rhs_dilation=(2, 1)),
        [np.ones((1, 2, 9, 7), np.float32), np.ones((3, 2, 3, 2), np.float32)]),
    "reduce_max": (lambda a: a.max(axis=1), [np.ones((16, 8), np.float32)]),
    "maxpool": (lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (2, 2), "VALID"),
                [np.ones((8, 8), np.float32)]),
    "softmax": (lambda a: jax.nn.softmax(a, axis=-1), [np.ones((4, 10), np.float32)]),
    "cond": (lambda x: lax.cond(x.sum() > 0, lambda y: y * 2, lambda y: jnp.exp(y), x),
             [np.ones((8,), np.float32)]),
    "scatter_add": (lambda x, i: x.at[i].add(1.0), [np.ones((10,), np.float32), np.array([1, 3, 3], np.int32)]),
    "argmax": (lambda x: jnp.argmax(x, axis=1), [np.ones((6, 7), np.float32)]),
    "cumsum": (lambda x: jnp.cumsum(x), [np.ones((16,), np.float32)]),
    "grouped_conv": (lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "VALID", feature_group_count=2),
                     [np.ones((1, 4, 6, 6), np.float32), np.ones((6, 2, 3, 3), np.float32)]),
    "conv_transpose": (lambda x, k: lax.conv_transpose(x, k, (2, 2), "SAME",
                                                       dimension_numbers=("NCHW", "OIHW", "NCHW")),
                       [np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)]),
    "sort": (lambda a: jnp.sort(a, axis=-1), [np.ones((6, 10), np.float32)]),
    "fori_loop": (lambda a: lax.fori_loop(0, 5, lambda i, x: x * 2.0, a), [np.ones((8,), np.float32)]),
}
out = {}
for name, (f, args) in cases.items():
    cost = jax.jit(f).lower(*args).compile().cost_analysis()
    out[name] = [cost.get("flops", 0.0), cost.get("transcendentals", 0.0)]
print(json.dumps(out))
"""


def test_flops_agree_with_cpu_cost_analysis():
    ours = json.loads(run_jax(AGREEMENT).stdout.strip().splitlines()[-1])
    cpu = json.loads(run_jax(AGREEMENT, JAX_PLATFORMS="cpu").stdout.strip().splitlines()[-1])
    assert ours == cpu


def test_cli_cost_report(tmp_path):
    path = tmp_path / "chain.mlir"
    path.write_text(CHAIN)
    proc = run_python(f"from pjrt_ref.cli.main import main; raise SystemExit(main(['cost', {str(path)!r}]))")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"flops {8192 + 256 + 31 * 8}   transcendentals 256")
    assert "stablehlo.dot_general" in lines[3] and lines[3].split()[0] == "8192"   # costliest first
