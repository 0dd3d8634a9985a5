"""The triage report: one row per cause, the tests under it; as markdown and as an HTML page."""
from __future__ import annotations

import html
import os

from pjrt_ref.testkit.causes import CauseRow, by_kind

# Tests listed under each cause (the rest are counted).
LISTED_PER_CAUSE = 50


def markdown(title: str, preamble: list[str], rows: list[CauseRow], root: str) -> str:
    lines = [f"# {title}", "", *preamble, ""]
    if not rows:
        return "\n".join(lines + ["No test passes on cpu and fails on the plugin."]) + "\n"
    lines += ["By kind:", "", "| kind | tests | causes | the largest |", "|---|---|---|---|"]
    for kind in by_kind(rows):
        lines.append(f"| {kind.kind} | {kind.tests} | {kind.causes} | {_cell(kind.largest.cause.title())} "
                     f"({len(kind.largest.findings)}) |")
    lines += ["", "By cause, the one that explains the most tests first:", "",
              "| # | tests | cause | first test and evidence |", "|---|---|---|---|"]
    for number, row in enumerate(rows, 1):
        first = row.findings[0]
        lines.append(f"| {number} | {len(row.findings)} | {_cell(row.cause.title())} | "
                     f"`{_cell(first.test)}`: {_cell(first.evidence)} |")
    for number, row in enumerate(rows, 1):
        lines += ["", f"## {number}. {row.cause.title()} ({len(row.findings)} tests)", ""]
        for finding in row.findings[:LISTED_PER_CAUSE]:
            folder = os.path.relpath(finding.folder, root) if finding.folder else ""
            lines.append(f"- `{finding.test}`: {finding.evidence}" + (f" ([artifacts]({folder}))" if folder else ""))
        if len(row.findings) > LISTED_PER_CAUSE:
            lines.append(f"- and {len(row.findings) - LISTED_PER_CAUSE} more")
    return "\n".join(lines) + "\n"


def page(title: str, preamble: list[str], rows: list[CauseRow], root: str) -> str:
    """A self-contained HTML page (no script, no external file)."""
    parts = ["<!doctype html>", "<html><head><meta charset='utf-8'>", f"<title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em;max-width:80em}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;"
             "vertical-align:top;text-align:left}code{font-size:90%}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    parts += [f"<p>{html.escape(line)}</p>" for line in preamble if line]
    if not rows:
        parts.append("<p>No test passes on cpu and fails on the plugin.</p>")
    else:
        parts.append("<h2>By kind</h2><table><tr><th>kind</th><th>tests</th><th>causes</th><th>the largest</th></tr>")
        for kind in by_kind(rows):
            parts.append(f"<tr><td>{html.escape(kind.kind)}</td><td>{kind.tests}</td><td>{kind.causes}</td>"
                         f"<td>{html.escape(kind.largest.cause.title())} ({len(kind.largest.findings)})</td></tr>")
        parts.append("</table><h2>By cause</h2>")
        parts.append("<table><tr><th>#</th><th>tests</th><th>cause</th><th>the tests</th></tr>")
        for number, row in enumerate(rows, 1):
            items = "".join(_item(finding, root) for finding in row.findings[:LISTED_PER_CAUSE])
            if len(row.findings) > LISTED_PER_CAUSE:
                items += f"<li>and {len(row.findings) - LISTED_PER_CAUSE} more</li>"
            parts.append(f"<tr><td>{number}</td><td>{len(row.findings)}</td>"
                         f"<td>{html.escape(row.cause.title())}</td>"
                         f"<td><details><summary><code>{html.escape(row.findings[0].test)}</code>: "
                         f"{html.escape(row.findings[0].evidence)}</summary><ul>{items}</ul></details></td></tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _item(finding, root: str) -> str:
    link = ""
    if finding.folder:
        link = f" (<a href='{html.escape(os.path.relpath(finding.folder, root))}/'>artifacts</a>)"
    return f"<li><code>{html.escape(finding.test)}</code>: {html.escape(finding.evidence)}{link}</li>"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
