"""`--script FILE [ARGS...]` as sbatch runs one: the shebang, `#RBS` and `#SBATCH` lines.

The script is staged into the job's folder as its own name and runs itself, so its
shebang picks the interpreter (`/bin/sh` only when it has none); a copy marked
executable is staged when the file is not. The comment block at the top (after the
shebang, until the first line that is neither blank nor a comment) may hold directive
lines: `#RBS --cpus 2 --time 1h` takes `rbs job submit`'s own flags; `#SBATCH` takes the
common sbatch flags, mapped to rbs's (`SBATCH_FLAGS`), and names every other one in a
note, never dropping it silently. The command line wins over both; both win over a
target's attributes, since they are flags. Only the standard library is imported.
"""

from __future__ import annotations

import os
import shlex
import shutil

from rbs.client.errors import JobError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

# The kinds of rbs.cli.job_submit's flag table (that module passes the table in: it
# imports this one, so this one does not import it back).
FLAG, INT, LIST = "flag", "int", "list"
# `#RBS` lines take every submit flag but these: where to connect, another script or
# manifest, and how this command line waits.
CLI_ONLY = frozenset(
    {"--server", "--token-file", "--tls-ca", "--script", "--manifest", "--wait", "--follow"}
)

# sbatch's long and short names -> the rbs parameter; the value is converted by _sbatch_value.
SBATCH_FLAGS = {
    "--job-name": "name",
    "-J": "name",
    "--time": "time",
    "-t": "time",
    "--cpus-per-task": "cpus",
    "-c": "cpus",
    "--mem": "memory_gb",
    "--gres": "gpus",
    "--gpus": "gpus",
    "-G": "gpus",
    "--array": "array",
    "-a": "array",
    "--dependency": "deps",
    "-d": "deps",
    "--nodes": "nodes",
    "-N": "nodes",
    "--partition": "queue",
    "-p": "queue",
}
_SBATCH_SWITCHES = {"--exclusive", "--requeue", "--no-requeue", "--hold", "--wait", "-W", "-H"}
_MEM_UNITS = {"K": 1 / (1024 * 1024), "M": 1 / 1024, "G": 1.0, "T": 1024.0}


def _header(path: str) -> tuple[str | None, list[tuple[int, str]]]:
    """The shebang line (or None) and the numbered lines of the top comment block."""
    try:
        with open(path, "rb") as f:
            head = f.read(64 * 1024)
    except OSError as e:
        raise JobError(f"--script {path!r}: {e.strerror}") from None
    lines = head.decode("utf-8", "replace").splitlines()
    shebang = lines[0] if lines and lines[0].startswith("#!") else None
    block: list[tuple[int, str]] = []
    for number, line in enumerate(lines[1 if shebang else 0 :], start=2 if shebang else 1):
        text = line.strip()
        if text and not text.startswith("#"):
            break
        block.append((number, text))
    return shebang, block


def check_shebang(path: str, shebang: str) -> None:
    """Refuse a shebang whose interpreter is missing here (a job would fail at once)."""
    words = shebang[2:].split()
    if not words:
        raise JobError(
            f"--script {path!r}: its shebang names no interpreter; accepted: "
            "#!/path/to/interpreter (#!/bin/bash) or #!/usr/bin/env PROGRAM"
        )
    program = words[0]
    if os.path.basename(program) == "env":
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        if not rest:
            raise JobError(f"--script {path!r}: `{shebang}` names no program after env")
        program = rest[0]
        found = shutil.which(program) is not None
    else:
        found = os.path.isfile(program) and os.access(program, os.X_OK)
    if not found:
        raise JobError(
            f"--script {path!r}: its shebang `{shebang}` names {program!r}, which is not "
            "installed here; accepted: #!/path/to/interpreter that exists (#!/bin/bash) or "
            "#!/usr/bin/env PROGRAM on PATH"
        )


def _param(flag: str) -> str:
    return flag[2:].replace("-", "_")


def _rbs_line(where: str, words: list[str], kinds: Mapping[str, str], out: dict[str, Any]) -> None:
    i = 0
    while i < len(words):
        flag, eq, value = words[i].partition("=")
        kind = kinds.get(flag) if flag not in CLI_ONLY else None
        if kind is None:
            known = ", ".join(sorted(set(kinds) - CLI_ONLY))
            raise JobError(f"{where}: #RBS {flag} is not a job flag; accepted: {known}")
        i += 1
        if kind == FLAG:
            out[_param(flag)] = True
            continue
        if not eq:
            if i >= len(words):
                raise JobError(f"{where}: #RBS {flag} needs a value")
            value, i = words[i], i + 1
        name = _param(flag)
        if kind == INT:
            try:
                out[name] = int(value)
            except ValueError:
                raise JobError(f"{where}: #RBS {flag} {value!r}: not a whole number") from None
        elif kind == LIST:
            out[name] = (*out.get(name, ()), value)
        else:
            if flag in CHECKED:
                _check(where, flag, value)
            out[name] = value


# #RBS values checked here, so that a bad one names its line (the rest are checked with
# the whole job, or need the other flags: --network none needs --container).
CHECKED = frozenset(("--cpus", "--memory-gb", "--time", "--array", "--deps", "--name"))


def _check(where: str, flag: str, value: str) -> None:
    from rbs.wire.manifest import apply_flags
    from rbs.wire.specs import SpecError

    try:
        apply_flags(None, None, {flag: value}, command=["true"])
    except SpecError as e:
        raise JobError(f"{where}: #RBS {e}") from None


