"""atheris fuzz target for the StableHLO loader (issue 7, item 1).

    python tests/scripts/fuzz_loader.py --make-seeds DIR      # JAX-lowered seed corpus
    python tests/scripts/fuzz_loader.py CORPUS_DIR SEED_DIR -max_total_time=600 -timeout=10

Each input goes through `pjrt_ref.interpreter.load` (the path taken by
PJRT_Client_Compile): MLIR text, MLIR bytecode or a portable artifact. If it
loads, the program runs on zero arguments of its input types. The oracle:
every input ends in a Program (and a result) or a `PjrtRefError`. Any other
exception, a crash, an abort from MLIR's C++, or a hang over `-timeout`
seconds is a finding.
"""
from __future__ import annotations

import os
import sys

# Bound what a fuzzed program may do when it runs.
os.environ.setdefault("PJRT_REF_MAX_STEPS", "1000")
os.environ.setdefault("PJRT_REF_MAX_BYTES", str(64 << 20))
os.environ.setdefault("PJRT_REF_BYTECODE_CHECK_TIMEOUT", "5")

import numpy as np


def zero_arguments(program) -> list:
    from pjrt_ref.interpreter.types import TensorType, TokenType

    args = []
    for ttype in program.input_types:
        if isinstance(ttype, TensorType):
            shape = tuple(1 if d is None else d for d in ttype.shape)
            args.append(np.zeros(shape, dtype=ttype.dtype))
        elif isinstance(ttype, TokenType):
            args.append(None)
        else:
            args.append(None)
    return args


def run_one(data: bytes) -> str:
    """Load (and run) one input. Returns 'program', 'ran' or 'error'.

    Raises anything that is not a PjrtRefError: that is a finding.
    """
    from pjrt_ref.errors import PjrtRefError
    from pjrt_ref.interpreter import load

    try:
        program = load(data)
    except PjrtRefError:
        return "error"
    try:
        program(*zero_arguments(program))
    except PjrtRefError:
        return "program"
    return "ran"


def TestOneInput(data: bytes) -> None:
    run_one(data)


def seed_programs():
    import jax
    import jax.numpy as jnp

    x = jnp.ones((2, 3), jnp.float32)
    i = jnp.arange(4, dtype=jnp.int32)
    yield "add", (lambda a: a + 1.0), x
    yield "dot", (lambda a: a @ a.T), x
    yield "reduce", (lambda a: jnp.sum(jnp.tanh(a), axis=1)), x
    yield "while", (lambda a: jax.lax.fori_loop(0, 5, lambda k, v: v * 2 + k, a)), i
    yield "cond", (lambda a: jax.lax.cond(a[0] > 0, lambda v: v - 1, lambda v: v + 1, a)), i
    yield "gather", (lambda a: a[jnp.array([1, 0])]), x
    yield "sort", (lambda a: jnp.sort(a)), i
    yield "reshape", (lambda a: jnp.transpose(a).reshape(6).astype(jnp.int32)), x


def make_seeds(directory: str) -> None:
    import jax
    from jaxlib.mlir.dialects import stablehlo

    os.makedirs(directory, exist_ok=True)
    for name, fn, arg in seed_programs():
        lowered = jax.jit(fn).lower(arg)
        text = lowered.as_text()
        with open(os.path.join(directory, f"seed_{name}.mlir"), "w") as f:
            f.write(text)
        module = lowered.compiler_ir("stablehlo")
        import io
        buf = io.BytesIO()
        module.operation.write_bytecode(buf)
        with open(os.path.join(directory, f"seed_{name}.mlirbc"), "wb") as f:
            f.write(buf.getvalue())
        artifact = stablehlo.serialize_portable_artifact_str(
            text, stablehlo.get_current_version())
        with open(os.path.join(directory, f"seed_{name}.vhlo"), "wb") as f:
            f.write(artifact)


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--make-seeds":
        make_seeds(sys.argv[2])
        return
    import atheris

    with atheris.instrument_imports():
        import pjrt_ref.interpreter  # noqa: F401
        import pjrt_ref.interpreter.loader  # noqa: F401
    # Warm up: the first load makes the dialect registry.
    run_one(b"module {}")
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
