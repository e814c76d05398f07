"""Job secrets on the server: checked, encrypted at rest, handed to the job's runs, deleted.

A submit names its secrets in the manifest (`secrets = ["HF_TOKEN"]`, names only, which is
all the journal and `rbs job show` ever see) and carries their values beside it, in the
request's `secrets` object. The values are written encrypted (Fernet: AES-128-CBC with an
HMAC-SHA256, from `cryptography`) to `<data_dir>/secrets/`, one file per job, before the
job is submitted: first under the request id, then under the job id the request made, so
a job dispatched in the same step as its submit, or after a restart, finds them (the
request id is journaled with the job). The key is `<data_dir>/secrets.key` (0600, made on
first use): one Fernet key a line; the first encrypts, any decrypts. Rotating it: put a new
key (`Fernet.generate_key()`) on the first line and restart the server, which encrypts
every stored secret again with it; the old lines may go after that start.

Each run's lease gets the values in its environment, with `RBS_SECRETS` naming them so
the worker masks them in the run's log (rbs.executor.jobsecrets). Once the whole job has
ended (every task and attempt), its file is deleted; a sweep looks every `SWEEP_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from rbs import units
from rbs.model import JobManifest
from rbs.scheduler.events import RunRef
from rbs.server.job_driver import JobDriver, JobRequestError
from rbs.wire.errors import InvalidRequest

log = logging.getLogger(__name__)

MIN_SECRET_CHARS = 8  # shorter values would mask too much of every log line
NAMES_ENV = "RBS_SECRETS"
SWEEP_S = 1.0
_PENDING = "request-"

RunEnv = Callable[[str], tuple[tuple[str, str], ...]]
# A run's whole environment from the server, by lease id and the manifest it runs.
LeaseEnv = Callable[[str, JobManifest], tuple[tuple[str, str], ...]]


def check_values(manifest: JobManifest, values: Any) -> dict[str, str]:
    """A request's `secrets` object, checked against the manifest's names and the limits:
    every named secret has a value of 8 characters or more, no other is given, and env and
    secrets together fit the env limit (rbs.units.LIMITS `env.size`, `env.count`)."""
    if values is None:
        values = {}
    if not isinstance(values, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in values.items()
    ):
        raise InvalidRequest("secrets must be an object of NAME -> value")
    missing = sorted(set(manifest.secrets) - set(values))
    if missing:
        raise InvalidRequest(
            f"secret {missing[0]} is named by the job but has no value; "
            f"give it with --secret {missing[0]} (from the environment) or "
            f"--secret {missing[0]}=@FILE"
        )
    extra = sorted(set(values) - set(manifest.secrets))
    if extra:
        raise InvalidRequest(f"secret {extra[0]} has a value but the job does not name it")
    for name, value in values.items():
        if len(value) < MIN_SECRET_CHARS:
            raise InvalidRequest(
                f"secret {name} is {len(value)} characters long; secrets must have at least "
                f"{MIN_SECRET_CHARS} (log lines mask every occurrence of a value)"
            )
        if "\0" in value:
            raise InvalidRequest(f"secret {name} contains a NUL byte")
    items = list(manifest.env) + sorted(values.items())
    try:
        units.check_limit("env.count", len(items), "--env and --secret")
        size = sum(len(f"{k}={v}".encode()) + 1 for k, v in items)
        units.check_limit("env.size", size, "--env and --secret")
    except units.SpecError as e:
        raise InvalidRequest(str(e)) from None
    return dict(values)


class SecretKeys:
    """The server's key file: created 0600 on first use; first line encrypts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fernet: MultiFernet | None = None

    def fernet(self) -> MultiFernet:
        if self._fernet is None:
            if not self.path.exists():
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(Fernet.generate_key() + b"\n")
            lines = [ln.strip() for ln in self.path.read_bytes().splitlines() if ln.strip()]
            if not lines:
                raise OSError(f"{self.path} holds no key; delete it to make a new one")
            self._fernet = MultiFernet([Fernet(k) for k in lines])
        return self._fernet


