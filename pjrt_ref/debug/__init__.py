"""Debugging and teaching tools (see docs/debugging.md).

    profile       PJRT_REF_PROFILE=FILE.json recorder and `pjrt-ref profile` report
    live_profile  the same slices for the host's profiler (`jax.profiler.trace`)
    xspace        those slices as the XSpace proto the host's profiler reads
    diff          PJRT_REF_DIFF and `pjrt-ref diff`: the first op another backend disagrees on
    explain       `pjrt-ref explain SCRIPT.py`: the PJRT conversation of a script

The per-op switches (PJRT_REF_CHECK_NANS, _TRACE, _PROFILE, _DIFF) are
applied by `pjrt_ref.interpreter.instrument` when a program is loaded. The
interpreter sits below this package and does not import it: importing this
package plugs the recorder and the differ that PJRT_REF_PROFILE and
PJRT_REF_DIFF write to into it. The PJRT plugin (`pjrt_ref.capi`) and the
pjrt-ref command import it; a script that uses the interpreter alone with
those switches imports it first.
"""
from __future__ import annotations

from pjrt_ref.interpreter.instrument import plug_in
from pjrt_ref.debug.profile import recorder


def _differ(spec: str):
    """PJRT_REF_DIFF's differ; the diff package (and the one-op cutter it
    brings) is imported only when the switch is on."""
    from pjrt_ref.debug.diff import Differ

    return Differ.from_environment(spec)


plug_in(make_recorder=recorder, make_differ=_differ)
