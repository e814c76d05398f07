"""The server's tokens: the tokens file, the shared token, runs' scoped tokens, and refusal logs."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from rbs.scheduler.events import RunRef
from rbs.server.tokens import ServerAuth, add_token, advertised_address, hash_token, run_env
from rbs.wire.auth import (
    Principal,
    RefusalLog,
    Refused,
    Role,
    TokenError,
    bearer_token,
    grpc_refusal,
    http_refusal,
    owner_refusal,
)


def _entry(token: str, user: str, role: str) -> str:
    return f'[[token]]\nuser = "{user}"\nrole = "{role}"\nsha256 = "{hash_token(token)}"\n'


def _auth(tmp_path: Path, text: str | None = None, shared: str | None = None) -> ServerAuth:
    tokens = None
    if text is not None:
        tokens = tmp_path / "tokens.toml"
        tokens.write_text(text)
    token_file = None
    if shared is not None:
        token_file = tmp_path / "token"
        token_file.write_text(shared)
    return ServerAuth(data_dir=tmp_path, token_file=token_file, tokens_file=tokens)


def test_each_entry_of_the_tokens_file_is_a_user_with_a_role(tmp_path: Path) -> None:
    auth = _auth(tmp_path, _entry("a1", "alice", "user") + _entry("r1", "root", "admin"))
    alice = auth.authenticate("a1", "mallory")  # a claimed user is ignored with tokens
    assert (alice.user, alice.roles) == ("alice", frozenset({Role.USER}))
    root = auth.authenticate("r1", None)
    assert root.user == "root" and root.has(Role.ADMIN) and root.has(Role.USER)
    for bad in ("a2", "", "a1 "):
        with pytest.raises(Refused, match="wrong token"):
            auth.authenticate(bad, None)
    with pytest.raises(Refused, match="no authorization header"):
        auth.authenticate(None, None)


def test_the_tokens_file_never_holds_a_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    token = add_token(path, "alice", "worker")
    text = path.read_text()
    assert token not in text and hash_token(token) in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    auth = ServerAuth(data_dir=tmp_path, tokens_file=path)
    assert auth.authenticate(token, None).roles == frozenset({Role.WORKER})
    other = add_token(path, "bob", "user")
    assert other != token and len(ServerAuth(data_dir=tmp_path, tokens_file=path)._entries) == 2


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[[token]]\nuser = 'a'\nrole = 'user'\nsha256 = 'abc'\n", "64 lowercase hex"),
        (_entry("t", "a", "boss"), "role must be one of user, admin, worker"),
        (_entry("t", "a b", "user"), "user must be a name"),
        (_entry("t", "a", "user") + _entry("t", "b", "user"), "listed twice"),
        ("[[token]]\nuser = 'a'\nrole = 'user'\ntoken = 'x'\n", "unknown key 'token'"),
        ("[tokens]\n", "unknown key 'tokens'"),
        ("[[token]\n", "not valid TOML"),
    ],
)
def test_a_bad_tokens_file_is_refused_naming_the_entry(
    tmp_path: Path, text: str, match: str
) -> None:
    with pytest.raises(TokenError, match=match):
        _auth(tmp_path, text)


def test_sighup_reload_takes_a_good_file_and_keeps_the_old_on_a_bad_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    auth = _auth(tmp_path, _entry("a1", "alice", "user"))
    path = tmp_path / "tokens.toml"
    path.write_text(_entry("b1", "bob", "user"))
    assert auth.reload()
    assert auth.authenticate("b1", None).user == "bob"
    with pytest.raises(Refused):
        auth.authenticate("a1", None)
    path.write_text("not toml [")
    with caplog.at_level(logging.ERROR):
        assert not auth.reload()
    assert "kept the tokens loaded before" in caplog.text and "not valid TOML" in caplog.text
    assert auth.authenticate("b1", None).user == "bob"


def test_the_shared_token_is_admin_and_worker_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        auth = _auth(tmp_path, shared="s3cret")
    assert "acts as admin and as worker" in caplog.text and "s3cret" not in caplog.text
    p = auth.authenticate("s3cret", "alice")
    assert p.has(Role.ADMIN) and p.has(Role.WORKER) and p.user == "alice"
    with pytest.raises(Refused):
        auth.authenticate("s3cre", None)


def test_without_tokens_everyone_is_the_user_they_claim(tmp_path: Path) -> None:
    auth = _auth(tmp_path)
    assert not auth.enabled and auth.describe() == "off"
    p = auth.authenticate(None, "alice")
    assert p.user == "alice" and not p.authenticated and p.has(Role.ADMIN)
    assert auth.authenticate("anything", "bad\nname").user == "unknown"


def test_a_run_token_lives_exactly_as_long_as_its_run(tmp_path: Path) -> None:
    auth = _auth(tmp_path, _entry("a1", "alice", "user"))
    live = {RunRef(job_id=7, attempt=1)}
    auth.run_user = lambda run: "alice" if run in live else None
    token = auth.mint("7.1.0")
    assert token == auth.mint("7.1.0") and token != auth.mint("7.2.0")
    p = auth.authenticate(token, None)
    assert p == Principal(user="alice", roles=frozenset({Role.RUN}), run="7.1.0", job_id=7)
    # A forged or altered token is refused, as is one of another server (another key).
    with pytest.raises(Refused, match="wrong token"):
        auth.authenticate(token[:-1] + ("0" if token[-1] != "0" else "1"), None)
    with pytest.raises(Refused, match="wrong token"):
        auth.authenticate(token.replace("7.1.0", "8.1.0"), None)
    live.clear()
    with pytest.raises(Refused, match="expired when the run ended"):
        auth.authenticate(token, None)


def test_the_run_key_is_kept_with_its_journal_and_new_for_a_new_one(tmp_path: Path) -> None:
    first = _auth(tmp_path).mint("1.1.0")
    (tmp_path / "jobs.db").write_bytes(b"")  # a journal now exists: the key stays
    assert _auth(tmp_path).mint("1.1.0") == first
    key = tmp_path / "run_tokens.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    (tmp_path / "jobs.db").unlink()  # a new journal: its lease ids repeat, so a new key
    assert _auth(tmp_path).mint("1.1.0") != first


def test_runs_get_the_address_and_their_token(tmp_path: Path) -> None:
    auth = _auth(tmp_path)
    env = dict(run_env(auth, "10.0.0.1:8980")("3.1.0"))
    assert env == {"RBS_REMOTE": "10.0.0.1:8980", "RBS_REMOTE_TOKEN": auth.mint("3.1.0")}
    assert advertised_address("127.0.0.1", 5) == "127.0.0.1:5"
    assert not advertised_address("0.0.0.0", 5).startswith("0.0.0.0")


def test_the_bearer_scheme_is_read_in_any_case() -> None:
    assert bearer_token("Bearer abc") == bearer_token("bEARER abc") == "abc"
    assert bearer_token(None) is None
    with pytest.raises(Refused, match="not a Bearer"):
        bearer_token("Basic abc")
    with pytest.raises(Refused):
        bearer_token("Bearer ")


def test_refusals_are_logged_at_a_bounded_rate(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    refusals = RefusalLog(burst=3, window=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="rbs.wire.auth"):
        for _ in range(1000):
            refusals.refused("GET /v1/jobs", "1.2.3.4", "wrong token")
        assert len(caplog.records) == 3
        now[0] = 61.0
        refusals.refused("GET /v1/jobs", "1.2.3.4", "wrong token")
    assert len(caplog.records) == 4
    assert "997 more refused calls not logged" in caplog.records[-1].getMessage()


USER = Principal(user="alice", roles=frozenset({Role.USER}))
ADMIN = Principal(user="root", roles=frozenset({Role.USER, Role.ADMIN}))
WORKER = Principal(user="w", roles=frozenset({Role.WORKER}))
RUN = Principal(user="alice", roles=frozenset({Role.RUN}), run="5.1.0", job_id=5)
CONNECT = "/rbs.v1.Workers/Connect"


def test_who_may_call_what_over_grpc() -> None:
    assert grpc_refusal(WORKER, CONNECT) is None
    for p in (USER, ADMIN, RUN):
        assert grpc_refusal(p, CONNECT) is not None
    assert grpc_refusal(RUN, "/rbs.v1.Workers/Status") is not None
    for method in (
        "/build.bazel.remote.execution.v2.Execution/Execute",
        "/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs",
        "/google.bytestream.ByteStream/Write",
        "/build.bazel.remote.execution.v2.ActionCache/GetActionResult",
    ):
        assert grpc_refusal(RUN, method) is None and grpc_refusal(USER, method) is None
    ops = "/google.longrunning.Operations/"
    assert grpc_refusal(USER, ops + "ListOperations") is None
    assert grpc_refusal(RUN, ops + "ListOperations") is not None
    for verb in ("CancelOperation", "DeleteOperation"):
        assert grpc_refusal(ADMIN, ops + verb) is None
        assert grpc_refusal(USER, ops + verb) is not None
        assert grpc_refusal(WORKER, ops + verb) is not None


def test_who_may_call_what_over_http() -> None:
    assert http_refusal(WORKER, "POST", "/v1/jobs") is not None
    assert http_refusal(WORKER, "GET", "/v1/jobs") is not None
    assert http_refusal(USER, "POST", "/v1/jobs/cancel") is None
    assert http_refusal(RUN, "POST", "/v1/jobs") is None
    assert http_refusal(RUN, "POST", "/v1/cas/missing") is None
    assert http_refusal(RUN, "GET", "/v1/jobs/6") is None  # then owner_refusal
    for method, path in (("POST", "/v1/jobs/cancel"), ("GET", "/v1/jobs"), ("GET", "/v1/status")):
        assert http_refusal(RUN, method, path) is not None


def test_a_user_changes_their_own_jobs_an_admin_every_job() -> None:
    assert owner_refusal(USER, 3, "alice", None) is None
    refusal = owner_refusal(USER, 3, "bob", None)
    assert refusal is not None and "belongs to bob" in refusal
    assert owner_refusal(ADMIN, 3, "bob", None) is None
    assert owner_refusal(RUN, 6, "alice", 5) is None  # its child
    assert owner_refusal(RUN, 5, "alice", None) is not None  # its own job: not a child


def test_the_tokens_file_is_a_server_config_key(tmp_path: Path) -> None:
    from rbs.server.config import config_from_dict

    config = config_from_dict({"server": {"tokens_file": str(tmp_path / "t.toml")}})
    assert config.server.tokens_file == tmp_path / "t.toml"


def test_a_user_name_with_a_quote_is_written_as_toml(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    token = add_token(path, 'o"neil\\x', "user")
    assert ServerAuth(data_dir=tmp_path, tokens_file=path).authenticate(token, None).user == (
        'o"neil\\x'
    )
