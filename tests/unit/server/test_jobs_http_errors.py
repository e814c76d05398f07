"""The jobs API answers the job driver's refusals with the code each one names."""

from __future__ import annotations

import pytest

from rbs.server.job_driver import JobRequestError
from rbs.server.jobs_http import JobsApi
from rbs.wire.errors import http_error


@pytest.mark.parametrize(
    ("exc", "answer"),
    [
        (JobRequestError("refused"), (400, "INVALID_ARGUMENT")),
        (JobRequestError("unknown job id 9", "NOT_FOUND"), (404, "NOT_FOUND")),
        (JobRequestError("internal scheduler error: x", "INTERNAL"), (500, "INTERNAL")),
    ],
)
def test_the_job_drivers_refusals_keep_their_codes(
    exc: JobRequestError, answer: tuple[int, str]
) -> None:
    assert JobsApi.__module__ == "rbs.server.jobs_http"  # importing it registers the error
    assert http_error(exc) == answer