class JobSecrets:
    """The encrypted secret files of the jobs a server holds (see the module docstring)."""

    def __init__(self, data_dir: Path, driver: JobDriver) -> None:
        self.dir = data_dir / "secrets"
        self.keys = SecretKeys(data_dir / "secrets.key")
        self.driver = driver
        self._sweeper: asyncio.Task[None] | None = None
        if self.dir.is_dir():
            self._rotate()

    # ---- files

    def _write(self, name: str, values: Mapping[str, str]) -> None:
        self.dir.mkdir(mode=0o700, exist_ok=True)
        token = self.keys.fernet().encrypt(json.dumps(dict(values)).encode())
        tmp = self.dir / f".{name}.{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(token)
        os.replace(tmp, self.dir / name)

    def _read(self, name: str) -> dict[str, str] | None:
        try:
            token = (self.dir / name).read_bytes()
        except FileNotFoundError:
            return None
        try:
            values: dict[str, str] = json.loads(self.keys.fernet().decrypt(token))
        except InvalidToken:
            log.error("secret file %s does not decrypt with %s", name, self.keys.path)
            return None
        return values

    def _rotate(self) -> None:
        """Encrypt every stored file again with the key file's first key."""
        for path in self.dir.iterdir():
            if path.name.startswith("."):
                continue
            try:
                path.write_bytes(self.keys.fernet().rotate(path.read_bytes()))
            except InvalidToken:
                log.error("secret file %s does not decrypt with %s", path, self.keys.path)

    # ---- the submit and the leases

    async def submit(
        self,
        manifest: JobManifest,
        provenance: Mapping[str, str],
        request_id: str | None,
        owner: tuple[str, int | None],
        values: Mapping[str, str],
    ) -> int:
        """Submit through the driver with the values stored first (under the request id)."""
        if not manifest.secrets:
            return await self.driver.submit(manifest, provenance, request_id, owner=owner)
        rid = request_id or f"secrets:{uuid.uuid4().hex}"
        pending = _PENDING + rid
        self._write(pending, values)
        try:
            job_id = await self.driver.submit(manifest, provenance, rid, owner=owner)
        except BaseException:
            (self.dir / pending).unlink(missing_ok=True)
            raise
        self._bind(pending, job_id)
        return job_id

    def _bind(self, pending: str, job_id: int) -> None:
        target = self.dir / str(job_id)
        if target.exists():  # a retried request: the first one's values stay
            (self.dir / pending).unlink(missing_ok=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.dir / pending, target)

    def values(self, job_id: int) -> dict[str, str] | None:
        found = self._read(str(job_id))
        if found is not None or not self.dir.is_dir():
            return found
        for path in self.dir.glob(_PENDING + "*"):
            rid = path.name.removeprefix(_PENDING)
            if self.driver.store.request_job(rid) == job_id:
                self._bind(path.name, job_id)
                return self._read(str(job_id))
        return None

    def wrap(self, base: RunEnv) -> LeaseEnv:
        """`base` (the server's run env) plus the run's job's secrets and their names."""

        def env(lease_id: str, manifest: JobManifest) -> tuple[tuple[str, str], ...]:
            out = base(lease_id)
            names = manifest.secrets
            if not names:
                return out
            try:
                job_id = RunRef.parse_lease(lease_id).job_id
            except ValueError:
                return out
            values = self.values(job_id) or {}
            found = tuple((n, values[n]) for n in names if n in values)
            # Names with no value make the worker fail the run, saying which.
            return (*out, (NAMES_ENV, ",".join(names)), *found)

        return env

    # ---- deletion

    def sweep(self) -> int:
        """Delete the files of jobs that have ended; the number deleted."""
        if not self.dir.is_dir():
            return 0
        gone = 0
        for path in self.dir.iterdir():
            name = path.name
            if name.startswith("."):
                continue
            if name.startswith(_PENDING):
                job = self.driver.store.request_job(name.removeprefix(_PENDING))
                if job is None:
                    continue  # its submit is still in flight
            else:
                job = int(name)
            try:
                ended = self.driver.state_of(job).terminal
            except JobRequestError:
                ended = True
            if ended:
                path.unlink(missing_ok=True)
                gone += 1
        return gone

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper

    async def _sweep_loop(self) -> None:
        while True:
            try:
                self.sweep()
            except (OSError, ValueError) as e:
                log.warning("secret sweep: %s", e)
            await asyncio.sleep(SWEEP_S)
