"""The `pjrt-ref` command line.

    pjrt-ref run PROGRAM.mlir [--arg FILE.npy | --arg LITERAL ...] [--random-args]
    pjrt-ref conformance PATH... [--jobs N] [--json FILE] [-k SUBSTRING] [--timeout S]
    pjrt-ref library-path

Each subcommand lives in its own small function; the heavy imports (jaxlib's
MLIR bindings, numba) happen only in the subcommand that needs them.
"""
from __future__ import annotations

import argparse
import sys


def _run_command(argv: list[str]) -> int:
    from .run_file import main as run_main

    return run_main(argv)


def _conformance_command(argv: list[str]) -> int:
    from pjrt_ref.conformance.runner import main as conformance_main

    return conformance_main(argv)


def _library_path_command(argv: list[str]) -> int:
    from pjrt_ref import library_path

    print(library_path())
    return 0


COMMANDS = {
    "run": (_run_command, "run a StableHLO program file and print its results"),
    "conformance": (_conformance_command, "run StableHLO test files and report pass/fail"),
    "library-path": (_library_path_command, "print the path of the PJRT plugin library"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: pjrt-ref COMMAND [ARGS...]\n\ncommands:")
        for name, (_, help_text) in COMMANDS.items():
            print(f"  {name:14} {help_text}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    command, _ = COMMANDS[argv[0]]
    return command(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
