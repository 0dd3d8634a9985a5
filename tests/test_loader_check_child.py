"""The bytecode check's forked child (interpreter/loader.py,
`check_bytecode_in_child`) parses and plans, but leaves plan-time
optimisation (and so numba) to the parent, which still optimises."""
from __future__ import annotations

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent("""
    import io, sys
    import numpy as np
    from pjrt_ref.interpreter import load, program
    from pjrt_ref.interpreter.loader import make_context, parse_module

    TEXT = '''
    func.func @main(%x: tensor<1000xf32>) -> tensor<1000xf32> {
      %c = stablehlo.constant dense<2.0> : tensor<1000xf32>
      %a = stablehlo.multiply %x, %c : tensor<1000xf32>
      %b = stablehlo.add %a, %x : tensor<1000xf32>
      %d = stablehlo.multiply %b, %x : tensor<1000xf32>
      return %d : tensor<1000xf32>
    }
    '''
    module = parse_module(TEXT, make_context())
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    data = buffer.getvalue()
    assert data[:4] == b"ML\\xefR"

    # What the child runs: parse and plan, no optimizer, no numba.
    import os
    saved = dict(os.environ)
    program._parse_and_plan_unoptimized(data, "main")
    print("child_loaded_numba", "numba" in sys.modules)
    os.environ.clear(); os.environ.update(saved)

    # The parent: checked in a child, then parsed, planned and optimised.
    x = np.linspace(-3, 3, 1000, dtype=np.float32)
    loaded = load(data)
    ops = [step.op.name for step in loaded.function.body.steps]
    print("parent_fused", "pjrt_ref.fused" in ops)
    expected = (x * np.float32(2) + x) * x
    print("same", bool(np.array_equal(loaded(x)[0], expected)))
""")


def test_check_child_plans_without_optimizing_and_parent_optimizes():
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    assert out == ["child_loaded_numba", "False", "parent_fused", "True", "same", "True"], out
