"""The server's tokens: the tokens file (users and roles), the shared token, and runs' scoped tokens.

Three kinds of token, looked up in this order (docs/design/security.md):

- A run's scoped token, `rbsrun.<lease id>.<mac>`: minted by the server for each run it
  leases out (an HMAC of the lease id under a key kept in the data dir, so tokens need
  no table and survive a restart), good while that run has not exited, for build
  actions and child jobs only.
- The shared `--token-file` token: admin and worker at once (the server says so in
  its log), as before roles existed.
- The `--tokens-file` (TOML): one `[[token]]` per token with its `sha256`, a `user`
  and a `role` (user, admin or worker). Only hashes are stored; `rbs remote token add`
  appends an entry and prints the new token once. SIGHUP reloads the file; a file that
  does not load is refused with a log line and the tokens loaded before stay.

Without either file the server has no authentication: every caller may do everything
and the user recorded on a job is the one the client claims (its login name).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rbs.scheduler.events import RunRef
from rbs.server.config import Config
from rbs.wire.auth import (
    MAX_USER_LEN,
    TOKEN_ENV,
    Principal,
    RefusalLog,
    Refused,
    Role,
    TokenError,
    claimed_user,
    read_token_file,
)

log = logging.getLogger(__name__)

RUN_PREFIX = "rbsrun."
KEY_FILE = "run_tokens.key"
_MAC_CHARS = 40  # 160 bits of an HMAC-SHA256
# What each role of the tokens file grants; the shared token grants all three.
GRANTS: dict[str, frozenset[Role]] = {
    "user": frozenset({Role.USER}),
    "admin": frozenset({Role.USER, Role.ADMIN}),
    "worker": frozenset({Role.WORKER}),
}
_SHARED = frozenset({Role.USER, Role.ADMIN, Role.WORKER})


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenEntry:
    """One `[[token]]` of the tokens file."""

    sha256: str
    user: str
    role: str


def hash_token(token: str) -> str:
    """The hex sha256 the tokens file stores for `token`."""
    return hashlib.sha256(token.encode()).hexdigest()


def check_user(user: object, where: str) -> str:
    if (
        not isinstance(user, str)
        or not user
        or len(user) > MAX_USER_LEN
        or not user.isprintable()
        or " " in user
    ):
        raise TokenError(
            f"{where}: user must be a name of 1-{MAX_USER_LEN} printable characters without "
            f"spaces, got {user!r}"
        )
    return user


def check_role(role: object, where: str) -> str:
    if role not in GRANTS:
        raise TokenError(f"{where}: role must be one of {', '.join(GRANTS)}, got {role!r}")
    assert isinstance(role, str)
    return role


def load_tokens_file(path: Path) -> tuple[TokenEntry, ...]:
    """Every entry of a tokens file; TokenError names the file, the entry and the fix."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise TokenError(f"tokens file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TokenError(f"cannot read tokens file {path}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise TokenError(f"tokens file {path} is not valid TOML: {e}") from None
    extra = sorted(set(data) - {"token"})
    if extra:
        raise TokenError(f"{path}: unknown key {extra[0]!r}; write one [[token]] table per token")
    tables = data.get("token", [])
    if not isinstance(tables, list):
        raise TokenError(f"{path}: token must be an array of tables ([[token]])")
    entries, seen = [], set()
    for i, t in enumerate(tables):
        where = f"{path}: token {i + 1}"
        if not isinstance(t, dict):
            raise TokenError(f"{where}: not a table")
        unknown = sorted(set(t) - {"sha256", "user", "role"})
        if unknown:
            raise TokenError(f"{where}: unknown key {unknown[0]!r}; keys: sha256, user, role")
        digest = t.get("sha256")
        if (
            not isinstance(digest, str)
            or len(digest) != 64
            or set(digest) - set("0123456789abcdef")
        ):
            raise TokenError(
                f"{where}: sha256 must be the token's sha256 as 64 lowercase hex digits "
                "(`printf %s TOKEN | sha256sum`), never the token itself"
            )
        if digest in seen:
            raise TokenError(f"{where}: the same sha256 is listed twice")
        seen.add(digest)
        entries.append(
            TokenEntry(
                sha256=digest,
                user=check_user(t.get("user"), where),
                role=check_role(t.get("role"), where),
            )
        )
    return tuple(entries)


def add_token(path: Path, user: str, role: str) -> str:
    """Append a new token's entry to the tokens file (made, mode 0600, if absent) and
    return the token, which is stored nowhere."""
    check_user(user, "--user")
    check_role(role, "--role")
    if path.exists():
        load_tokens_file(path)  # never append to a file that does not load
    token = "rbs_" + secrets.token_urlsafe(32)
    # JSON's string escapes are TOML's basic-string escapes, for a user with a quote in it.
    entry = (
        f"\n[[token]]\nuser = {json.dumps(user)}\nrole = {json.dumps(role)}\n"
        f'sha256 = "{hash_token(token)}"\n'
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(entry)
    load_tokens_file(path)
    return token


def _run_key(path: Path, fresh: bool) -> bytes:
    """The key runs' tokens are minted with; a new one for a new journal, so that no
    token of an earlier journal's runs (whose lease ids repeat) is ever good again."""
    if not fresh:
        try:
            key = path.read_bytes()
            if len(key) == 32:
                return key
        except FileNotFoundError:
            pass
    key = secrets.token_bytes(32)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    os.replace(tmp, path)
    return key


class ServerAuth:
    """Turns a presented token into a Principal; mints and checks runs' scoped tokens."""

    def __init__(
        self,
        *,
        data_dir: Path,
        token_file: Path | None = None,
        tokens_file: Path | None = None,
    ) -> None:
        self.shared = read_token_file(token_file) if token_file else None
        self.tokens_file = tokens_file
        self._entries = load_tokens_file(tokens_file) if tokens_file else ()
        fresh = not (data_dir / "jobs.db").exists()
        self._key = _run_key(data_dir / KEY_FILE, fresh)
        self.refusals = RefusalLog()
        # Who submitted a live run's job (None once it exited): the job driver's core.
        self.run_user: Callable[[RunRef], str | None] = lambda run: None
        if self.shared is not None:
            log.warning(
                "--token-file: its one token acts as admin and as worker; give users and "
                "workers tokens of their own with --tokens-file"
            )
        if tokens_file is not None:
            log.info("tokens file %s: %s", tokens_file, self._summary())

    @property
    def enabled(self) -> bool:
        return self.shared is not None or self.tokens_file is not None

    def describe(self) -> str:
        if not self.enabled:
            return "off"
        parts = ["shared token"] if self.shared is not None else []
        if self.tokens_file is not None:
            parts.append(f"tokens file: {self._summary()}")
        return ", ".join(parts)

    def _summary(self) -> str:
        counts = {r: sum(e.role == r for e in self._entries) for r in GRANTS}
        return ", ".join(f"{n} {r}" for r, n in counts.items())

    def reload(self) -> bool:
        """Read the tokens file again (SIGHUP); one that does not load changes nothing."""
        if self.tokens_file is None:
            log.info("SIGHUP: no --tokens-file to reload")
            return False
        try:
            entries = load_tokens_file(self.tokens_file)
        except TokenError as e:
            log.error("SIGHUP: kept the tokens loaded before: %s", e)
            return False
        self._entries = entries
        log.info("SIGHUP: reloaded %s: %s", self.tokens_file, self._summary())
        return True

    # ---- runs' scoped tokens

    def _mac(self, lease_id: str) -> str:
        return hmac.new(self._key, lease_id.encode(), hashlib.sha256).hexdigest()[:_MAC_CHARS]

    def mint(self, lease_id: str) -> str:
        """The scoped token of the run with this lease id (the same on every call)."""
        return f"{RUN_PREFIX}{lease_id}.{self._mac(lease_id)}"

    def _run_principal(self, token: str) -> Principal:
        lease_id, _, mac = token[len(RUN_PREFIX) :].rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(lease_id).encode()):
            raise Refused("wrong token")
        run = RunRef.parse_lease(lease_id)
        user = self.run_user(run)
        if user is None:
            raise Refused(f"the scoped token of run {lease_id} expired when the run ended")
        return Principal(user=user, roles=frozenset({Role.RUN}), run=lease_id, job_id=run.job_id)

    # ---- every call

    def authenticate(self, token: str | None, claimed: str | None) -> Principal:
        """The caller presenting `token` (None: no header); raises Refused (401)."""
        if token is not None and token.startswith(RUN_PREFIX):
            try:
                return self._run_principal(token)
            except Refused:
                if self.enabled:
                    raise
        if not self.enabled:
            return Principal(user=claimed_user(claimed), roles=_SHARED, authenticated=False)
        if token is None:
            raise Refused("no authorization header")
        given = token.encode()
        if self.shared is not None and hmac.compare_digest(given, self.shared.encode()):
            return Principal(user=claimed_user(claimed) if claimed else "admin", roles=_SHARED)
        digest = hash_token(token).encode()
        found = None
        for e in self._entries:  # every entry compared, in constant time each
            if hmac.compare_digest(digest, e.sha256.encode()):
                found = e
        if found is None:
            raise Refused("wrong token")
        return Principal(user=found.user, roles=GRANTS[found.role])


def server_auth(config: Config) -> ServerAuth:
    s = config.server
    return ServerAuth(data_dir=s.data_dir, token_file=s.token_file, tokens_file=s.tokens_file)


def advertised_address(host: str, port: int) -> str:
    """The gRPC address runs are given as RBS_REMOTE: the host the server listens on, or
    this machine's name when it listens on every address."""
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = socket.getfqdn()
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def run_env(auth: ServerAuth, address: str) -> Callable[[str], tuple[tuple[str, str], ...]]:
    """What each run's environment gets from the server: where the cluster is, as Bazel and
    rbs read it, and the run's own scoped token."""

    def env(lease_id: str) -> tuple[tuple[str, str], ...]:
        return (("RBS_REMOTE", address), (TOKEN_ENV, auth.mint(lease_id)))

    return env
