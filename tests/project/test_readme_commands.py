"""The README starts with the two commands a newcomer runs, and CI runs exactly those.

`.ci/run` runs each of the README's first two `sh` blocks, line for line, from
the clone's root in a fresh venv; if either side changes alone, this fails."""
from __future__ import annotations

import re

from tests.support.repo_paths import REPO

SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def readme_commands() -> list[str]:
    blocks = SH_BLOCK.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 2, "README.md must open with two ```sh blocks"
    return [block.strip() for block in blocks[:2]]


def ci_lines() -> list[str]:
    return [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]


def test_the_readme_opens_with_the_two_commands():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    first_block = text.index("```sh")
    assert text[:first_block].count("\n#") == 0, "nothing but the title and a short introduction before the first command"
    install_and_run, install_and_test = readme_commands()
    assert install_and_run.startswith("pip install . &&")       # the non-editable install a user does
    assert install_and_test.startswith("pip install -e ")


def test_ci_runs_the_readmes_commands_as_written():
    lines = ci_lines()
    for command in readme_commands():
        for line in command.splitlines():
            assert line.strip() in lines, f".ci/run does not run the README's command {line!r}"


def test_ci_runs_each_command_in_a_fresh_venv_from_the_root():
    text = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'cd "$(dirname "$0")/.."' in text
    assert text.count("python -m venv") >= 2
    first, second = readme_commands()
    assert text.index("python -m venv") < text.index(first) < text.rindex("python -m venv") < text.index(second)
