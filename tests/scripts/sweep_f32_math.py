"""Every float32 input through the compiled exp/expm1/tanh/logistic/sin/cos
(interpreter/native/vector_math.py) against numpy's float64 function rounded to
float32, which is what the unfused interpreter returns.

Not a pytest file (2^32 inputs take a few minutes of one core per function):

    nice python tests/scripts/sweep_f32_math.py [FUNCTION ...]

prints, per function, how many inputs differ, the largest difference in
ulp of float32, and the first few differing inputs. Result on 2026-11-22:
exp, expm1 and tanh differ on no input; logistic on one (x = 9.894371e-06,
1 ulp, where the compiled value is the correctly rounded one; see
tests/interpreter/test_native_f32_math.py::test_logistic_near_halfway).
On 2026-11-28 (AMD EPYC, AVX2, numpy 2.4.6): sin_f32 and cos_f32 differ
on no input (7.5 minutes for the two).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np

# Run as a script: the repository root, for the test helpers imported as a package.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
from tests.support.jit_support import ordered  # noqa: E402
from pjrt_ref.interpreter.native import vector_math  # noqa: E402

REFERENCES = {
    "exp_f32": np.exp,
    "expm1_f32": np.expm1,
    "tanh_f32": np.tanh,
    "logistic_f32": lambda d: 1 / (1 + np.exp(-d)),
    "sin_f32": np.sin,
    "cos_f32": np.cos,
}
CHUNK = 1 << 24


def compiled_loops() -> dict:
    """name -> a numba loop `run(x, out)` applying vector_math's function."""
    source = "import math\nimport numpy as np\nfrom numba import njit\n" + vector_math.prelude_source()
    for name in REFERENCES:
        source += (f"\n\n@njit(error_model='numpy', nogil=True)\ndef run_{name}(x, out):\n"
                   f"    for i in range(x.shape[0]):\n"
                   f"        out[i] = np.float32({name}(np.float64(x[i])))\n")
    path = os.path.join(tempfile.mkdtemp(), "sweep_kernels.py")
    with open(path, "w") as f:
        f.write(source)
    namespace: dict = {}
    exec(compile(source, path, "exec"), namespace)
    return {name: namespace[f"run_{name}"] for name in REFERENCES}


def sweep() -> dict:
    loops = compiled_loops()
    stats = {name: {"differ": 0, "max_ulp": 0, "inputs": []} for name in REFERENCES}
    out = np.empty(CHUNK, np.float32)
    for start in range(0, 1 << 32, CHUNK):
        x = np.arange(start, start + CHUNK, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(invalid="ignore"):  # signalling NaNs
            wide = x.astype(np.float64)
        for name, reference in REFERENCES.items():
            loops[name](x, out)
            with np.errstate(all="ignore"):
                expected = reference(wide).astype(np.float32)
            same = (out.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(out) & np.isnan(expected))
            if same.all():
                continue
            where = np.nonzero(~same)[0]
            entry = stats[name]
            entry["differ"] += int(where.size)
            entry["max_ulp"] = max(entry["max_ulp"],
                                   int(np.abs(ordered(out[where]) - ordered(expected[where])).max()))
            entry["inputs"] = (entry["inputs"] + [float(x[i]) for i in where[:5]])[:5]
    return stats


if __name__ == "__main__":
    # python sweep_f32_math.py [NAME ...]: only those functions.
    if sys.argv[1:]:
        REFERENCES = {name: REFERENCES[name] for name in sys.argv[1:]}
    json.dump(sweep(), sys.stdout, indent=1)
    print()
