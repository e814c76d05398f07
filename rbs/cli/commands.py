"""The one table of `rbs` commands: name -> where its click command lives, and its help.

It imports nothing, so the entry point (rbs.cli.main) reads it before deciding whether a
call needs click at all, and the click root (rbs.cli.root) builds its group from it.
"""

from __future__ import annotations

# name -> (module, attribute, one-line help, fast entry point). The attribute is the
# command's click command or group. The fast entry point, "module:function" or None, is
# tried first with the arguments after the name, before click is imported: it returns
# an exit code when it answered the call itself, or None to hand the call to click.
COMMANDS: dict[str, tuple[str, str, str, str | None]] = {
    "build": (
        "rbs.cli.build",
        "build",
        "Build targets from BUILD files.",
        "rbs.cli.build_fast:main",
    ),
    "run": ("rbs.cli.build", "run", "Build and run an executable target.", None),
    "test": (
        "rbs.cli.build",
        "test",
        "Build and run tests; summarize passes and failures.",
        None,
    ),
    "query": ("rbs.cli.build", "query", "List targets and their dependencies.", None),
    "clean": ("rbs.cli.build", "clean", "Delete build outputs (rbs-out/) and state.", None),
    "job": (
        "rbs.cli.job",
        "job",
        "Submit and manage batch jobs on the cluster.",
        "rbs.cli.job_submit:fast_main",
    ),
    "remote": ("rbs.cli.remote", "remote", "Run the remote cache and execution server.", None),
    "cas": ("rbs.cli.cas", "cas", "Operate the content-addressed store.", None),
    "completion": (
        "rbs.cli.completion",
        "completion",
        "Print the shell completion script for bash, zsh or fish.",
        None,
    ),
}
