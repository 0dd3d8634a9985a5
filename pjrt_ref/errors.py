"""Errors raised inside pjrt-ref, each carrying a PJRT error code.

The C-API layer turns any `PjrtRefError` into a `PJRT_Error` with the same
code; any other exception becomes INTERNAL. The codes are those of
`PJRT_Error_Code` in pjrt_c_api.h (which mirror absl::StatusCode).
"""
from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """`PJRT_Error_Code` values (pjrt_c_api.h)."""

    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class PjrtRefError(Exception):
    """Base class: an error with a PJRT code and a readable message."""

    code: ErrorCode = ErrorCode.UNKNOWN

    def __init__(self, message: str, *, op: str | None = None, location: str | None = None):
        self.detail = message
        self.op = op
        self.location = location
        prefix = ""
        if op:
            prefix += f"'{op}'"
        if location:
            prefix += f" at {location}"
        super().__init__(f"{prefix}: {message}" if prefix else message)

    def __reduce__(self):
        """This module's errors pickle as (class name, message, op, location):
        the bytecode checker sends its errors back this way, and the host
        unpickles nothing but names of this module (bytecode_guard.py)."""
        if type(self).__module__ != __name__:
            return super().__reduce__()
        return rebuild_error, (type(self).__name__, self.detail, self.op, self.location)


class InvalidArgument(PjrtRefError):
    code = ErrorCode.INVALID_ARGUMENT


class Unimplemented(PjrtRefError):
    code = ErrorCode.UNIMPLEMENTED


class NotFound(PjrtRefError):
    code = ErrorCode.NOT_FOUND


class FailedPrecondition(PjrtRefError):
    code = ErrorCode.FAILED_PRECONDITION


class ResourceExhausted(PjrtRefError):
    code = ErrorCode.RESOURCE_EXHAUSTED


class OutOfRange(PjrtRefError):
    code = ErrorCode.OUT_OF_RANGE


class Internal(PjrtRefError):
    code = ErrorCode.INTERNAL


class Unavailable(PjrtRefError):
    code = ErrorCode.UNAVAILABLE


class DeadlineExceeded(PjrtRefError):
    code = ErrorCode.DEADLINE_EXCEEDED


class Cancelled(PjrtRefError):
    code = ErrorCode.CANCELLED


class AlreadyExists(PjrtRefError):
    code = ErrorCode.ALREADY_EXISTS


def rebuild_error(class_name: str, message: str, op: str | None, location: str | None) -> PjrtRefError:
    """The error `PjrtRefError.__reduce__` describes (only this module's classes)."""
    cls = globals().get(class_name)
    if not (isinstance(cls, type) and issubclass(cls, PjrtRefError)):
        cls = Internal
    return cls(message, op=op, location=location)
