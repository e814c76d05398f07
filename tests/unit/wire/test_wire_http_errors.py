"""The jobs API's error table: every domain error gets the HTTP status and code it always got."""

from __future__ import annotations

from pathlib import Path

import pytest

from rbs.cas.errors import BlobNotFound, CorruptBlob, DigestMismatch, InvalidDigest, StoreFull
from rbs.model import Digest, DigestFunction
from rbs.units import SpecError
from rbs.wire.errors import (
    HTTP_STATUS,
    FailedPrecondition,
    InvalidRequest,
    NotFound,
    StorageFull,
    Unauthenticated,
    http_error,
    register_http_error,
)

D = Digest.of(b"x", DigestFunction.BLAKE3)


@pytest.mark.parametrize(
    ("exc", "answer"),
    [
        (Unauthenticated("no token"), (401, "UNAUTHENTICATED")),
        (FailedPrecondition("upload it first"), (412, "FAILED_PRECONDITION")),
        (NotFound("no such job"), (404, "NOT_FOUND")),
        (InvalidRequest("want {...}"), (400, "INVALID_ARGUMENT")),
        (SpecError("--time", "soon", "not a duration", "1h"), (400, "INVALID_ARGUMENT")),
        (ValueError("malformed digest"), (400, "INVALID_ARGUMENT")),
        (BlobNotFound(D), (404, "NOT_FOUND")),
        # A corrupt blob has been removed: missing now, as over gRPC.
        (CorruptBlob(D), (404, "NOT_FOUND")),
        # Unlike gRPC (RESOURCE_EXHAUSTED), the jobs API has always answered every other
        # CAS error as the request's fault.
        (DigestMismatch(D, Digest.of(b"y", DigestFunction.BLAKE3)), (400, "INVALID_ARGUMENT")),
        (InvalidDigest("short hash"), (400, "INVALID_ARGUMENT")),
        (StoreFull(Path("/cas")), (507, "RESOURCE_EXHAUSTED")),
        # The job journal or log store cannot be written: the operator frees space.
        (StorageFull("free space under /data"), (507, "RESOURCE_EXHAUSTED")),
    ],
)
def test_each_domain_error_has_its_status_and_code(exc: Exception, answer: tuple[int, str]) -> None:
    assert http_error(exc) == answer


def test_other_errors_are_not_domain_errors() -> None:
    assert http_error(RuntimeError("bug")) is None
    assert http_error(KeyError("k")) is None


def test_the_statuses_are_the_documented_ones() -> None:
    assert HTTP_STATUS == {
        "INVALID_ARGUMENT": 400,
        "UNAUTHENTICATED": 401,
        "PERMISSION_DENIED": 403,
        "NOT_FOUND": 404,
        "FAILED_PRECONDITION": 412,
        "INTERNAL": 500,
        "RESOURCE_EXHAUSTED": 507,
    }


def test_a_registered_error_wins_over_the_rows_below_it() -> None:
    class Busy(ValueError):
        pass

    assert http_error(Busy("x")) == (400, "INVALID_ARGUMENT")
    register_http_error(Busy, "FAILED_PRECONDITION")
    assert http_error(Busy("x")) == (412, "FAILED_PRECONDITION")


def test_an_error_registered_without_a_code_names_its_own() -> None:
    class Refused(Exception):
        def __init__(self, message: str, code: str = "INVALID_ARGUMENT") -> None:
            super().__init__(message)
            self.code = code

    register_http_error(Refused)
    assert http_error(Refused("no")) == (400, "INVALID_ARGUMENT")
    assert http_error(Refused("unknown job id 9", "NOT_FOUND")) == (404, "NOT_FOUND")
    assert http_error(Refused("odd", "ABORTED")) == (500, "ABORTED")  # no status: 500
