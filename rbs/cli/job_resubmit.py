"""`rbs job resubmit ID [FLAGS]`: run a job's manifest and input root again (rbs.client.resubmit).

It takes `rbs job submit`'s flags, less those that make a new job rather than override
one (--script, --manifest, --inputs), and they override the job's manifest the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from rbs.cli.job_submit import FLAG, LIST, SUBMIT_FLAGS, _begin, _env_items, client_for, param_name

RESUBMIT_FLAGS = tuple(
    f
    for f in SUBMIT_FLAGS
    if f[0] not in ("--script", "--manifest", "--inputs", "--interactive", "--pty")
)
# Parameters that are not manifest flags (or need more than passing on).
_OTHER = {"server", "token_file", "tls_ca", "secret", "wait", "follow", "begin", "schedule"}


def resubmit_flags(params: Mapping[str, Any]) -> dict[str, Any]:
    """The overriding flags given, keyed as JobsClient.submit takes them."""
    flags: dict[str, Any] = {}
    for flag, kind, _, _ in RESUBMIT_FLAGS:
        name = param_name(flag)
        if name in _OTHER:
            continue
        value = params.get(name)
        if kind == LIST:
            value = list(value or ()) or None
        elif kind == FLAG:
            value = value or None
        flags[name] = value
    flags["env"] = _env_items(params.get("env") or ()) or None
    flags["begin"] = _begin(params, "resubmit")
    return {k: v for k, v in flags.items() if v is not None}


def resubmit_job(params: Mapping[str, Any]) -> int:
    """What `rbs job resubmit` does: print the new job's id (and follow or wait for it)."""
    from rbs.client.resubmit import resubmit

    flags = resubmit_flags(params)
    with client_for(params.get("server"), params.get("token_file")) as client:
        job_id = resubmit(
            client,
            params["job_id"],
            flags,
            secret_specs=list(params["secret"]),
            note=lambda text: print(f"rbs job resubmit: note: {text}", file=sys.stderr),
        )
        print(job_id)
        sys.stdout.flush()
        if params.get("follow") or params.get("wait"):
            from rbs.cli.job_follow import exit_status, follow, state_text

            if params.get("follow"):
                return follow(client, job_id)
            info = client.wait(job_id)
            print(f"job {job_id}: {state_text(info.state, info.reason)}", file=sys.stderr)
            return exit_status(info)
    return 0


__all__ = ["RESUBMIT_FLAGS", "resubmit_flags", "resubmit_job"]
