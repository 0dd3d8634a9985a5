"""PyTorch/XLA on pjrt-ref (issue 14), each case checked against torch on the CPU.

torch_xla loads pjrt-ref like any other plugin: through the
`torch_xla.plugins` entry point (`PJRT_DEVICE=PJRT_REF`,
pjrt_ref/frameworks/torch) or `PJRT_DEVICE=LIBRARY PJRT_LIBRARY_PATH=...`.
Every case runs in a child process (torch_xla picks its device once per
process) that computes the same thing with torch on the CPU, the oracle,
and on the XLA device. Install the extra to run them: `pip install -e ".[torch]"`.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

import pjrt_ref
from tests.support.jax_support import clean_env, run_python
from tests.support.repo_paths import REPO

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None,
                                 reason="torch_xla is not installed (pip install -e '.[torch]')"),
              pytest.mark.slow]   # each case starts torch_xla in a child process

# Imported first in every child: torch_xla must pick its device before the
# first backward pass, when autograd sizes its per-device queues.
PRELUDE = """
import torch, torch_xla
DEVICE = torch_xla.device()

def same(got, want, atol=1e-5, rtol=1e-5):
    got = got.cpu()
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol, equal_nan=True), (got, want)
"""


def run_torch(code: str, timeout: float = 300, **env: str):
    """Run `code` after PRELUDE with torch_xla on pjrt-ref (PJRT_DEVICE=PJRT_REF unless given)."""
    env.setdefault("PJRT_DEVICE", "PJRT_REF")
    return run_python(PRELUDE + textwrap.dedent(code), timeout=timeout, **env)


# ------------------------------------------------------------------ registration
@pytest.mark.parametrize("count", [1, 3])
def test_pjrt_ref_device_type_lists_the_plugins_devices(count):
    proc = run_torch("print(torch_xla.devices())", PJRT_REF_NUM_DEVICES=str(count))
    listed = ", ".join(f"device(type='xla', index={i})" for i in range(count))
    assert f"[{listed}]" in proc.stdout


def test_library_device_type_loads_the_plugin_by_path():
    proc = run_torch("""
        import torch_xla.runtime as xr
        print(torch_xla.devices(), xr.device_type())
        print((torch.arange(3.0, device=DEVICE) * 2).cpu().tolist())
    """, PJRT_DEVICE="LIBRARY", PJRT_LIBRARY_PATH=pjrt_ref.library_path())
    assert "[device(type='xla', index=0)] LIBRARY" in proc.stdout
    assert "[0.0, 2.0, 4.0]" in proc.stdout


def test_tensors_live_and_move_on_several_devices():
    run_torch("""
        x = torch.arange(6.0).reshape(2, 3)
        for device in torch_xla.devices():
            same((x.to(device) * 3 + 1).sum(dim=0), (x * 3 + 1).sum(dim=0))
        moved = x.to(torch_xla.devices()[0]).to(torch_xla.devices()[1])
        assert str(moved.device) == "xla:1"
        same(moved - 1, x - 1)
    """, PJRT_REF_NUM_DEVICES="2")


# ------------------------------------------------------------------ programs
def test_elementwise_and_reduction_ops_match_torch_cpu():
    run_torch("""
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
        cases = {
            "arith": lambda a, b: a + b * 2 - a / (b.abs() + 1),
            "transcendental": lambda a, b: torch.exp(a).log1p() + torch.sin(a) * torch.tanh(b),
            "activations": lambda a, b: torch.relu(a) + torch.sigmoid(b) + torch.nn.functional.gelu(a),
            "compare/select": lambda a, b: torch.where(a > b, a, b * 0.5),
            "sum/mean": lambda a, b: a.sum(dim=1) + b.mean(dim=1),
            "max/argmax": lambda a, b: a.max(dim=0).values + a.argmax(dim=0).float(),
            "softmax": lambda a, b: torch.softmax(a, dim=-1) + torch.log_softmax(b, dim=0),
            "cumsum": lambda a, b: torch.cumsum(a, 0),
            "norm/var": lambda a, b: torch.linalg.vector_norm(a, dim=1) + b.var(dim=1),
        }
        for name, fn in cases.items():
            same(fn(x.to(DEVICE), y.to(DEVICE)), fn(x, y), atol=1e-5)
            print(name, "ok")
    """)


def test_matmul_and_conv2d_match_torch_cpu():
    run_torch("""
        F = torch.nn.functional
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(6, 7, generator=g), torch.randn(5, 7, generator=g)
        same(a.to(DEVICE) @ b.to(DEVICE).T, a @ b.T, atol=1e-5)
        batch = torch.randn(3, 4, 5, generator=g), torch.randn(3, 5, 2, generator=g)
        same(torch.bmm(*(t.to(DEVICE) for t in batch)), torch.bmm(*batch), atol=1e-5)
        image, kernel = torch.randn(2, 3, 9, 9, generator=g), torch.randn(4, 3, 3, 3, generator=g)
        for kwargs in ({}, {"padding": 1, "stride": 2}, {"dilation": 2}):
            same(F.conv2d(image.to(DEVICE), kernel.to(DEVICE), **kwargs), F.conv2d(image, kernel, **kwargs),
                 atol=1e-4)
        grouped = torch.randn(6, 1, 3, 3, generator=g)
        image6 = torch.randn(1, 6, 5, 5, generator=g)
        same(F.conv2d(image6.to(DEVICE), grouped.to(DEVICE), groups=6), F.conv2d(image6, grouped, groups=6),
             atol=1e-4)
        same(F.max_pool2d(image.to(DEVICE), 2), F.max_pool2d(image, 2))
        same(F.avg_pool2d(image.to(DEVICE), 3, stride=2), F.avg_pool2d(image, 3, stride=2), atol=1e-6)
    """)


EXAMPLES = str(REPO / "examples")


@pytest.mark.parametrize("model, inputs", [("mlp", "8"), ("cnn", "1, 8, 8")])
def test_training_20_sgd_steps_gives_torch_cpus_losses(model, inputs):
    # The models and the loop of examples/torch_quickstart.py.
    proc = run_torch(f"""
