"""Job secrets end to end: in the job's environment, masked in its log, never stored in
clear, shown by name only, deleted when the job ends."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from jobs_harness import JobCluster, wait_for

from rbs.client.errors import JobError
from rbs.client.jobs import JobsClient
from rbs.wire import jobs_api_requests as req

SECRET = "hf_Zq8vN3kLmT5wXy2R"  # 18 characters


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def _raw_show(client: JobsClient, job: str) -> str:
    return json.dumps(client.conn.request("GET", req.job_path(job)).json())


def test_a_secret_reaches_the_job_and_appears_in_no_log_show_db_or_manifest(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    script = (
        'echo "token=$HF_TOKEN"; echo "x${HF_TOKEN}y" >&2; '
        f'[ "${{#HF_TOKEN}}" = {len(SECRET)} ] && echo same; '
        f"while [ ! -e {gate} ]; do sleep 0.01; done"
    )
    job = client.submit(["sh", "-c", script], secret=["HF_TOKEN"], secrets={"HF_TOKEN": SECRET})
    wait_for("the job to print", lambda: any(x.text == "same" for x in client.logs(job)))
    # While it runs: its value is stored, encrypted, nowhere in clear.
    stored = cluster.data_dir / "secrets" / job
    assert stored.is_file()
    key = cluster.data_dir / "secrets.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    needle = SECRET.encode()
    assert _files_holding(cluster.data_dir, needle) == []
    assert _files_holding(tmp_path / "w1", needle) == []
    assert SECRET not in _raw_show(client, job)
    gate.touch()
    info = cluster.wait(job)
    assert (info.state, info.exit_code) == ("COMPLETED", 0)
    texts = [(x.stream, x.text) for x in client.logs(job)]
    assert ("out", "token=***") in texts
    assert ("err", "x***y") in texts
    assert not any(SECRET in t for _, t in texts)
    shown = client.conn.request("GET", req.job_path(job)).json()
    assert shown["manifest"]["secrets"] == ["HF_TOKEN"]
    assert "HF_TOKEN" not in shown["manifest"]["env"]
    wait_for("the ended job's secrets to be deleted", lambda: not stored.exists())
    assert _files_holding(cluster.data_dir, needle) == []
    assert _files_holding(tmp_path / "w1", needle) == []


def test_every_attempt_gets_the_secret_until_the_job_has_ended(
    cluster: JobCluster, client: JobsClient
) -> None:
    script = f'[ "${{#TOKEN}}" = {len(SECRET)} ] || exit 9; [ "$RBS_ATTEMPT" = 2 ] || exit 3'
    job = client.submit(
        ["sh", "-c", script], max_retries=1, secret=["TOKEN"], secrets={"TOKEN": SECRET}
    )
    info = cluster.wait(job)
    assert (info.state, info.exit_code) == ("COMPLETED", 0)


@pytest.mark.parametrize(
    ("names", "values", "message"),
    [
        (["TOKEN"], {"TOKEN": "short"}, "at least 8"),
        (["TOKEN"], {}, "has no value"),
        ([], {"TOKEN": SECRET}, "does not name it"),
        (["RBS_TOKEN"], {"RBS_TOKEN": SECRET}, "set by the scheduler"),
        (["BIG"], {"BIG": "x" * (64 << 10)}, "env.size"),
    ],
)
def test_bad_secrets_are_refused_at_submit(
    client: JobsClient, names: list[str], values: dict[str, str], message: str
) -> None:
    flags = {"secret": names} if names else {}
    with pytest.raises(JobError) as e:
        client.submit(["true"], secrets=values, **flags)
    text = str(e.value)
    assert message in text or (message == "env.size" and "--env and --secret" in text)
    assert SECRET not in text


def test_env_and_secrets_share_the_env_limit(client: JobsClient) -> None:
    half = "x" * (40 << 10)
    with pytest.raises(JobError, match="--env and --secret"):
        client.submit(["true"], env=[f"A={half}"], secret=["B"], secrets={"B": half})


def test_a_new_first_key_line_re_encrypts_every_secret_at_the_next_start(
    tmp_path: Path,
) -> None:
    cluster = JobCluster(tmp_path / "server")
    try:
        client = cluster.client()
        # No worker: the job stays PENDING with its secret stored.
        check = ["sh", "-c", 'echo "$TOKEN"']
        job = client.submit(check, secret=["TOKEN"], secrets={"TOKEN": SECRET})
        stored = cluster.data_dir / "secrets" / job
        assert stored.is_file()
        cluster.stop_server()
        key_file = cluster.data_dir / "secrets.key"
        new_key = Fernet.generate_key()
        key_file.write_bytes(new_key + b"\n" + key_file.read_bytes())
        cluster.start_server()
        # Rotated: the new key alone decrypts it, so the old line may go.
        assert json.loads(Fernet(new_key).decrypt(stored.read_bytes())) == {"TOKEN": SECRET}
        cluster.add_worker(tmp_path / "w1")
        client = cluster.client()
        info = cluster.wait(job)
        assert info.state == "COMPLETED"
        assert [x.text for x in client.logs(job) if x.stream == "out"] == ["***"]
        wait_for("the ended job's secrets to be deleted", lambda: not stored.exists())
    finally:
        cluster.stop()
    assert os.listdir(tmp_path / "server" / "secrets") == []
