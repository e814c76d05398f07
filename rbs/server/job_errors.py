"""The job driver's refusals of client requests, with the status code each names."""

from __future__ import annotations


class JobRequestError(Exception):
    """A client request the scheduler refused; `code` is an HTTP-ish status name."""

    def __init__(self, message: str, code: str = "INVALID_ARGUMENT") -> None:
        super().__init__(message)
        self.code = code
