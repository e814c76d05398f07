"""The dashboard over HTTP: pages, the open embedded cluster, login, CSRF, ownership."""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "jobs"))

from dashboard_client import Browser, external_refs
from job_cluster_fixtures import cluster
from jobs_harness import JobCluster, wait_for
from test_job_auth import AuthCluster

from rbs.server.tokens import add_token

__all__ = ["cluster"]

pytestmark = pytest.mark.timeout(180)


def base(c: JobCluster) -> str:
    return f"http://127.0.0.1:{c.port + 1}"


def test_open_cluster_pages_follow_and_cancel(cluster: JobCluster) -> None:
    client = cluster.client()
    done = client.submit(["sh", "-c", "echo hello-dashboard; echo oops >&2"], name="greet")
    cluster.wait(done)
    sleeper = client.submit(["sh", "-c", "echo started; sleep 300"], name="sleeper", cpus=2)
    b = Browser(base(cluster))

    status, path, page = b.get("/")  # no login on 127.0.0.1: straight to the jobs
    assert (status, path) == (200, "/ui/jobs")
    cookie = b.cookies()["rbs_session"]
    assert cookie.has_nonstandard_attr("HttpOnly")
    assert f'href="/ui/jobs/{sleeper}"' in page and "greet" not in page  # active jobs only
    _, _, page = b.get("/ui/jobs?history=1&name=gr*")
    assert f'href="/ui/jobs/{done}"' in page and "sleeper" not in page
    assert "1 shown of 1 matching jobs" in page
    _, _, page = b.get("/ui/jobs?state=NOPE")
    assert "unknown state" in page

    _, _, page = b.get(f"/ui/jobs/{done}")
    assert "COMPLETED" in page and 'id="attempts"' in page and "Cancel this job" not in page
    _, _, log = b.get(f"/ui/jobs/{done}/log")
    assert '"text": "hello-dashboard"' in log and '"stream": "err"' in log
    assert log.rstrip().endswith('{"end": true, "state": "COMPLETED"}')
    status, _, text = b.get(f"/ui/jobs/{done}/log?download=1")
    assert status == 200 and "hello-dashboard\n" in text and "oops\n" in text

    wait_for("the sleeper to run", lambda: client.show(sleeper).state == "RUNNING" or None)
    _, _, page = b.get(f"/ui/jobs/{sleeper}")
    assert "Cancel this job" in page
    resources = page.split('id="resource-table"')[1].split("</table>")[0]
    assert re.search(r"<td>cpu</td><td>2</td><td>flag --cpus</td>", resources), resources
    assert re.search(r"<td>memory</td><td>[^<]+</td><td>default</td>", resources), resources
    status, _, _ = b.post(f"/ui/jobs/{sleeper}/cancel", {"csrf": "forged"})
    assert status == 403
    assert client.show(sleeper).state == "RUNNING"
    status, path, page = b.post(f"/ui/jobs/{sleeper}/cancel", {"csrf": b.csrf(page)})
    assert (status, path) == (200, f"/ui/jobs/{sleeper}")
    assert cluster.wait(sleeper).state == "CANCELLED"

    _, _, workers = b.get("/ui/workers")
    assert 'id="workers"' in workers and "CONNECTED" in workers
    _, _, queues = b.get("/ui/queues")
    queue = client.show(done).queue
    assert f'href="/ui/jobs?queue={queue}"' in queues
    assert "No reservation." in queues
    body = json.dumps(
        {
            "name": "maint-1",
            "start": time.time() + 3600,
            "end": time.time() + 7200,
            "workers": [],
            "reason": "kernel upgrade",
        }
    ).encode()
    r = urllib.request.Request(f"{base(cluster)}/v1/reservations", data=body, method="POST")
    with urllib.request.urlopen(r, timeout=30) as resp:
        assert resp.status == 200
    _, _, queues = b.get("/ui/queues")
    table = queues.split('id="reservations"')[1]
    assert "maint-1" in table and "every worker" in table and "kernel upgrade" in table
    for p in (page, workers, queues, log):
        assert external_refs(p) == []


def test_open_cluster_refuses_other_hosts(cluster: JobCluster) -> None:
    from rbs.server.dashboard import _loopback

    assert _loopback("127.0.0.1") and _loopback("::1")
    assert not _loopback("10.1.2.3") and not _loopback(None)


