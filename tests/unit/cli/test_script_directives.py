"""`--script FILE`: #RBS and #SBATCH lines become flags, the command line wins, the shebang rules."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from rbs.cli.job_submit import _DEFAULTS, _KINDS
from rbs.cli.script_directives import directives, script_params, slurm_time
from rbs.client.errors import JobError


def write(tmp_path: Path, text: str, name: str = "train.sh") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def params(**given: Any) -> dict[str, Any]:
    return {**_DEFAULTS, "command": (), **given}


def test_rbs_and_sbatch_lines_set_flags(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "#!/bin/sh\n"
        "# a comment\n"
        "\n"
        "#SBATCH --job-name=train -t 1-02:30:00 --cpus-per-task 4\n"
        "#SBATCH --mem=2048 --gres=gpu:a100:2 --array=0-9%2 --dependency=afterok:5:6\n"
        "#SBATCH -N 2 --partition gpu\n"
        "#RBS --time 1h --env A=1 --env B=2 --no-requeue\n"
        "echo hi\n"
        "#RBS --cpus 99\n",  # after the first command: not a directive
    )
    shebang, found, notes = directives(path, _KINDS)
    assert shebang == "#!/bin/sh"
    assert notes == []
    assert found == {
        "name": "train",
        "time": "1h",  # #RBS wins over #SBATCH
        "cpus": "4",
        "memory_gb": "2",
        "gpus": 2,
        "array": "0-9%2",
        "deps": "afterok:5:6",
        "nodes": 2,
        "queue": "gpu",
        "env": ("A=1", "B=2"),
        "no_requeue": True,
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 1800), ("5:30", 330), ("1:02:03", 3723), ("2-0", 172800), ("1-01:30", 91800)],
)
def test_sbatch_times(text: str, seconds: int) -> None:
    assert slurm_time(text) == str(seconds)


def test_unsupported_sbatch_flags_are_named_in_notes(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "#!/bin/sh\n#SBATCH --output=log.%j --exclusive --mail-user me@x -c 2\n"
        "#SBATCH --gres=nvme:1\n",
    )
    _, found, notes = directives(path, _KINDS)
    assert found == {"cpus": "2"}
    assert notes == [
        f"{path}:2: #SBATCH --output is not supported by rbs and is ignored",
        f"{path}:2: #SBATCH --exclusive is not supported by rbs and is ignored",
        f"{path}:2: #SBATCH --mail-user is not supported by rbs and is ignored",
        f"{path}:3: #SBATCH --gres=nvme:1 is not supported (only gpu:N)",
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("#RBS --wait", "#RBS --wait is not a job flag; accepted: "),
        ("#RBS --server h:1", "#RBS --server is not a job flag"),
        ("#RBS --gpus two", "#RBS --gpus 'two': not a whole number"),
        ("#RBS --time", "#RBS --time needs a value"),
        ("#RBS --cpus lots", "#RBS --cpus 'lots': not a cpu quantity"),
        ("#RBS --time soon", "#RBS --time 'soon': "),
        ("#RBS --array 9-1", "#RBS --array '9-1': "),
        ("#RBS --deps afterok", "#RBS --deps 'afterok': "),
        ("#SBATCH --time=soon", "#SBATCH --time 'soon': not an sbatch time"),
        ("#SBATCH --nodes=2-4", "only a node count N is supported"),
        ("#SBATCH --mem=lots", "not an sbatch size"),
    ],
)
def test_bad_directives_name_file_line_and_flag(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, f"#!/bin/sh\n{line}\n")
    with pytest.raises(JobError) as e:
        directives(path, _KINDS)
    assert str(e.value).startswith(f"{path}:2: ")
    assert message in str(e.value)


def test_the_command_line_wins_and_lists_add_up(tmp_path: Path) -> None:
    path = write(tmp_path, "#RBS --cpus 2 --time 1h --env A=1 --name fromfile\necho\n")
    out, _ = script_params(params(script=path, cpus="3", env=("B=2",), command=("x", "y")), _KINDS)
    assert out["cpus"] == "3" and out["time"] == "1h" and out["name"] == "fromfile"
    assert out["env"] == ("A=1", "B=2")
    # No shebang: sh runs it, and the job is named after the script unless told.
    assert out["command"] == ("/bin/sh", "train.sh", "x", "y")
    assert out["inputs"] == (f"train.sh={path}",)


def test_a_shebang_script_runs_itself_staged_executable(tmp_path: Path) -> None:
    path = write(tmp_path, "#!/usr/bin/env python3\nprint(1)\n", name="job.py")
    assert not os.access(path, os.X_OK)
    out, _ = script_params(params(script=path, command=("--lr", "0.1")), _KINDS)
    assert out["command"] == ("./job.py", "--lr", "0.1")
    assert out["name"] == "job.py"
    dest, _, staged = out["inputs"][0].partition("=")
    assert dest == "job.py" and staged != path
    assert os.access(staged, os.X_OK) and Path(staged).read_text() == Path(path).read_text()


@pytest.mark.parametrize(
    "shebang", ["#!/no/such/interpreter", "#!/usr/bin/env no-such-program-rbs", "#!"]
)
def test_a_missing_interpreter_is_refused(tmp_path: Path, shebang: str) -> None:
    path = write(tmp_path, f"{shebang}\necho\n")
    with pytest.raises(JobError) as e:
        script_params(params(script=path), _KINDS)
    assert str(e.value).startswith(f"--script {path!r}: ")
    assert "#!/usr/bin/env PROGRAM" in str(e.value)


def test_a_script_inside_a_staged_folder_is_staged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--inputs . --script run.sh`: the folder holds the script too; it is staged once,
    executable, and a different file at the same place is still refused."""
    from rbs.client.staging import StagingError, collect_entries
    from rbs.model import DEFAULT_FUNCTION

    path = write(tmp_path, "#!/bin/sh\necho hi\n", name="run.sh")
    (tmp_path / "data.txt").write_text("d\n")
    monkeypatch.chdir(tmp_path)
    out, _ = script_params(params(script="run.sh", inputs=(".",)), _KINDS)
    entries, _ = collect_entries(out["inputs"], tmp_path, DEFAULT_FUNCTION)
    assert sorted(entries) == ["data.txt", "run.sh"]
    run = entries["run.sh"]
    assert run is not None and run.executable
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.txt").write_text("another\n")
    with pytest.raises(StagingError, match=r"'data\.txt' is staged twice"):
        collect_entries([".", "data.txt=other/data.txt"], tmp_path, DEFAULT_FUNCTION)
    assert Path(path).is_file()
