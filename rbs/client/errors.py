"""The client's one error type: a request the cluster refused, or a job it cannot submit."""

from __future__ import annotations


class JobError(Exception):
    """A request the cluster refused; the message says why and what to do."""
