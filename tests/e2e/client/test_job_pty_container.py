"""`rbs job submit -i --pty --container IMAGE -- sh` in a real terminal (tmux), real podman.

The payload gets a terminal of the engine's (as `docker run -it`), joined to the run's:
it is a tty, its size is the client's, ^C interrupts what the shell runs, a reattach
redraws (the foreground program gets SIGWINCH), and the exit code is the client's.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from embedded import EmbeddedCluster
from podman_image import CONF, MISSING, build_image, podman
from tmux_term import TMUX, Tmux

CLUSTER = EmbeddedCluster(env={"RBS_CONTAINER_PULL": "no"}, timeout=300)
RBS = f"{shlex.quote(sys.executable)} -m rbs"
pytestmark = [
    pytest.mark.skipif(MISSING is not None, reason=MISSING or ""),
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed (make system-deps)"),
    pytest.mark.timeout(600),
]
LOOP = "sh -c \"trap 'echo redrawn' WINCH; echo looping; while :; do sleep 0.2; done\""


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("image")
    conf = folder / "containers.conf"
    conf.write_text(CONF)
    ref, _ = build_image(folder, conf)
    try:
        yield ref
    finally:
        podman(conf, "rmi", "-f", ref, check=False)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with CLUSTER.running(tmp_path_factory) as home:
        yield home


def test_a_shell_in_a_container_on_a_terminal(home: Path, image: str, tmp_path: Path) -> None:
    tmux = Tmux(tmp_path / "tmux.sock", CLUSTER.env(home) | {"TERM": "xterm", "PS1": "outer$ "})
    tmux.start(cols=100, rows=30)
    try:
        tmux.type(f"cd {shlex.quote(str(home))}")
        tmux.type(f"{RBS} job submit -i --pty --container {image} -- sh; echo client-exit=$?")
        job = tmux.wait_for(r"^rbs: job (\d+)$").group(1)
        # Typed at once, while the worker still starts its engine and looks up the
        # image: the worker holds it until the run has started.
        tmux.type("cat /etc/rbs-marker >/dev/null && echo in-image-$((3+4))")
        tmux.wait_for(r"^in-image-7$")
        for i in range(100):  # the size reaches the container once the job runs: ask again
            tmux.type(f"busybox stty size; echo asked-{i}")
            tmux.wait_for(rf"^asked-{i}$")
            if "\n30 100\n" in tmux.screen():
                break
        tmux.type("busybox tty")
        tmux.wait_for(r"^/dev/pts/\d+$")

        # ^C is the container's terminal's: it interrupts the loop, the shell goes on.
        tmux.type(LOOP)
        tmux.wait_for(r"^looping$")
        assert "\nredrawn" not in tmux.screen()
        tmux.type("~.", enter=False)  # detach; reattach: the loop in the foreground redraws
        tmux.wait_for(r"^client-exit=0$")
        tmux.type(f"{RBS} job attach {job}; echo attach-exit=$?")
        tmux.wait_for(r"^redrawn$")
        tmux("send-keys", "-t", "t", "C-c")
        tmux.type("echo alive-$((1+1))")
        tmux.wait_for(r"^alive-2$")
        tmux.type("exit 5")
        tmux.wait_for(r"^attach-exit=5$")
    finally:
        tmux.kill()
    r = CLUSTER.rbs(home, "job", "logs", job)
    assert r.returncode == 0 and "alive-2" in r.stdout.splitlines(), r.stdout


def test_interactive_stdin_from_a_pipe_reaches_the_container(home: Path, image: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rbs", "job", "submit", "-i", "--container", image, "--",
         "sh", "-c", "cat; echo to-err >&2; exit 3"],
        env=CLUSTER.env(home),
        input="one\ntwo\n",
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert (r.returncode, r.stdout) == (3, "one\ntwo\n"), r.stderr
    assert "to-err" in r.stderr.splitlines()
