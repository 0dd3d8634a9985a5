"""The bytecode check's forked child (interpreter/loader.py,
`check_bytecode_in_child`) parses and plans, but leaves plan-time
optimisation (and so numba) to the parent, which still optimises."""
from __future__ import annotations

import os
import pathlib
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


# A forked child that deadlocks on good input (a lock some other thread held
# at the fork) must not get the input rejected: the retry runs in a fresh
# interpreter, which inherits no lock. Simulated by a fork check that always
# times out; run in a subprocess so that a broken fallback (a crasher parsed
# in-process) cannot take pytest down.
_DEADLOCKED_FORK = textwrap.dedent("""
    import io, sys
    import numpy as np
    from pjrt_ref.errors import InvalidArgument
    from pjrt_ref.interpreter import load, loader
    from pjrt_ref.interpreter.loader import make_context, parse_module

    loader._status_of_child = lambda work: None          # every fork child "deadlocks"
    module = parse_module(
        "func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {"
        " %y = stablehlo.add %x, %x : tensor<3xf32> return %y : tensor<3xf32> }", make_context())
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    print("good", load(buffer.getvalue())(np.arange(3, dtype=np.float32))[0].tolist())
    try:
        load(open(sys.argv[1], "rb").read())
        print("crasher loaded")
    except InvalidArgument as error:
        print("crasher", error)
""")


def test_a_deadlocked_fork_child_is_retried_in_a_fresh_interpreter(tmp_path):
    crasher = pathlib.Path(__file__).parent / "data" / "fuzz_loader" / "crash-04603b67f1b9.mlirbc"
    done = subprocess.run([sys.executable, "-c", _DEADLOCKED_FORK, str(crasher)], capture_output=True,
                          text=True, timeout=180, env=dict(os.environ, JAX_PLATFORMS="cpu",
                                                           PJRT_REF_BYTECODE_CHECK_TIMEOUT="60"))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "good [0.0, 2.0, 4.0]" in lines
    assert "crasher MLIR bytecode rejected: it crashes MLIR's bytecode reader (SIGABRT)" in lines
