"""The documentation's relative links lead somewhere: README.md, docs/*.md and
benchmarks/README.md link to files that exist in the repository, and every
`#anchor` into a markdown file names one of its headings, as GitHub makes
anchors of them (lowercase, spaces to hyphens, punctuation dropped, `-1`,
`-2`, ... after a repeated heading). The README stays a front door: at most
260 lines, the rest lives in docs/ (issue 34)."""
from __future__ import annotations

import re
import pathlib

import pytest

from tests.support.repo_paths import REPO

README_MAX_LINES = 260

FENCE = re.compile(r"^(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def documents() -> list[pathlib.Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "README.md"]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line.lstrip())
        if fence is None and opening:
            fence = opening.group(1)[0]
        elif fence is not None and line.lstrip().startswith(fence * 3):
            fence = None
        elif fence is None:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)       # a link's text only
    text = re.sub(r"<[^>]+>", "", text)                           # inline HTML
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
    found, seen = set(), {}
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line number, target) of every relative link outside code."""
    found = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        line = CODE_SPAN.sub("code", line)
        for target in LINK.findall(line):
            if not SCHEME.match(target):
                found.append((number, target))
    return found


def test_the_slug_rule():
    assert slug("The GIL, and a Python of its own") == "the-gil-and-a-python-of-its-own"
    assert slug("PyTorch/XLA's own test suite") == "pytorchxlas-own-test-suite"
    assert slug("The C product pool (`interpreter/native/gemm_pool.c`)") == \
        "the-c-product-pool-interpreternativegemm_poolc"
    assert slug("AVX2 without AVX-512, OpenBLAS's Haswell kernels") == \
        "avx2-without-avx-512-openblass-haswell-kernels"


def test_the_link_reader_skips_code_and_other_sites(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[a](x.md#b) `[c](d.md)` [e](https://example.org/f)\n```\n[g](h.md)\n```\n"
                    "![i](img.png \"title\")\n", encoding="utf-8")
    assert links(page) == [(1, "x.md#b"), (5, "img.png")]


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(document):
    broken = []
    for number, target in links(document):
        path_part, _, anchor = target.partition("#")
        destination = (document.parent / path_part).resolve() if path_part else document
        where = f"{document.relative_to(REPO)}:{number}: {target}"
        if not destination.is_relative_to(REPO) or not destination.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{where} (no heading with that anchor in {destination.relative_to(REPO)})")
    assert broken == []


def test_the_readme_is_a_front_door():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; at most {README_MAX_LINES}: details go to docs/ "
        "(status.md, architecture.md, performance-design.md) and benchmarks/README.md")