import sys
sys.path.insert(0, {EXAMPLES!r})
from torch_quickstart import cnn, mlp, train
cpu_losses, cpu_model = train({model}, ({inputs},), "cpu", lambda: None)
xla_losses, xla_model = train({model}, ({inputs},), DEVICE, torch_xla.sync)
print("losses cpu", [round(v, 6) for v in cpu_losses])
print("losses xla", [round(v, 6) for v in xla_losses])
same(torch.tensor(xla_losses), torch.tensor(cpu_losses), atol=1e-5)
for got, want in zip(xla_model.parameters(), cpu_model.parameters()):
    same(got.detach(), want.detach(), atol=1e-4)
assert cpu_losses[-1] < cpu_losses[0] / 2      # it did learn
""")
    assert "losses xla" in proc.stdout


def test_in_place_updates_match_torch_cpu():
    run_torch("""
        def updates(x, y):
            x.add_(1)
            x.mul_(y)
            x[1:3] = 0
            x[:, 0] += 5
            x.index_put_((torch.tensor([0, 3], device=x.device),), torch.tensor(7.0, device=x.device))
            x.clamp_(max=6)
            return x
        x, y = torch.arange(20.0).reshape(4, 5), torch.linspace(-1, 1, 20).reshape(4, 5)
        on_device = x.to(DEVICE)
        result = updates(on_device, y.to(DEVICE))
        assert result is on_device
        same(result, updates(x.clone(), y))
    """)


def test_programs_with_legacy_hlo_start_index_tensors_run():
    """torch_xla emits HLO dynamic-slice with one rank-1 start-index tensor
    (randperm's shuffle loop, scatter_reduce's mean), a form the StableHLO
    verifier refuses and pjrt_ref/model/legacy_hlo.py rewrites."""
    run_torch("""
        torch.manual_seed(0)
        permutation = torch.randperm(7, device=DEVICE).cpu()
        assert sorted(permutation.tolist()) == list(range(7)), permutation
        source = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        index = torch.tensor([0, 1, 0, 1, 2, 1])
        def mean_into(base):
            return base.scatter_reduce(0, index.to(base.device), source.to(base.device), "mean")
        same(mean_into(torch.zeros(4, device=DEVICE)), mean_into(torch.zeros(4)))
        same((torch.arange(3.0, device=DEVICE) * 2), torch.arange(3.0) * 2)   # and on after
    """)


def test_donated_tensors_buffers_are_given_up_and_results_match_torch_cpu():
    # torch_xla marks a tensor donated by the user, and one updated in place,
    # as HLO buffer donors; as on torch_xla's CPU device, the execution takes
    # the donated buffer (its tensor becomes a placeholder until it is
    # written again) and the results are those of torch on the CPU.
    run_torch("""
        import torch_xla.debug.metrics as met
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(4, 2, 2, generator=g), torch.randn(4, 2, 2, generator=g)
        t0, t1 = a.to(DEVICE), b.to(DEVICE)
        assert torch_xla._XLAC._set_buffer_donation(t0, True)
        t2 = t0 + t1
        t1 += 2
        torch_xla.sync(wait=True)
        assert torch_xla._XLAC._is_placecholder(t0)
        assert met.metric_data("InputOutputAliasCount")[1] == 2.0
        same(t2, a + b)
        same(t1, b + 2)
    """)


def test_dtype_round_trips_and_ops_keep_their_types():
    run_torch("""
        values = torch.tensor([[0.5, -1.25, 3.0], [1e-3, 250.0, -7.5]])
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool):
            x = values.to(dtype)
            same(x.to(DEVICE), x, atol=0)                            # there and back, bit for bit
            if dtype is torch.bool:
                same(x.to(DEVICE) | ~x.to(DEVICE).T.T, x | ~x, atol=0)
            else:
                same(x.to(DEVICE) * 2 + x.to(DEVICE), x * 2 + x, atol=0)
            print(dtype, "ok")
        same(values.to(DEVICE).to(torch.bfloat16).to(torch.float32), values.to(torch.bfloat16).float(), atol=0)
        same(torch.arange(5, device=DEVICE) // 2, torch.arange(5) // 2, atol=0)
    """)


def test_torch_compile_openxla_backend_matches_eager_cpu():
    run_torch("""
        def f(x, y):
            return torch.sin(x) * y + torch.cos(y).sum()
        x, y = torch.linspace(-2, 2, 7), torch.linspace(0, 1, 7)
        compiled = torch.compile(f, backend="openxla")
        same(compiled(x.to(DEVICE), y.to(DEVICE)), f(x, y), atol=1e-6)
        same(compiled(y.to(DEVICE), x.to(DEVICE)), f(y, x), atol=1e-6)
    """)


# ------------------------------------------------------------------ debugging switches
NAN_PROGRAM = """
x = torch.tensor([1.0, -1.0, 4.0], device=DEVICE)
print((torch.sqrt(x) * 2).cpu())
"""


def test_check_nans_names_the_op_torch_xla_emitted():
    # torch_xla raises a failed execution again when the process exits
    # (torch_xla._prepare_to_exit, exit status 1): the child leaves before that.
    proc = run_python(PRELUDE + "\nimport os\ntry:\n" + textwrap.indent(NAN_PROGRAM, "    ")
                      + "except RuntimeError as error:\n    print('caught:', error, flush=True)\n"
                      + "os._exit(0)\n", PJRT_DEVICE="PJRT_REF", PJRT_REF_CHECK_NANS="1")
    assert "caught: 'stablehlo.sqrt' at sqrt" in proc.stdout
    assert "result holds NaN that its operands did not (PJRT_REF_CHECK_NANS)" in proc.stdout


def test_trace_logs_each_op_with_torch_xlas_names():
    proc = run_torch(NAN_PROGRAM, PJRT_REF_TRACE="1")
    lines = [line for line in proc.stderr.splitlines() if "pjrt_ref.trace" in line or "pjrt-ref trace" in line]
    assert any("stablehlo.sqrt  sqrt" in line and "nan=1" in line for line in lines), proc.stderr[-3000:]
    assert any("stablehlo.multiply  multiply" in line for line in lines)


def test_api_log_shows_the_hlo_program_and_its_execution():
    proc = run_torch(NAN_PROGRAM, PJRT_REF_LOG_API="1")
    assert "-> PJRT_Client_Compile" in proc.stderr and "program=hlo" in proc.stderr
    assert "-> PJRT_Executable_OptimizedProgram" in proc.stderr
    assert "-> PJRT_LoadedExecutable_Execute" in proc.stderr and "execute_device=" in proc.stderr


def test_quickstart_example_trains_like_torch_cpu():
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, "torch_quickstart.py")],
                          env=clean_env(PJRT_DEVICE="PJRT_REF"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("largest difference") == 2


# ------------------------------------------------------------------ a Python of its own
# torch_xla holds the GIL while it waits for a result it needs (indexing with
# a tensor not yet computed), and its execution thread then calls the plugin.
# The plugin runs in a Python of its own (capi_shim/isolated_runtime.c), so
# no such wait can deadlock. With PJRT_REF_RUNTIME=shared these hang.
def test_indexing_with_a_pending_mask_returns():
    proc = run_torch("""
    x = torch.tensor(0., device=DEVICE)
    x[x == 0] = 1.
    same(x, torch.tensor(1.))
    y = torch.arange(-3., 3., device=DEVICE)     # torch's make_tensor(exclude_zero=True) does this
    y[y == 0] = 0.5
    same(y, torch.tensor([-3., -2., -1., 0.5, 1., 2.]))
    print("ok")
    """, timeout=120)
    assert "ok" in proc.stdout


def test_ops_that_wait_on_pending_values_return_and_match_cpu():
    proc = run_torch("""
    a = torch.tensor([[0., 1.5, -2.], [3., 0., 4.]])
    b = torch.tensor([[1., 2., 3.], [-4., 5., 6.]])
    same(torch.nonzero(a.to(DEVICE)), torch.nonzero(a))
    same(torch.addcdiv(a.to(DEVICE), a.to(DEVICE), b.to(DEVICE), value=0.5), torch.addcdiv(a, a, b, value=0.5))
    same(torch.div(a.to(DEVICE), b.to(DEVICE), rounding_mode="floor"), torch.div(a, b, rounding_mode="floor"))
    print("ok")
    """, timeout=120)
    assert "ok" in proc.stdout


def test_the_plugin_runs_in_a_python_of_its_own():
    proc = run_torch("""
    import sys
    x = torch.ones(3, device=DEVICE) * 2
    same(x, torch.full((3,), 2.))
    # the plugin's modules are not this interpreter's
    assert "pjrt_ref.capi" not in sys.modules, sorted(m for m in sys.modules if m.startswith("pjrt_ref"))
    maps = open("/proc/self/maps").read()
    assert "_pjrt_ref_isolated" in maps and "_pjrt_ref_shim" in maps
    print("ok")
    """, timeout=120)
    assert "ok" in proc.stdout


def test_the_library_path_the_cli_prints_serves_torch_without_deadlock():
    """`PJRT_DEVICE=LIBRARY PJRT_LIBRARY_PATH=$(pjrt-ref library-path)`, as the README says."""
    path = subprocess.run([sys.executable, "-m", "pjrt_ref.cli.main", "library-path"], env=clean_env(),
                          capture_output=True, text=True, check=True).stdout.strip()
    assert "_pjrt_ref_isolated" in path
    proc = run_torch("""
    x = torch.tensor(0., device=DEVICE)
    x[x == 0] = 1.
    same(x, torch.tensor(1.))
    print("ok")
    """, timeout=120, PJRT_DEVICE="LIBRARY", PJRT_LIBRARY_PATH=path)
    assert "ok" in proc.stdout
