"""Debugging and teaching tools (see docs/debugging.md).

    profile   PJRT_REF_PROFILE=FILE.json recorder and `pjrt-ref profile` report
    explain   `pjrt-ref explain SCRIPT.py`: the PJRT conversation of a script
    trace     `pjrt-ref trace PROGRAM.mlir`: run a file with the op trace on

The per-op switches (PJRT_REF_CHECK_NANS, PJRT_REF_TRACE, PJRT_REF_PROFILE)
are applied by `pjrt_ref.interpreter.instrument` when a program is loaded.
"""
