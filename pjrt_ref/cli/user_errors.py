"""What the commands report as the user's mistake (one line on stderr, exit 2) rather than a crash."""
from __future__ import annotations

import json

from pjrt_ref.errors import PjrtRefError

USER_INPUT_ERRORS = (OSError, json.JSONDecodeError, UnicodeDecodeError, PjrtRefError)


def describe(error: BaseException) -> str:
    """One line for the user: the file a system error names, or the error's own message."""
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.strerror or error}: {error.filename}"
    if isinstance(error, json.JSONDecodeError):
        return f"not a JSON file ({error})"
    return str(error)
