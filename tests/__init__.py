"""pjrt-ref's tests, a package so that their helpers are one too (`tests.support`).

Why a package: with this file, pytest (its default "prepend" import mode)
imports tests/conftest.py as `tests.conftest` and so puts the repository
root first on `sys.path`; every test then imports its helpers as
`from tests.support.oracle import ...`, with no `sys.path` surgery. Test
files themselves stay plain modules (their folders have no __init__.py), so
their names stay short in pytest's output. A child process that imports
the helpers needs the repository root on its path (`repo_paths.REPO`).
"""
