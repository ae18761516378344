"""Exceptions mapped from the C API's status codes (tandem_status in tandem.h).

Each also derives from the built-in exception a Python caller would expect for that kind
of failure, so `except ValueError` or `except MemoryError` keeps working.
"""
from __future__ import annotations


class TandemError(Exception):
    """A tandem_* call failed. `status` is the C API's code, the message its tandem_last_error()."""

    status: int = 0

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgumentError(TandemError, ValueError):
    """TANDEM_ERR_INVALID_ARGUMENT: a bad option value, a prompt too long, a token outside the vocabulary."""

    status = -1


class LoadError(TandemError, OSError):
    """TANDEM_ERR_LOAD: the model file is missing, unreadable, corrupt or unsupported, or the draft incompatible."""

    status = -2


class BufferTooSmallError(TandemError):
    """TANDEM_ERR_BUFFER_TOO_SMALL: never escapes the package (it sizes its buffers); listed for completeness."""

    status = -3


class OutOfMemoryError(TandemError, MemoryError):
    """TANDEM_ERR_OUT_OF_MEMORY."""

    status = -4


class GenerationError(TandemError, RuntimeError):
    """TANDEM_ERR_RUNTIME: a failure while generating (e.g. the KV cache is full)."""

    status = -5


class InternalError(TandemError, RuntimeError):
    """TANDEM_ERR_INTERNAL: unexpected failure inside the library (a bug: please report it)."""

    status = -6


_BY_STATUS: dict[int, type[TandemError]] = {
    cls.status: cls
    for cls in (InvalidArgumentError, LoadError, BufferTooSmallError, OutOfMemoryError, GenerationError, InternalError)
}


def error_for(status: int, message: str) -> TandemError:
    """The exception for a failed call's status; an unknown code (a newer library) is a TandemError."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        return TandemError(f"{message} (status {status})", status)
    return cls(message)
