"""Where the tests find things: the repository, and tests/ with its data, support and scripts folders."""
from __future__ import annotations

import pathlib

TESTS = pathlib.Path(__file__).resolve().parent.parent
REPO = TESTS.parent
DATA = TESTS / "data"
SUPPORT = TESTS / "support"
SCRIPTS = TESTS / "scripts"
