"""The dashboard in a real browser: Debian's chromium driven by Selenium through
/usr/bin/chromedriver (never a driver fetched from the network).

Logs in with a token, opens every page, follows a running job's log as it grows, searches
it, cancels a job with its button and checks the result, and checks that no page loads or
links anything outside the server. Screenshots go to the test's folder (`screenshots/`),
or to $RBS_SCREENSHOTS when set.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[3] / "integration" / "server" / "jobs"))

from test_job_auth import AuthCluster

from rbs.server.tokens import add_token

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _skip_reason() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (make setup installs it from requirements.lock)"
    for p in (CHROMIUM, CHROMEDRIVER):
        if not os.access(p, os.X_OK):
            return (
                f"{p} is missing: `make system-deps` installs Debian's chromium and chromium-driver"
            )
    return None


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        opts.add_argument(a)
    opts.add_argument("--window-size=1280,900")
    opts.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    service = Service(str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log"))
    try:
        driver = webdriver.Chrome(service=service, options=opts)
    except WebDriverException as e:
        pytest.skip(f"chromium did not start under chromedriver: {e.msg}")
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    d = Path(os.environ.get("RBS_SCREENSHOTS") or tmp_path / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[AuthCluster, dict[str, str]]]:
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


def _until(driver: Any, what: str, check: Any, timeout: float = 60) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(
        lambda d: check(d), message=f"waited {timeout} s for {what}"
    )


def _external(driver: Any, base: str) -> list[str]:
    """Every URL the page references (src, href, form actions, and what it loaded) that
    is not on this server."""
    urls = driver.execute_script(
        "const u = [];"
        "document.querySelectorAll('[src],[href]').forEach(e => u.push(e.src || e.href));"
        "document.querySelectorAll('form').forEach(f => u.push(f.action));"
        "performance.getEntriesByType('resource').forEach(r => u.push(r.name));"
        "return u;"
    )
    return [u for u in urls if u and not u.startswith(base + "/")]


def test_dashboard_in_chromium(
    browser: Any, shots: Path, cluster: tuple[AuthCluster, dict[str, str]]
) -> None:
    from selenium.webdriver.common.by import By

    c, tokens = cluster
    alice = c.as_(tokens["alice"])
    base = f"http://127.0.0.1:{c.port + 1}"
    script = "for i in $(seq 1 40); do echo step-$i; sleep 0.25; done; echo all-done"
    talker = alice.submit(["sh", "-c", script], name="talker")
    sleeper = alice.submit(["sleep", "300"], name="sleeper")
    bobs = c.as_(tokens["bob"]).submit(["sleep", "300"], name="bobs-job")
    done = alice.submit(["sh", "-c", "echo finished"], name="quick")
    c.wait(done)

    b = browser
    b.get(base + "/ui/jobs")
    _until(b, "the login form", lambda d: d.find_elements(By.ID, "token"))
    b.save_screenshot(str(shots / "login.png"))
    b.find_element(By.ID, "token").send_keys("wrong")
    b.find_element(By.CSS_SELECTOR, "#login button").click()
    _until(b, "the refusal", lambda d: "wrong token" in d.page_source)
    b.get_log("browser")  # drained: the 401 of that refused login is expected
    b.find_element(By.ID, "token").send_keys(tokens["alice"])
    b.find_element(By.CSS_SELECTOR, "#login button").click()
    _until(b, "the jobs table", lambda d: d.find_elements(By.ID, "jobs"))
    assert "alice" in b.find_element(By.CSS_SELECTOR, "nav .who").text
    rows = b.find_element(By.ID, "jobs").text
    assert "talker" in rows and "bobs-job" in rows and "quick" not in rows
    b.save_screenshot(str(shots / "jobs.png"))
    assert _external(b, base) == []

    b.get(base + "/ui/jobs?history=1&name=qu*")
    _until(b, "the filtered table", lambda d: "quick" in d.find_element(By.ID, "jobs").text)
    assert "talker" not in b.find_element(By.ID, "jobs").text
    b.get(base + "/ui/jobs?history=1&sort=id&order=desc")
    ids = [e.text for e in b.find_elements(By.CSS_SELECTOR, "#jobs tbody td:first-child")]
    assert ids == sorted(ids, key=int, reverse=True) and len(ids) == 4

    # The log follows while the job runs, then says how it ended.
    b.get(f"{base}/ui/jobs/{talker}")
    _until(b, "the log to start", lambda d: "step-" in d.find_element(By.ID, "log").text)
    first = b.find_element(By.ID, "log").text.count("step-")
    _until(b, "the log to grow", lambda d: d.find_element(By.ID, "log").text.count("step-") > first)
    _until(b, "the job's end", lambda d: "the job ended: COMPLETED" in d.page_source, 120)
    log = b.find_element(By.ID, "log").text
    assert "step-1\n" in log and "step-40" in log and "all-done" in log
    b.find_element(By.ID, "log-search").send_keys("step-3")
    shown = [e for e in b.find_elements(By.CSS_SELECTOR, "#log div") if e.is_displayed()]
    assert [e.text for e in shown] == ["step-3"] + [f"step-{i}" for i in range(30, 40)]
    b.save_screenshot(str(shots / "job-log.png"))
    assert _external(b, base) == []
    assert b.find_element(By.ID, "log-download").get_attribute("href").endswith("?download=1")

    # Bob's job: she sees it, with no button.
    b.get(f"{base}/ui/jobs/{bobs}")
    _until(b, "bob's job", lambda d: d.find_elements(By.ID, "cancel-refused"))
    assert not b.find_elements(By.ID, "cancel")

    # Her own: the button cancels it.
    b.get(f"{base}/ui/jobs/{sleeper}")
    _until(b, "the cancel button", lambda d: d.find_elements(By.CSS_SELECTOR, "#cancel button"))
    b.find_element(By.CSS_SELECTOR, "#cancel button").click()
    assert c.wait(sleeper).state == "CANCELLED"
    b.get(f"{base}/ui/jobs/{sleeper}")
    summary = b.find_element(By.ID, "summary").text
    assert "CANCELLED" in summary and not b.find_elements(By.ID, "cancel")
    b.save_screenshot(str(shots / "job-cancelled.png"))

    for page, marker in (("workers", "workers"), ("queues", "queues"), ("builds", "executions")):
        b.get(f"{base}/ui/{page}")
        _until(b, f"the {page} table", lambda d, m=marker: d.find_elements(By.ID, m))
        assert _external(b, base) == []
        b.save_screenshot(str(shots / f"{page}.png"))
    b.get(f"{base}/ui/workers")
    assert "CONNECTED" in b.find_element(By.ID, "workers").text

    # No script error, no failed load on any page since the login.
    assert [e for e in b.get_log("browser") if e.get("level") == "SEVERE"] == []
    if os.environ.get("RBS_SCREENSHOTS_DOCS"):
        shutil.copy(shots / "job-log.png", os.environ["RBS_SCREENSHOTS_DOCS"])
