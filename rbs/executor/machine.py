"""What this machine offers a worker by default: cores, memory, GPU ids, container runtimes."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass

log = logging.getLogger(__name__)

_CONTAINER_RUNTIMES = ("podman", "docker")


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineCapacity:
    """This machine's cores, memory, GPU ids and runtimes: what a worker advertises by default."""

    cpus: int
    memory_bytes: int
    gpu_ids: tuple[str, ...]
    container_runtimes: tuple[str, ...] = ()


def machine_resources() -> MachineCapacity:
    """This machine's cores, memory and GPUs (via nvidia-smi when it is installed)."""
    cpus = len(os.sched_getaffinity(0)) or os.cpu_count() or 1
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    gpus: tuple[str, ...] = ()
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=index", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
            gpus = tuple(line.strip() for line in out.splitlines() if line.strip())
        except (OSError, subprocess.SubprocessError) as e:
            log.warning("nvidia-smi is installed but failed (%s); advertising no GPUs", e)
    # Runtimes for jobs that name an image; present means installed, not yet proven usable.
    runtimes = tuple(r for r in _CONTAINER_RUNTIMES if shutil.which(r))
    return MachineCapacity(
        cpus=cpus, memory_bytes=memory, gpu_ids=gpus, container_runtimes=runtimes
    )


def default_address(hostname: str) -> str:
    """The address other nodes reach this one at, unless --address says otherwise."""
    import socket

    try:
        return socket.gethostbyname(hostname)
    except OSError:
        return "127.0.0.1"
