"""`pjrt-ref diff PROGRAM.mlir --against cpu|PLUGIN.so`: `pjrt-ref run` with
PJRT_REF_DIFF on, reporting the first op whose result differs, or that all
agree.

Exit status: 0 all compared ops agree, 1 an op differs, 2 the other backend
failed (could not load, compile or run an op, or its worker died).
"""
from __future__ import annotations

import os
import sys

from ...run_file import ArgumentCountError, build_parser, program_arguments
from .backend import DEFAULT_TIMEOUT, OtherBackendFailed
from .differ import Divergence

_DESCRIPTION = ("Run a StableHLO program on pjrt-ref and each of its ops on another backend too, "
                "with the reference's own operand values; stop at the first op whose result differs.")
_EPILOG = ("Floats agree when |other - pjrt-ref| <= atol + rtol * |pjrt-ref|; integers must be equal. "
           "Default (rtol, atol): f16 (1e-3, 1e-5), bf16 (1.6e-2, 1e-5), f32 (1.3e-6, 1e-5), f64 (1e-7, 1e-7), "
           "smaller floats (epsilon, 1e-5). Under JAX, set PJRT_REF_DIFF=cpu|PLUGIN.so "
           "(and PJRT_REF_DIFF_RTOL, _ATOL).")


def parse(argv: list[str]):
    parser = build_parser("pjrt-ref diff", _EPILOG, _DESCRIPTION)
    parser.add_argument("--against", required=True, metavar="cpu|PLUGIN.so",
                        help="the other backend: `cpu` (XLA's CPU client in jaxlib) or a PJRT plugin library")
    parser.add_argument("--rtol", type=float, help="relative tolerance for every float type (default: by type)")
    parser.add_argument("--atol", type=float, help="absolute tolerance for every float type (default: by type)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds to wait for the other backend's answer (default {DEFAULT_TIMEOUT:g})")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    from ...interpreter import load

    options = parse(argv)
    os.environ.update(PJRT_REF_DIFF=options.against, PJRT_REF_DIFF_TIMEOUT=repr(options.timeout),
                      PJRT_REF_DIFF_RTOL="" if options.rtol is None else repr(options.rtol),
                      PJRT_REF_DIFF_ATOL="" if options.atol is None else repr(options.atol))
    with open(options.program, "rb") as handle:
        program = load(handle.read(), entry=options.entry)
    try:
        arguments = program_arguments(options, program)
    except ArgumentCountError as error:
        print(f"pjrt-ref diff: error: {error}", file=sys.stderr)
        return 2
    try:
        program(*arguments)
    except Divergence as difference:
        print(f"pjrt-ref diff: first difference: {difference}")
        return 1
    except OtherBackendFailed as failure:
        print(f"pjrt-ref diff: error: {failure}", file=sys.stderr)
        return 2
    print(f"pjrt-ref diff: {program.module_plan.instrument.differ.summary()}")
    return 0
