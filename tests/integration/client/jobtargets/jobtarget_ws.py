"""Workspaces with job targets for the integration tests, written from a dict of files."""

from __future__ import annotations

from pathlib import Path

LOAD = 'load("@rbs//job/rules.rbs", "batch_job", "gpu_job", "ml_training_job")\n'


def write_ws(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path -> text) under root; *.sh files are made executable."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "WORKSPACE").write_text('workspace(name = "ws")\n')
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        if p.suffix == ".sh":
            p.chmod(0o755)
    return root


# A shell job that prints its data file and its arguments.
CAT_JOB = {
    "app/BUILD": LOAD
    + 'sh_binary(name = "show", srcs = ["show.sh"])\n'
    + 'batch_job(name = "job", binary = ":show", inputs = ["data.txt"], args = ["a1"],\n'
    + '          env = {"GREETING": "hello"}, cpu = "250m", memory = "128Mi",\n'
    + '          outputs = ["copy.txt"])\n',
    "app/show.sh": '#!/bin/sh\necho "$GREETING args=$* attempt=$RBS_ATTEMPT"\n'
    + "cat app/data.txt\ncp app/data.txt copy.txt\n",
    "app/data.txt": "the data\n",
}
