"""The jobs API's requests: the client's builders, the server's parsers, their schemas and errors."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from jobs_api_docs import load_requests, request_documents
from json_schema_lite import errors

from rbs.model import Digest, DigestFunction, JobManifest, Resources
from rbs.units import SpecError
from rbs.wire import jobs_api_requests as req
from rbs.wire.errors import InvalidRequest, http_error
from rbs.wire.jobs_api_schema import DRAFT, REQUEST_SCHEMAS
from rbs.wire.manifest import manifest_to_dict

RECORDED = load_requests()
ROOT = Digest.of(b"a tree", DigestFunction.BLAKE3)


def _query(path: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(path).query, keep_blank_values=True))


def _wire(body: dict[str, Any]) -> Any:
    """The body as the server reads it: JSON bytes, parsed."""
    return json.loads(json.dumps(body, separators=(",", ":")))


def test_the_record_covers_every_request_schema() -> None:
    used = {id(schema) for r in RECORDED for _, schema in request_documents(r)}
    assert used == {id(s) for s in REQUEST_SCHEMAS.values()}
    for schema in REQUEST_SCHEMAS.values():
        assert schema["$schema"] == DRAFT and schema["title"]


def test_every_recorded_request_satisfies_its_schema() -> None:
    problems = [
        f"{r['method']} {r['path']}: {e}"
        for r in RECORDED
        for doc, schema in request_documents(r)
        for e in errors(doc, schema)
    ]
    assert problems == []


def test_the_builders_make_the_recorded_requests() -> None:
    def sent(body: dict[str, Any]) -> str:
        return json.dumps(body, separators=(",", ":"))  # as rbs.client.http sends it

    bodies = {r.get("body") for r in RECORDED}
    assert sent(req.submit_flags_body(["sleep", "600"], {"--name": "sleeper"}, None)) in bodies
    assert sent(req.cancel_body(["6"])) in bodies
    paths = {r["path"] for r in RECORDED}
    assert req.jobs_path(["COMPLETED", "failed"], "batch", True) in paths
    assert req.jobs_path(queue="a b&c=d", history=True) in paths
    assert req.jobs_path() in paths
    assert req.logs_path("1", tail=1) in paths
    assert req.logs_path("5", follow=True) in paths
    assert req.logs_path("5_1", after=1) in paths
    assert req.wait_path("1", 30.0) in paths
    assert req.job_path(" 1") == "/v1/jobs/%201" and req.job_path(" 1") in paths
    assert req.outputs_path("1") in paths


def test_a_flags_submit_round_trips_into_a_manifest() -> None:
    body = req.submit_flags_body(
        ("python", "train.py"), {"--cpus": "2", "--time": "1h", "--env": ["A=1"]}, ROOT
    )
    assert body["input_root"] == str(ROOT)
    manifest, prov = req.submit_request(_wire(body))
    assert manifest.command == ("python", "train.py") and manifest.input_root == ROOT
    assert manifest.resources.cpu_millis == 2000 and manifest.time_limit == 3600
    assert manifest.env == (("A", "1"),)
    assert prov["time_limit"] == "flag --time" and prov["command"] == "flag --"


def test_a_manifest_submit_round_trips() -> None:
    m = JobManifest(name="m", command=("true",), resources=Resources(cpu_millis=250), priority=3)
    body = req.submit_manifest_body(m, {"*": "target //pkg:m"})
    assert body == {"manifest": manifest_to_dict(m), "provenance": {"*": "target //pkg:m"}}
    assert req.submit_request(_wire(body)) == (m, {"*": "target //pkg:m"})
    # Provenance may be left out, and its values are kept as text.
    assert req.submit_request({"manifest": {"command": ["true"]}})[1] == {}
    assert req.submit_request({"manifest": {"command": ["true"]}, "provenance": {"a": 1}})[1] == {
        "a": "1"
    }


def test_the_other_requests_round_trip() -> None:
    assert req.cancel_request(_wire(req.cancel_body(["12", "12_3", " 4"]))) == [
        (12, None),
        (12, 3),
        (4, None),
    ]
    assert req.list_query(_query(req.jobs_path(["completed", "FAILED"], "gpu", True))) == (
        frozenset({"COMPLETED", "FAILED"}),
        "gpu",
        True,
    )
    assert req.list_query({}) == (frozenset(), None, False)
    assert req.logs_query(_query(req.logs_path("1", after=7, follow=True, tail=3))) == (7, 3, True)
    assert req.logs_query({}) == (0, None, False)
    assert req.wait_timeout(_query(req.wait_path("1", 2.5))) == 2.5
    assert req.wait_timeout({}) == 30.0 and req.wait_timeout({"timeout": "9999"}) == 300.0
    assert req.job_ref("12_3") == (12, 3)
    other = Digest.of(b"x", DigestFunction.SHA256)
    assert req.missing_request(_wire(req.missing_body([ROOT, other]))) == [ROOT, other]
    blobs = [(ROOT, b"a tree"), (other, b"x")]
    assert req.batch_request(req.batch_body(blobs)) == blobs
    fn, h, size = req.blob_path(other).split("/")[-3:]
    assert req.blob_digest(fn, h, size) == other


@pytest.mark.parametrize(
    ("parse", "problem"),
    [
        (lambda: req.submit_request([]), 'want {"manifest"'),
        (lambda: req.submit_request({"command": ["x"]}), 'want {"manifest"'),
        (
            lambda: req.submit_request({"manifest": {"command": ["x"]}, "provenance": "x"}),
            "provenance",
        ),
        (lambda: req.submit_request({"command": "x", "flags": {}}), "command must be a list"),
        (lambda: req.submit_request({"command": ["x"], "flags": []}), "flags must be an object"),
        (
            lambda: req.submit_request({"command": ["x"], "flags": {}, "input_root": 3}),
            "input_root must be a digest string",
        ),
        (
            lambda: req.submit_request({"command": ["x"], "flags": {}, "input_root": "ab/1"}),
            "input_root: malformed digest 'ab/1'",
        ),
        (lambda: req.cancel_request({"ids": []}), 'want {"ids"'),
        (lambda: req.list_query({"state": "RUNNING,BOGUS"}), "--state BOGUS: unknown state"),
        (lambda: req.logs_query({"after": "x"}), "after='x': want a whole number"),
        (lambda: req.logs_query({"tail": "1.5"}), "tail='1.5': want a whole number"),
        (lambda: req.wait_timeout({"timeout": "soon"}), "timeout='soon': want seconds"),
        (lambda: req.missing_request({"digests": "x"}), 'want {"digests"'),
        (lambda: req.missing_request({"digests": ["x"]}), "digests[0]: malformed digest 'x'"),
        (lambda: req.batch_request(b"[]"), "want a JSON list of digests, a newline"),
        (lambda: req.batch_request(b"{not json\n"), "the first line is not JSON"),
        (lambda: req.batch_request(b'{"a": 1}\n'), "must be a JSON list of digests"),
        (lambda: req.batch_request(req.batch_body([(ROOT, b"a tre")])), "holds 5 bytes"),
        (lambda: req.blob_digest("md5", "ab", "1"), "unknown digest function 'md5'"),
        (lambda: req.blob_digest("blake3", ROOT.hash, "x"), "blob size 'x'"),
        (lambda: req.blob_digest("blake3", "AB", "1"), "malformed blake3 hash"),
    ],
)
def test_a_malformed_request_is_an_invalid_request_naming_the_problem(
    parse: Any, problem: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse()
    assert problem in str(err.value)
    assert http_error(err.value) == (400, "INVALID_ARGUMENT")


@pytest.mark.parametrize(
    ("parse", "problem"),
    [
        (lambda: req.cancel_request({"ids": ["x"]}), "job id 'x': not a job id"),
        (lambda: req.job_ref("1_a"), "'a' is not an array index"),
        (
            lambda: req.submit_request({"command": ["x"], "flags": {"--time": "soon"}}),
            "--time 'soon': not a duration",
        ),
        (lambda: req.submit_request({"manifest": {"command": []}}), "command is empty"),
    ],
)
def test_a_bad_value_inside_a_request_is_a_spec_error_naming_it(parse: Any, problem: str) -> None:
    with pytest.raises(SpecError) as err:
        parse()
    assert problem in str(err.value)
    assert http_error(err.value) == (400, "INVALID_ARGUMENT")
