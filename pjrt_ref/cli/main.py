"""The `pjrt-ref` command line.

    pjrt-ref run PROGRAM.mlir [--arg FILE.npy | --arg LITERAL ...] [--random-args]
    pjrt-ref trace PROGRAM.mlir [--jsonl FILE] [run's arguments]
    pjrt-ref diff PROGRAM.mlir --against cpu|PLUGIN.so [--rtol R --atol A] [run's arguments]
    pjrt-ref explain SCRIPT.py [--jit NAME] [--log FILE] [SCRIPT ARGS...]
    pjrt-ref profile TRACE.json [--top N]
    pjrt-ref cost PROGRAM.mlir [--top N]
    pjrt-ref conformance PATH... [--jobs N] [--json FILE] [-k SUBSTRING] [--timeout S]
    pjrt-ref jax-tests PATH_TO_JAX_CHECKOUT [FILE ...] [--cases N] [--x64] [--devices N]
    pjrt-ref torch-tests PATH_TO_TORCH_XLA_CHECKOUT [FILE ...] [--devices N]
    pjrt-ref library-path

Each subcommand lives in its own small function; the heavy imports (jaxlib's
MLIR bindings, numba) happen only in the subcommand that needs them.
"""
from __future__ import annotations

import argparse
import json
import sys

from pjrt_ref import library_path
from pjrt_ref.cli.user_errors import USER_INPUT_ERRORS, describe


def _run_command(argv: list[str]) -> int:
    from pjrt_ref.cli.run_file import main as run_main

    return run_main(argv)


def _trace_command(argv: list[str]) -> int:
    """`run` with PJRT_REF_TRACE on: each op logged to stderr (or --jsonl FILE).

    The setting is overridden for the run, not written to os.environ: that
    would outlive the command in a process that called `main`."""
    from pjrt_ref import settings
    from pjrt_ref.cli.run_file import main as run_main

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--jsonl", metavar="FILE")
    options, rest = parser.parse_known_args(argv)
    with settings.override(PJRT_REF_TRACE=options.jsonl or "1"):
        return run_main(rest, prog="pjrt-ref trace",
                        epilog="Each op is logged to stderr as it runs; --jsonl FILE writes JSON lines instead.")


def _diff_command(argv: list[str]) -> int:
    from pjrt_ref.cli.diff import main as diff_main

    return diff_main(argv)


def _fuzz_command(argv: list[str]) -> int:
    from pjrt_ref.judge.command import main as fuzz_main

    return fuzz_main(argv)


def _explain_command(argv: list[str]) -> int:
    from pjrt_ref.debug.explain import main as explain_main

    return explain_main(argv)


def _profile_command(argv: list[str]) -> int:
    from pjrt_ref.debug.profile import merge, report

    parser = argparse.ArgumentParser(prog="pjrt-ref profile",
                                     description="Top ops and source lines of PJRT_REF_PROFILE files; "
                                                 "several files (one per process of a job) are merged.")
    parser.add_argument("traces", nargs="+",
                        help="Chrome trace-event files written with PJRT_REF_PROFILE=FILE "
                             "(a job's processes write FILE.process<i>.json)")
    parser.add_argument("--top", type=int, default=10, help="rows per table (default 10)")
    parser.add_argument("--merged", metavar="OUT.json",
                        help="write the merged trace here: a row per process and device")
    options = parser.parse_args(argv)
    if len(options.traces) == 1 and not options.merged:
        print(report(options.traces[0], options.top))
        return 0
    merged = merge(options.traces)
    if options.merged:
        with open(options.merged, "w", encoding="utf-8") as f:
            json.dump(merged, f)
    print(report(" + ".join(options.traces), options.top, merged["traceEvents"]))
    return 0


def _cost_command(argv: list[str]) -> int:
    """Flops, transcendentals and bytes accessed per op (what JAX's cost_analysis() reports)."""
    from pjrt_ref import debug  # noqa: F401  (loads PJRT_REF_PROFILE's and _DIFF's sinks, as `run` does)
    from pjrt_ref.interpreter.program import load
    from pjrt_ref.interpreter.cost import report

    parser = argparse.ArgumentParser(prog="pjrt-ref cost", description=_cost_command.__doc__)
    parser.add_argument("program", help="a StableHLO program (text, bytecode or portable artifact)")
    parser.add_argument("--top", type=int, default=10, help="ops listed (default 10)")
    options = parser.parse_args(argv)
    with open(options.program, "rb") as handle:
        print(report(load(handle.read()), options.top))
    return 0


def _conformance_command(argv: list[str]) -> int:
    from pjrt_ref.conformance.pool import preload_also
    from pjrt_ref.conformance.runner import main as conformance_main

    # The workers run with the debugging switches (PJRT_REF_PROFILE, _DIFF) as the plugin does.
    preload_also("pjrt_ref.debug")
    return conformance_main(argv)


def _jax_tests_command(argv: list[str]) -> int:
    from pjrt_ref.testkit.command import main as suite_main       # the runner, and --plugin

    return suite_main(argv)


def _torch_tests_command(argv: list[str]) -> int:
    from pjrt_ref.frameworks.torch.suite import main as suite_main

    return suite_main(argv)


def _library_path_command(argv: list[str]) -> int:
    """The library to hand to a host by path. Its host is unknown, so the
    plugin gets a Python of its own unless PJRT_REF_RUNTIME says otherwise:
    a Python host may hold its GIL while it waits for a call."""
    print(library_path(runtime="isolated"))
    return 0


COMMANDS = {
    "run": (_run_command, "run a StableHLO program file and print its results"),
    "trace": (_trace_command, "run a program logging every op (PJRT_REF_TRACE)"),
    "diff": (_diff_command, "run a program here and op by op on another backend; stop at the first difference"),
    "fuzz": (_fuzz_command, "random programs here and on another backend; each disagreement shrunk and ruled on"),
    "explain": (_explain_command, "run a JAX script on pjrt-ref and summarise its PJRT calls"),
    "profile": (_profile_command, "top ops and source lines of a PJRT_REF_PROFILE trace"),
    "cost": (_cost_command, "flops and bytes accessed per op of a program (cost_analysis)"),
    "conformance": (_conformance_command, "run StableHLO test files and report pass/fail"),
    "jax-tests": (_jax_tests_command, "run JAX's own test files on cpu and on pjrt_ref, and compare"),
    "torch-tests": (_torch_tests_command, "run PyTorch/XLA's own test files on CPU and on pjrt_ref, and compare"),
    "library-path": (_library_path_command, "print the path of the PJRT plugin library (PJRT_REF_RUNTIME)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: pjrt-ref COMMAND [ARGS...]\n\ncommands:")
        for name, (_, help_text) in COMMANDS.items():
            print(f"  {name:14} {help_text}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    command, _ = COMMANDS[argv[0]]
    try:
        return command(argv[1:])
    except USER_INPUT_ERRORS as error:
        print(f"pjrt-ref {argv[0]}: error: {describe(error)}", file=sys.stderr)
        return 1


# What a wrong path or a malformed input file raises: reported in one line,
# no traceback. Anything else is a bug in pjrt-ref and keeps its traceback.
if __name__ == "__main__":
    sys.exit(main())