@pytest.fixture
def auth_cluster(tmp_path: Path) -> Iterator[tuple[AuthCluster, dict[str, str]]]:
    path = tmp_path / "tokens.toml"
    tokens = {
        n: add_token(path, n, r)
        for n, r in (("alice", "user"), ("bob", "user"), ("root", "admin"), ("w1", "worker"))
    }
    c = AuthCluster(tmp_path / "server", path)
    c.admin = tokens["root"]
    try:
        c.token_worker(tmp_path / "w1", tokens["w1"])
        yield c, tokens
    finally:
        c.stop()


def login(b: Browser, token: str) -> tuple[int, str, str]:
    _, path, page = b.get("/ui/jobs")
    assert path == "/ui/login"
    return b.post("/ui/login", {"csrf": b.csrf(page), "token": token})


def test_login_cookie_csrf_and_ownership(auth_cluster: tuple[AuthCluster, dict[str, str]]) -> None:
    cluster, tokens = auth_cluster
    bobs = cluster.as_(tokens["bob"]).submit(["sleep", "300"], name="bobs")
    alices = cluster.as_(tokens["alice"]).submit(["sleep", "300"], name="alices")

    b = Browser(base(cluster))
    status, path, page = b.get("/ui/jobs")
    assert (status, path) == (200, "/ui/login") and 'id="login"' in page
    status, _, page = b.post("/ui/login", {"csrf": "forged", "token": tokens["alice"]})
    assert status == 403
    status, _, page = login(b, "not-a-token")
    assert status == 401 and "wrong token" in page
    status, _, page = login(b, tokens["w1"])
    assert status == 401 and "not a user&#x27;s or an admin&#x27;s" in page

    status, path, page = login(b, tokens["alice"])
    assert (status, path) == (200, "/ui/jobs")
    assert f'href="/ui/jobs/{bobs}"' in page and f'href="/ui/jobs/{alices}"' in page
    _, _, page = b.get(f"/ui/jobs/{bobs}")  # she sees bob's job, with no cancel button
    assert "Cancel this job" not in page and "only bob or an admin may change it" in page
    csrf = b.csrf(page)  # her session's token (the log-out form)
    status, _, _ = b.post(f"/ui/jobs/{bobs}/cancel", {"csrf": csrf})
    assert status == 403
    status, _, _ = b.post(f"/ui/jobs/{alices}/cancel", {"csrf": csrf})
    assert status == 200
    assert cluster.wait(alices).state == "CANCELLED"
    assert cluster.client().show(bobs).state in ("PENDING", "RUNNING")

    anon = Browser(base(cluster))  # no cookie: no action
    assert anon.post(f"/ui/jobs/{bobs}/cancel", {"csrf": csrf})[0] == 403
    status, path, _ = b.post("/ui/logout", {"csrf": csrf})
    assert (status, path) == (200, "/ui/login")
    assert b.get("/ui/jobs")[1] == "/ui/login"

    admin = Browser(base(cluster))
    _, _, page = login(admin, tokens["root"])
    _, _, page = admin.get(f"/ui/jobs/{bobs}")
    assert "Cancel this job" in page
    assert admin.post(f"/ui/jobs/{bobs}/cancel", {"csrf": admin.csrf(page)})[0] == 200
    assert cluster.wait(bobs).state == "CANCELLED"


def test_outputs_are_listed_with_download_links(cluster: JobCluster) -> None:
    client = cluster.client()
    script = "mkdir -p res; echo first > out.txt; printf 'x%.0s' $(seq 1 5000) > res/big.bin"
    job = client.submit(["sh", "-c", script], outputs=["out.txt", "res/"])
    assert cluster.wait(job).state == "COMPLETED"
    b = Browser(base(cluster))
    _, _, page = b.get(f"/ui/jobs/{job}")
    outputs = page.split('id="outputs"')[1]
    links = dict(
        (name, href.replace("&amp;", "&"))
        for href, name in re.findall(r'<a href="(/ui/blobs/[^"]+)">([^<]+)</a>', outputs)
    )
    assert set(links) == {"out.txt", "res/big.bin"}, outputs
    status, _, body = b.get(links["out.txt"])
    assert (status, body) == (200, "first\n")
    status, _, body = b.get(links["res/big.bin"])
    assert status == 200 and body == "x" * 5000
    status, _, body = b.get("/ui/blobs/blake3/not-a-hash/12")
    assert status == 400 and "not-a-hash" in body
