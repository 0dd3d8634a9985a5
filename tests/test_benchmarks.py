"""The benchmark harness runs end to end (timings themselves are never
asserted: numbers come from the benchmark, not from tests)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_w1_on_three_backends(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "W1", "--repeats", "2",
         "--time-limit", "30", "--rounds", "2", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Reproduce: `python -m benchmarks --only W1")
    report = json.loads(out.read_text())
    (entry,) = report["workloads"]
    backends = entry["backends"]
    assert set(backends) == {"pjrt_ref", "xla_cpu", "reference"}
    for name, result in backends.items():
        assert "median_s" in result, (name, result)
        assert result.get("max_abs_error") == 0.0, (name, result)
    assert backends["pjrt_ref"]["path"] in ("plugin", "interpreter")
    # Two alternating XLA/pjrt_ref pairs; the ratio is the median of theirs.
    ours, xla = backends["pjrt_ref"], backends["xla_cpu"]
    assert len(ours["round_medians_s"]) == len(xla["round_medians_s"]) == 2
    pair_ratios = [a / b for a, b in zip(ours["round_medians_s"], xla["round_medians_s"])]
    assert ours["round_ratios"] == pair_ratios
    assert ours["ratio_to_xla"] == sum(pair_ratios) / 2
    assert report["dispatch"]["num_ops"] == 1000
    assert "| W1 | pjrt_ref" in proc.stdout and "| W1 | reference" in proc.stdout
