"""`pjrt-ref diff PROGRAM.mlir --against cpu|PLUGIN.so`: `pjrt-ref run` with
PJRT_REF_DIFF on, reporting the first op whose result differs, or that all
agree.

Exit status, as diff(1)'s: 0 all compared ops agree, 1 an op differs, 2
trouble: the other backend failed (could not load, compile or run an op,
or its worker died), or the program could not be read or run.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from pjrt_ref import settings
from pjrt_ref.cli.run_file import ArgumentCountError, build_parser, program_arguments
from pjrt_ref.cli.user_errors import USER_INPUT_ERRORS, describe
from pjrt_ref.debug.diff.backend import DEFAULT_TIMEOUT
from pjrt_ref.debug.diff.differ import Divergence

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
    parser.add_argument("--save-op", metavar="DIR",
                        help="write the first op that differs to DIR/op.mlir and its operands to DIR/argN.npy")
    parser.add_argument("--json", metavar="FILE",
                        help="also write the outcome to FILE: status (agree, differs, error), and for a "
                             "difference the op, its location, the element type, the worst elements "
                             "and the ULP distance")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds to wait for the other backend's answer (default {DEFAULT_TIMEOUT:g})")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:

    options = parse(argv)
    try:
        with settings.override(**diff_settings(options)):
            summary = run(options)
    except Divergence as difference:
        print(f"pjrt-ref diff: first difference: {difference}")
        if options.save_op:
            print(f"pjrt-ref diff: {save_op(difference, options.save_op)}")
        write_outcome(options.json, {"status": "differs", **difference.facts(), "message": str(difference)})
        return 1
    except (ArgumentCountError, *USER_INPUT_ERRORS) as error:   # OtherBackendFailed among them
        print(f"pjrt-ref diff: error: {describe(error)}", file=sys.stderr)
        write_outcome(options.json, {"status": "error", "message": describe(error)})
        return 2
    print(f"pjrt-ref diff: {summary}")
    write_outcome(options.json, {"status": "agree", "message": summary})
    return 0


def write_outcome(path: str | None, outcome: dict) -> None:
    if path:
        with open(path, "w") as handle:
            json.dump(outcome, handle, indent=1)


def diff_settings(options) -> dict[str, str]:
    """The PJRT_REF_DIFF settings the options ask for ("": the default), as the
    environment would give them; `main` overrides the settings with them
    rather than writing os.environ, which would outlive the command."""
    def text(value: float | None) -> str:
        return "" if value is None else repr(value)

    return {"PJRT_REF_DIFF": options.against, "PJRT_REF_DIFF_TIMEOUT": text(options.timeout),
            "PJRT_REF_DIFF_RTOL": text(options.rtol), "PJRT_REF_DIFF_ATOL": text(options.atol)}


def save_op(difference: Divergence, directory: str) -> str:
    """Write the op's one-op program and operands; say how to replay them."""
    os.makedirs(directory, exist_ok=True)
    program = os.path.join(directory, "op.mlir")
    with open(program, "w") as handle:
        handle.write(difference.module)
    arguments = []
    for index, value in enumerate(difference.arguments):
        arguments.append(os.path.join(directory, f"arg{index}.npy"))
        np.save(arguments[-1], value)
    return (f"saved the op to {program} and its operands to {', '.join(arguments)}, to run it alone "
            f"(on pjrt-ref: pjrt-ref run {program}{''.join(f' --arg {path}' for path in arguments)})")


def run(options) -> str:
    """Load and run the program with PJRT_REF_DIFF on; the differ's summary."""
    from pjrt_ref.interpreter.program import load

    with open(options.program, "rb") as handle:
        program = load(handle.read(), entry=options.entry)
    program(*program_arguments(options, program))
    return program.module_plan.instrument.differ.summary()