def slurm_time(value: str) -> str:
    """Seconds of sbatch's `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`."""
    days, _, clock = value.rpartition("-")
    parts = clock.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3 or (days and not days.isdigit()):
        raise ValueError("not an sbatch time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM:SS")
    nums = [int(p) for p in parts]
    if days:
        hours, minutes, seconds = [*nums, 0, 0][:3]
    elif len(nums) == 3:
        hours, minutes, seconds = nums
    else:
        hours, minutes, seconds = 0, nums[0], nums[1] if len(nums) == 2 else 0
    return str(((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds)


def _sbatch_value(name: str, value: str) -> Any:
    if name == "time":
        return slurm_time(value)
    if name == "memory_gb":
        unit = value[-1:].upper()
        number = value[:-1] if unit in _MEM_UNITS else value
        try:
            amount = float(number)
        except ValueError:
            raise ValueError("not an sbatch size: 4096, 500M, 8G, 1T") from None
        return f"{amount * _MEM_UNITS.get(unit, 1 / 1024):g}"
    if name == "gpus":
        # --gres=gpu, gpu:2 or gpu:a100:2; --gpus=2 or a100:2 (the type is not matched).
        count = value.split(":")[-1]
        if value == "gpu":
            return 1
        if not count.isdigit() or value.count(":") > 2:
            raise ValueError("not a GPU count: gpu:N, gpu:TYPE:N")
        return int(count)
    if name == "nodes":
        if not value.isdigit():
            raise ValueError("only a node count N is supported (not a range MIN-MAX)")
        return int(value)
    return value


def _sbatch_line(where: str, words: list[str], out: dict[str, Any], notes: list[str]) -> None:
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--"):
            flag, eq, value = word.partition("=")
        else:
            flag, value = word[:2], word[2:]
            eq = "=" if value else ""
        name = SBATCH_FLAGS.get(flag)
        if name is None:
            takes = flag not in _SBATCH_SWITCHES and not eq and i < len(words)
            if takes and not words[i].startswith("-"):
                i += 1
            notes.append(f"{where}: #SBATCH {flag} is not supported by rbs and is ignored")
            continue
        if not eq:
            if i >= len(words):
                raise JobError(f"{where}: #SBATCH {flag} needs a value")
            value, i = words[i], i + 1
        if flag == "--gres" and not value.startswith("gpu"):
            notes.append(f"{where}: #SBATCH --gres={value} is not supported (only gpu:N)")
            continue
        try:
            out[name] = _sbatch_value(name, value)
        except ValueError as e:
            raise JobError(f"{where}: #SBATCH {flag} {value!r}: {e}") from None


def directives(path: str, kinds: Mapping[str, str]) -> tuple[str | None, dict[str, Any], list[str]]:
    """The script's shebang, the parameters its directive lines set, and notes to print."""
    shebang, block = _header(path)
    rbs: dict[str, Any] = {}
    sbatch: dict[str, Any] = {}
    notes: list[str] = []
    for number, text in block:
        tag, _, rest = text.partition(" ")
        if tag not in ("#RBS", "#SBATCH"):
            continue
        where = f"{path}:{number}"
        try:
            words = shlex.split(rest, comments=True)
        except ValueError as e:
            raise JobError(f"{where}: {tag} line: {e}") from None
        if tag == "#RBS":
            _rbs_line(where, words, kinds, rbs)
        else:
            _sbatch_line(where, words, sbatch, notes)
    return shebang, sbatch | rbs, notes


def merge(cli: Mapping[str, Any], found: Mapping[str, Any]) -> dict[str, Any]:
    """The command line over the directives: a flag given there wins; lists add up."""
    out = dict(cli)
    for name, value in found.items():
        given = out.get(name)
        if isinstance(value, tuple):
            out[name] = (*value, *(given or ()))
        elif given is None or given is False:
            out[name] = value
    return out


def script_params(
    params: Mapping[str, Any], kinds: Mapping[str, str]
) -> tuple[dict[str, Any], list[str]]:
    """`rbs job submit`'s parameters for `--script FILE [ARGS...]`: the command that runs
    it, the file staged (executable), the directives merged in, the job named after it.
    `kinds` is the submit flag table: flag -> "text", "int", "list" or "flag"."""
    path = str(params["script"])
    if not os.path.isfile(path):
        raise JobError(f"--script {path!r}: no such file")
    shebang, found, notes = directives(path, kinds)
    name = os.path.basename(path)
    args = tuple(params["command"])
    if shebang is not None:
        check_shebang(path, shebang)
        command: tuple[str, ...] = (f"./{name}", *args)
    else:
        command = ("/bin/sh", name, *args)
    staged = path
    if shebang is not None and not os.access(path, os.X_OK):
        import atexit
        import tempfile

        folder = tempfile.mkdtemp(prefix="rbs-script-")
        atexit.register(shutil.rmtree, folder, True)
        staged = os.path.join(folder, name)
        shutil.copyfile(path, staged)
        os.chmod(staged, 0o755)
    out = merge(params, found)
    out["command"] = command
    out["script"] = None
    out["inputs"] = (f"{name}={staged}", *out.get("inputs", ()))
    if out.get("name") is None:
        out["name"] = name
    return out, notes
