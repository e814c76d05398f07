"""A small workspace for job-rule tests: a shell binary, a data file, a filegroup."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rbs.build.jobtarget import JobTarget

PRELUDE = (
    'load("@rbs//job/rules.rbs", "batch_job", "gpu_job", "ml_training_job")\n'
    'sh_binary(name = "train", srcs = ["train.sh"])\n'
    'filegroup(name = "files", srcs = ["data.txt"])\n'
)
FILES = {"app/train.sh": "#!/bin/sh\necho hi\n", "app/data.txt": "data\n"}

Analyze = Callable[[str], JobTarget]


def write_ws(root: Path, build: str, extra: dict[str, str] | None = None) -> Path:
    (root / "WORKSPACE").write_text('workspace(name = "ws")\n')
    for rel, text in {**FILES, **(extra or {}), "app/BUILD": PRELUDE + build}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root
