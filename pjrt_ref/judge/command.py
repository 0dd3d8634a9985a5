"""`pjrt-ref fuzz`: a campaign against another backend, or a replay of saved programs."""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

from pjrt_ref.debug.diff.backend import OtherBackend
from pjrt_ref.judge import corpus, opset
from pjrt_ref.judge.campaign import Judge, Tally, run_campaign


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pjrt-ref fuzz",
        description="Random valid StableHLO programs run on pjrt-ref and another backend; each "
                    "disagreement shrunk to a minimal reproducer and ruled on by the spec.")
    parser.add_argument("--against", required=True, metavar="cpu|PLUGIN.so",
                        help="the other backend: XLA's CPU backend (`cpu`) or a PJRT plugin library")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="the generator's seed (default: the time)")
    parser.add_argument("--ops", metavar="PATTERN", help="only ops whose names match this regular expression")
    parser.add_argument("--max-ops", type=int, default=4, help="ops per program at most (default 4)")
    parser.add_argument("--save", metavar="DIR", help="keep every program generated (a corpus for --replay)")
    parser.add_argument("--replay", metavar="DIR", help="judge the programs saved in DIR instead of new ones")
    parser.add_argument("--out", metavar="DIR", default="fuzz-findings",
                        help="where reproducers and report.md go (default fuzz-findings)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds the other backend gets per program before it counts as hung")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    options = _arguments(argv)
    out = pathlib.Path(options.out)
    judge = Judge(OtherBackend(options.against, timeout=options.timeout))
    found = []

    def keep(finding) -> None:
        found.append(finding)
        folder = out / f"finding-{len(found):03d}"
        corpus.save_finding(folder, finding, options.against)
        print(f"{finding.verdict}: {finding.reason[:160]}  ({folder})", file=sys.stderr)

    try:
        if options.replay:
            tally = replay(judge, pathlib.Path(options.replay), keep)
        else:
            seed = options.seed if options.seed is not None else int(time.time())
            save_root = pathlib.Path(options.save) if options.save else None
            save = (lambda n, program, inputs: corpus.save_program(save_root / f"{n:06d}", program, inputs)) \
                if save_root else None
            tally = run_campaign(judge, opset.selected(options.ops), options.seconds, seed,
                                 options.max_ops, save, keep)
    finally:
        judge.other.close()
    report = summary(tally, options.against, judge.other.description)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(report)
    print(report)
    return 0


def replay(judge: Judge, root: pathlib.Path, on_finding) -> Tally:
    """Judge each program saved under `root`."""
    tally, start = Tally(), time.monotonic()
    for folder in corpus.program_folders(root):
        program, inputs = corpus.load_program(folder)
        tally.count(program)
        finding = judge.judge(program, inputs)
        if finding is not None:
            new = finding.cause not in tally.findings
            tally.add(finding)
            if new:
                on_finding(finding)
    tally.seconds = time.monotonic() - start
    return tally


def summary(tally: Tally, against: str, description: str) -> str:
    """The campaign's figures as markdown."""
    rate = tally.programs / tally.seconds if tally.seconds else 0.0
    lines = [f"# pjrt-ref fuzz against {against}", "", f"Other backend: {description}", "",
             f"- programs: {tally.programs} in {tally.seconds:.0f} s ({rate:.1f} per second)",
             f"- ops covered ({len(tally.ops)}): " + ", ".join(sorted(tally.ops)),
             f"- element types covered ({len(tally.element_types)}): " + ", ".join(sorted(tally.element_types)),
             "- disagreements by verdict: " + (", ".join(f"{v} {n}" for v, n in tally.verdicts.most_common())
                                              or "none"),
             f"- distinct causes: {len(tally.findings)}", ""]
    for cause, finding in tally.findings.items():
        ops = " -> ".join(cause[0])
        lines.append(f"- **{finding.verdict}** `{ops}` on {', '.join(cause[1])}: {finding.reason[:240]}")
    return "\n".join(lines) + "\n"
