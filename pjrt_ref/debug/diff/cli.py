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
from .compare import DEFAULT_ATOL, DEFAULT_RTOL
from .differ import Divergence

_DESCRIPTION = ("Run a StableHLO program on pjrt-ref and each of its ops on another backend too, "
                "with the reference's own operand values; stop at the first op whose result differs.")
_EPILOG = ("Floats agree when |other - pjrt-ref| <= atol + rtol * |pjrt-ref|; integers must be equal. "
           "Under JAX, set PJRT_REF_DIFF=cpu|PLUGIN.so (and PJRT_REF_DIFF_RTOL, _ATOL).")


def parse(argv: list[str]):
    parser = build_parser("pjrt-ref diff", _EPILOG, _DESCRIPTION)
    parser.add_argument("--against", required=True, metavar="cpu|PLUGIN.so",
                        help="the other backend: `cpu` (XLA's CPU client in jaxlib) or a PJRT plugin library")
    parser.add_argument("--rtol", type=float, default=DEFAULT_RTOL, help=f"relative tolerance (default {DEFAULT_RTOL:g})")
    parser.add_argument("--atol", type=float, default=DEFAULT_ATOL, help=f"absolute tolerance (default {DEFAULT_ATOL:g})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds to wait for the other backend's answer (default {DEFAULT_TIMEOUT:g})")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    from ...interpreter import load

    options = parse(argv)
    os.environ.update(PJRT_REF_DIFF=options.against, PJRT_REF_DIFF_RTOL=repr(options.rtol),
                      PJRT_REF_DIFF_ATOL=repr(options.atol), PJRT_REF_DIFF_TIMEOUT=repr(options.timeout))
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
