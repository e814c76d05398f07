"""A local OCI image for container tests: `podman import` of a busybox-static root filesystem.

No registry is reachable from the test machines, so tests build their own image. Each
image holds /etc/rbs-marker with a text of its own, so two images differ.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
CONF = (
    '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n'
    'netns = "host"\n[engine]\nruntime = "runc"\n'
)
TOOLS = ("sh", "ls", "cat", "echo", "id", "ip", "sleep", "env", "pwd", "grep", "wc")
MISSING = (
    None
    if shutil.which("podman") and shutil.which("runc") and BUSYBOX.is_file()
    else "podman, runc and busybox-static are not installed (make system-deps installs them)"
)


def podman(conf: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    return subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=180, check=check
    )


def build_image(folder: Path, conf: Path) -> tuple[str, str]:
    """Import a fresh busybox image; (its reference, its marker text)."""
    marker = uuid.uuid4().hex
    root = folder / f"rootfs-{marker[:8]}"
    for d in ("bin", "proc", "sys", "dev", "tmp", "etc"):
        (root / d).mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for tool in TOOLS:
        (root / "bin" / tool).symlink_to("busybox")
    (root / "etc" / "rbs-marker").write_text(marker + "\n")
    tar = folder / f"{root.name}.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True, timeout=60)
    ref = f"localhost/rbs-test-busybox:{marker[:12]}"
    podman(conf, "import", str(tar), ref)
    return ref, marker
