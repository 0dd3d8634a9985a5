"""`pjrt-ref run`: run a StableHLO program file on the interpreter.

Arguments come from `.npy` files or Python literals (`--arg '[1, 2, 3]'`),
converted to the entry function's declared element types; `--random-args`
fills every input with random values of the right shape and type.
"""
from __future__ import annotations

import argparse
import ast
import os
import sys
import time

import numpy as np

from pjrt_ref.debug.profile import from_environment as profile_recorder
from pjrt_ref.errors import PjrtRefError


def build_parser(prog: str = "pjrt-ref run", epilog: str | None = None,
                 description: str = "Run a StableHLO program and print its results.") -> argparse.ArgumentParser:
    """The arguments of `pjrt-ref run` (other commands add their own)."""
    parser = argparse.ArgumentParser(prog=prog, epilog=epilog, description=description)
    parser.add_argument("program", help="StableHLO text, MLIR bytecode or a portable artifact")
    parser.add_argument("--arg", action="append", default=[], metavar="FILE.npy|LITERAL",
                        help="an argument: a .npy file or a Python literal; repeat in order")
    parser.add_argument("--random-args", action="store_true",
                        help="fill every argument with random values")
    parser.add_argument("--seed", type=int, default=0, help="seed for --random-args")
    parser.add_argument("--entry", default="main", help="function to run (default: main)")
    return parser


def read_argument(text: str, ttype) -> np.ndarray:
    """An argument from a .npy path or a literal, cast to the declared type."""
    if text.endswith(".npy") and os.path.exists(text):
        value = np.load(text, allow_pickle=False)
    else:
        value = np.array(ast.literal_eval(text))
    if value.dtype != ttype.dtype:
        value = value.astype(ttype.dtype)
    shape = tuple(ttype.shape)
    if value.shape != shape and value.size == 1 and all(d is not None for d in shape):
        value = np.full(shape, value.reshape(()), dtype=ttype.dtype)
    return value


def random_argument(ttype, rng: np.random.Generator) -> np.ndarray:
    """Random values of a tensor type (dynamic dims become 4)."""
    shape = tuple(4 if d is None else d for d in ttype.shape)
    dtype = ttype.dtype
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu" or dtype.name in ("int4", "uint4", "int2", "uint2"):
        return rng.integers(0, 8, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


class ArgumentCountError(ValueError):
    """--arg was given a number of times other than the entry function's arity."""


def program_arguments(options: argparse.Namespace, program) -> list[np.ndarray]:
    """The arguments `options` asks for (--arg ... or --random-args), typed for `program`."""
    types = program.input_types
    if options.random_args:
        rng = np.random.default_rng(options.seed)
        return [random_argument(t, rng) for t in types]
    if len(options.arg) != len(types):
        raise ArgumentCountError(f"@{program.entry} takes {len(types)} argument(s), "
                                 f"{len(options.arg)} given (use --arg or --random-args)")
    return [read_argument(text, t) for text, t in zip(options.arg, types)]


def main(argv: list[str] | None = None, prog: str = "pjrt-ref run", epilog: str | None = None) -> int:
    from pjrt_ref.interpreter.program import load

    options = build_parser(prog, epilog).parse_args(argv)
    with open(options.program, "rb") as f:
        source = f.read()
    profiler = profile_recorder()  # PJRT_REF_PROFILE: compile and execute slices too
    try:
        start = time.perf_counter()
        program = load(source, entry=options.entry)
        if profiler is not None:
            profiler.slice(f"compile {options.program}", "compile", start, time.perf_counter(),
                           {"program_bytes": len(source)})
        try:
            args = program_arguments(options, program)
        except ArgumentCountError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        start = time.perf_counter()
        results = program(*args)
        if profiler is not None:
            profiler.slice(f"execute @{program.entry}", "execute", start, time.perf_counter())
    except PjrtRefError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for index, (result, ttype) in enumerate(zip(results, program.output_types)):
        print(f"result {index}: {ttype}")
        print(np.array2string(np.asarray(result), threshold=200))
    return 0
