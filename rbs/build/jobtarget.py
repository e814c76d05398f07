"""Job targets in the build engine: check a job rule's attributes, lay out and write its manifest.

A job rule (rules/job/rules.rbs) calls `_rbs_job_spec(...)` during analysis: the values
are parsed here with the parsers `rbs job submit` uses, so a bad quantity fails at analysis
with the target's BUILD location, and the rule gets back the canonical manifest fields.
It returns them in a `JobInfo` provider together with its binary, the binary's
runfiles and its data. After the build, `write_manifests` lays those files out as the
job's input tree, stores the tree in the local build store and writes
`rbs-out/<package>/<name>.job.json` in `rbs.wire.manifest`'s canonical JSON.

Input tree layout (the job's working directory), the workspace as the job sees it:

    <pkg>/<binary>                          the executable, run as ./<pkg>/<binary>
    <pkg>/<binary>.runfiles/<workspace>/... its runfiles, found beside it as by `rbs run`
    <package>/<file>                        each data file at its workspace path
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from rbs.build.errors import BuildError
from rbs.build.graph import ActionGraph, File
from rbs.build.labels import Label
from rbs.model import Digest, DigestFunction, JobManifest, Resources
from rbs.wire.manifest_provenance import DEFAULT_SOURCE, PROVENANCE_FIELDS

JOB_MARK = "_rbs_job"
MANIFEST_SUFFIX = ".job.json"
# Manifest fields a job target decides; the others keep the scheduler's defaults (or
# what `rbs job submit` flags say).
_NOT_FROM_TARGETS = frozenset(
    {
        "priority",
        "requeue",
        "restarts",
        "array",
        "dependencies",
        "begin_time",
        "deadline",
        "network",
    }
)
TARGET_FIELDS = tuple(f for f in PROVENANCE_FIELDS if f not in _NOT_FROM_TARGETS)


# Manifest fields -> the job rules' attribute names, for errors.
_ATTRS = {
    "command": "args",
    "queue": "partition",
    "resources.cpu": "cpu",
    "resources.memory": "memory",
    "resources.gpus": "gpus",
}


def _bad(attr: str, value: object, problem: str, fix: str) -> ValueError:
    return ValueError(f"attribute {attr!r} = {value!r}: {problem}; {fix}")


def _rel_dir(attr: str, value: str) -> str:
    norm = PurePosixPath(os.path.normpath(value)).as_posix() if value else ""
    if value.startswith("/") or norm == ".." or norm.startswith("../") or norm == ".":
        raise _bad(
            attr,
            value,
            "must be a folder inside the job's working directory",
            'use a relative path such as "checkpoints"',
        )
    return norm


def _pinning(cpu_cores: str, max_iobps: str) -> dict[str, Any]:
    """The `cpu_cores` and `max_iobps` attributes as manifest fields."""
    from rbs.units import SpecError, parse_size
    from rbs.wire.cores import parse_cores

    out: dict[str, Any] = {}
    try:
        if cpu_cores:
            out["cpu_cores"] = parse_cores(cpu_cores, "attribute 'cpu_cores'")
        if max_iobps:
            out["max_iobps"] = parse_size(max_iobps, "attribute 'max_iobps'", minimum=1)
    except SpecError as e:
        attr = "cpu_cores" if "cpu_cores" in e.flag else "max_iobps"
        raise _bad(attr, e.value, e.problem, f"write e.g. {e.accepted}") from None
    return out


def job_spec(
    *,
    kind: str,
    binary: str,
    args: Sequence[str],
    env: Mapping[str, str],
    cpu: str,
    memory: str,
    gpus: int,
    partition: str,
    time_limit: str,
    nodes: int,
    elastic: bool,
    min_nodes: int,
    max_nodes: int,
    max_retries: int,
    checkpoint_dir: str,
    outputs: Sequence[str],
    data_paths: Sequence[str],
    secrets: Sequence[str] = (),
    container: str = "",
    cpu_cores: str = "",
    max_iobps: str = "",
    preemptible: bool = False,
) -> dict[str, Any]:
    """Check a job rule's attribute values; return the manifest's fields as JSON values.

    Called from Starlark at analysis; a ValueError becomes an analysis error at the
    target's BUILD line, so every message names the attribute and the fix.
    """
    from rbs import units
    from rbs.units import SpecError
    from rbs.wire import specs
    from rbs.wire.manifest import manifest_to_dict
    from rbs.wire.manifest_limits import check_manifest

    def parse(attr: str, fn: Any, value: Any, example: str) -> Any:
        try:
            return fn(value, f"attribute {attr!r}")
        except SpecError as e:
            raise _bad(attr, value, e.problem, f"write e.g. {example}") from None

    def memory_size(value: Any, flag: str) -> int:
        return units.parse_size(value, flag, minimum=1)

    cpu_millis = parse("cpu", units.parse_cpu, cpu, '"2", "0.5" or "500m"')
    memory_bytes = parse("memory", memory_size, memory, '"8Gi", "512Mi" or "1G"')
    seconds = (
        parse("time_limit", units.parse_duration, time_limit, '"90m", "2h", "1d" or "1h30m"')
        if time_limit
        else None
    )
    if gpus < 0:
        raise _bad("gpus", gpus, "cannot be negative", "use 0 for a CPU-only job")
    if kind == "gpu_job" and gpus < 1:
        raise _bad("gpus", gpus, "a gpu_job needs at least one GPU", "use ml_training_job for CPU")
    if not partition.strip():
        raise _bad("partition", partition, "is empty", 'name a queue of the cluster, e.g. "batch"')
    if max_retries < 0:
        raise _bad("max_retries", max_retries, "cannot be negative", "use 0 to never retry")
    if nodes < 1:
        raise _bad("nodes", nodes, "a job runs on at least one node", "use nodes = 1 or more")
    if elastic:
        if not min_nodes or not max_nodes:
            raise _bad(
                "elastic",
                True,
                "an elastic job needs both min_nodes and max_nodes",
                "set them, e.g. min_nodes = 2, max_nodes = 4",
            )
        if nodes != 1:
            raise _bad(
                "nodes",
                nodes,
                "an elastic job's size is min_nodes..max_nodes",
                "remove nodes, or drop elastic for a fixed-size gang",
            )
        if not 1 <= min_nodes <= max_nodes:
            raise _bad(
                "min_nodes",
                min_nodes,
                f"must be at least 1 and at most max_nodes ({max_nodes})",
                "want 1 <= min_nodes <= max_nodes",
            )
    elif min_nodes or max_nodes:
        attr = "min_nodes" if min_nodes else "max_nodes"
        raise _bad(
            attr,
            min_nodes or max_nodes,
            "only an elastic job has a node range",
            "set elastic = True, or use nodes = N for a fixed size",
        )
    ckpt = _rel_dir("checkpoint_dir", checkpoint_dir) if checkpoint_dir else None
    outs = tuple(_rel_dir("outputs", o) for o in outputs)
    try:
        env_items = specs.parse_env((f"{k}={v}" for k, v in env.items()), "attribute 'env'")
    except SpecError as e:
        raise _bad(
            "env", dict(env), e.problem, "use KEY = VALUE with KEY a variable name"
        ) from None
    _check_layout(binary, data_paths)
    image = parse("container", specs.parse_image, container, '"debian:12"') if container else None
    try:
        m = JobManifest(
            name="job",
            command=(f"./{binary}", *args),
            resources=Resources(cpu_millis=cpu_millis, memory_bytes=memory_bytes, gpus=gpus),
            queue=partition.strip(),
            time_limit=seconds,
            nodes=min_nodes if elastic else nodes,
            elastic=elastic,
            min_nodes=min_nodes if elastic else None,
            max_nodes=max_nodes if elastic else None,
            max_retries=max_retries,
            checkpoint_dir=ckpt,
            env=env_items,
            outputs=outs,
            secrets=tuple(secrets),
            container=image,
            preemptible=bool(preemptible),
            **_pinning(cpu_cores, max_iobps),
        )
    except ValueError as e:
        # Reserved variable names and the like: JobManifest's message names the value.
        attr = next((a for a in ("secrets", "env") if a in str(e)), "attributes")
        raise ValueError(f"attribute {attr!r}: {e}") from None
    try:
        # The ranges and characters every job keeps (rbs.units.LIMITS), as for flags.
        check_manifest(m, lambda field: f"attribute {_ATTRS.get(field, field)!r}")
    except SpecError as e:
        raise ValueError(f"{e}; fix the attribute") from None
    spec = manifest_to_dict(m)
    for key in ("name", "command", "input_root"):
        del spec[key]
    spec["args"] = list(args)
    spec[JOB_MARK] = 1
    return spec


def _check_layout(binary: str, data_paths: Sequence[str]) -> None:
    runfiles = f"{binary}.runfiles"
    for p in data_paths:
        if p in (binary, runfiles) or p.startswith(runfiles + "/"):
            raise _bad(
                "data",
                p,
                f"would land on the binary ./{binary} (or its runfiles) in the job's folder",
                "rename the data file or the binary target",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class JobTarget:
    """A job target as analysis left it: its checked fields and the files it ships."""

    label: Label
    spec: Mapping[str, Any]
    binary: File
    runfiles: tuple[File, ...]
    data: tuple[File, ...]

    def files(self) -> list[File]:
        return [self.binary, *self.runfiles, *self.data]

    def layout(self, workspace: str) -> dict[str, File]:
        """Input-tree path -> file, as in the module docstring."""
        exe = self.binary.short_path
        out = {exe: self.binary}
        for f in self.runfiles:
            out[f"{exe}.runfiles/{workspace}/{f.short_path}"] = f
        for f in self.data:
            out[f.short_path] = f
        return out


def job_targets(graph: ActionGraph, labels: Sequence[Label]) -> dict[Label, JobTarget]:
    """The job targets among `labels` (those whose rule returned a JobInfo)."""
    out: dict[Label, JobTarget] = {}
    for label in labels:
        info = graph.targets.get(label)
        if info is None:
            continue
        for fields in info.providers.values():
            spec = fields.get("spec") if isinstance(fields, dict) else None
            if isinstance(spec, dict) and spec.get(JOB_MARK):
                out[label] = JobTarget(
                    label=label,
                    spec=spec,
                    binary=File.from_starlark(fields["binary"]),
                    runfiles=tuple(File.from_starlark(f) for f in _files(fields["runfiles"])),
                    data=tuple(File.from_starlark(f) for f in _files(fields["data"])),
                )
    return out


def _files(v: Any) -> list[Mapping[str, Any]]:
    if isinstance(v, dict):
        v = v.get("_d", v.get("_r", []))
    return [x for x in v or [] if isinstance(x, dict) and "_f" in x]


def manifest_path(label: Label) -> str:
    """Workspace-relative path of a job target's manifest: rbs-out/<pkg>/<name>.job.json."""
    pkg = f"{label.package}/" if label.package else ""
    return f"rbs-out/{pkg}{label.name}{MANIFEST_SUFFIX}"


def make_manifest(job: JobTarget, input_root: Digest) -> JobManifest:
    from rbs.wire.manifest import manifest_from_dict

    data = {k: v for k, v in job.spec.items() if k not in (JOB_MARK, "args")}
    data["name"] = job.label.name
    data["command"] = [f"./{job.binary.short_path}", *job.spec.get("args", [])]
    data["input_root"] = str(input_root)
    return manifest_from_dict(data)


def write_manifests(
    root: Path,
    graph: ActionGraph,
    jobs: Mapping[Label, JobTarget],
    digest_of: Any,
    out_path: Any,
) -> dict[Label, str]:
    """Store each job's input tree in the local build store and write its manifest.

    `digest_of(file) -> (Digest, executable)` comes from the finished build;
    `out_path(exec_path)` maps a generated file to its rbs-out path. Returns the
    manifest paths written (workspace-relative). A manifest is rewritten only when its
    bytes change, so an unchanged job keeps its file (and mtime) as it was.
    """
    from rbs.cas.disk import DiskStore
    from rbs.cas.tree import TreeEntry, build_tree
    from rbs.wire.manifest import manifest_to_json

    store = DiskStore(root / ".rbs" / "cas", durable=False)
    written: dict[Label, str] = {}
    for label, job in jobs.items():
        entries: dict[str, TreeEntry | None] = {}
        for rel, f in job.layout(graph.workspace_name).items():
            d, exe = digest_of(f)
            if d.function is not DigestFunction.BLAKE3:
                raise BuildError(f"{label}: {f.path} has a {d.function.value} digest")
            if not store.contains(d):
                # Sources that no action read are not in the store yet; staging reads
                # every blob of the tree from here.
                store.put_file(root / (f.path if f.is_source else out_path(f.path)), expected=d)
            entries[rel] = TreeEntry(digest=d, executable=exe)
        tree = build_tree(store, entries)
        text = manifest_to_json(make_manifest(job, tree))
        rel_path = manifest_path(label)
        dest = root / rel_path
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            same = dest.read_text() == text
        except OSError:
            same = False
        if not same:
            tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
            tmp.write_text(text)
            os.replace(tmp, dest)
        written[label] = rel_path
    return written


def target_provenance(label: Label) -> dict[str, str]:
    """Where each manifest field of a job target came from (see TARGET_FIELDS)."""
    source = f"target {label}"
    return {f: source if f in TARGET_FIELDS else DEFAULT_SOURCE for f in PROVENANCE_FIELDS}


def finish_job_targets(
    root: Path, graph: ActionGraph, jobs: Mapping[Label, JobTarget], report: Any, state: Any
) -> dict[Label, str]:
    """After a successful build: write the manifests of the job targets it built."""
    if not jobs:
        return {}
    from rbs.build.engine import out_path

    def digest_of(f: File) -> tuple[Digest, bool]:
        have = report.digests.get(f.path)
        if have is not None:
            return have  # type: ignore[no-any-return]
        h, size, exe = state.stats.digest(root, f.path if f.is_source else out_path(f.path))
        return Digest(function=DigestFunction.BLAKE3, hash=h, size=size), exe

    return write_manifests(root, graph, jobs, digest_of, out_path)
