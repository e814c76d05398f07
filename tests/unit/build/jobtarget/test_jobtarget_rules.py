"""Job rules at analysis: every attribute's manifest field, defaults, and every error case."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobrule_ws import Analyze, write_ws

from rbs.build.api import load_and_analyze
from rbs.build.errors import BuildError
from rbs.build.jobtarget import make_manifest, target_provenance
from rbs.build.labels import Label
from rbs.build.loader import Loader
from rbs.build.workspace import Workspace
from rbs.model import Digest, JobManifest
from rbs.wire.manifest import PROVENANCE_FIELDS, manifest_from_json, manifest_to_json

ROOT = Digest.of(b"tree")


def manifest(analyze_job: Analyze, build: str) -> JobManifest:
    return make_manifest(analyze_job(build), ROOT)


def test_every_training_attribute_lands_in_its_manifest_field(analyze_job: Analyze) -> None:
    m = manifest(
        analyze_job,
        """ml_training_job(
    name = "job",
    binary = ":train",
    data = ["data.txt"],
    args = ["--epochs", "3"],
    env = {"LR": "0.1", "MODE": "fast"},
    cpu = "500m",
    memory = "8Gi",
    gpus = 2,
    partition = "long",
    time_limit = "90m",
    nodes = 4,
    max_retries = 5,
    checkpoint_dir = "ckpt/run1",
    outputs = ["model.bin", "metrics"],
)
""",
    )
    assert m.name == "job"
    assert m.command == ("./app/train", "--epochs", "3")
    assert m.input_root == ROOT
    assert m.resources.cpu_millis == 500
    assert m.resources.memory_bytes == 8 << 30
    assert m.resources.gpus == 2
    assert m.queue == "long"
    assert m.time_limit == 90 * 60
    assert (m.nodes, m.elastic, m.min_nodes, m.max_nodes) == (4, False, None, None)
    assert m.max_retries == 5
    assert m.checkpoint_dir == "ckpt/run1"
    assert m.env == (("LR", "0.1"), ("MODE", "fast"))
    assert m.outputs == ("model.bin", "metrics")


def test_training_defaults(analyze_job: Analyze) -> None:
    m = manifest(analyze_job, 'ml_training_job(name = "job", binary = ":train")\n')
    assert m.resources.cpu_millis == 1000
    assert m.resources.memory_bytes == 4 << 30
    assert m.resources.gpus == 0
    assert (m.queue, m.time_limit, m.nodes, m.max_retries) == ("batch", 3600, 1, 3)
    assert m.checkpoint_dir is None and m.env == () and m.outputs == ()
    assert m.command == ("./app/train",)


def test_elastic_job_starts_at_min_nodes(analyze_job: Analyze) -> None:
    m = manifest(
        analyze_job,
        'ml_training_job(name = "job", binary = ":train", elastic = True, min_nodes = 2, max_nodes = 8)\n',
    )
    assert (m.elastic, m.nodes, m.min_nodes, m.max_nodes) == (True, 2, 2, 8)
    assert m.node_range == (2, 8)


def test_batch_job_shape_and_defaults(analyze_job: Analyze) -> None:
    job = analyze_job(
        'batch_job(name = "job", binary = ":train", inputs = ["data.txt"], args = ["x"], '
        'env = {"K": "v"}, cpu = "2", memory = "512Mi")\n'
    )
    m = make_manifest(job, ROOT)
    assert m.command == ("./app/train", "x")
    assert (m.resources.cpu_millis, m.resources.memory_bytes) == (2000, 512 << 20)
    assert (m.queue, m.time_limit, m.nodes, m.max_retries) == ("batch", None, 1, 0)
    assert m.env == (("K", "v"),)
    assert [f.short_path for f in job.data] == ["app/data.txt"]
    m2 = manifest(analyze_job, 'batch_job(name = "job", binary = ":train")\n')
    assert m2.resources.memory_bytes == 1 << 30


def test_gpu_job_defaults_to_the_gpu_partition_and_one_gpu(analyze_job: Analyze) -> None:
    m = manifest(analyze_job, 'gpu_job(name = "job", binary = ":train")\n')
    assert (m.queue, m.resources.gpus) == ("gpu", 1)
    m = manifest(analyze_job, 'gpu_job(name = "job", binary = ":train", gpus = 4, nodes = 2)\n')
    assert (m.resources.gpus, m.nodes) == (4, 2)


@pytest.mark.parametrize(
    ("attr", "text", "want"),
    [
        ("cpu", '"2"', 2000),
        ("cpu", '"0.5"', 500),
        ("cpu", '"250m"', 250),
        ("memory", '"512Mi"', 512 << 20),
        ("memory", '"1G"', 10**9),
        ("memory", '"8Gi"', 8 << 30),
        ("time_limit", '"90m"', 5400),
        ("time_limit", '"2h"', 7200),
        ("time_limit", '"1d"', 86400),
        ("time_limit", '"1h30m"', 5400),
    ],
)
def test_quantities_and_durations(analyze_job: Analyze, attr: str, text: str, want: int) -> None:
    m = manifest(
        analyze_job, f'ml_training_job(name = "job", binary = ":train", {attr} = {text})\n'
    )
    got = {
        "cpu": m.resources.cpu_millis,
        "memory": m.resources.memory_bytes,
        "time_limit": m.time_limit,
    }[attr]
    assert got == want


BAD = [
    ('cpu = "two"', "'cpu'", "500m"),
    ('cpu = "0"', "'cpu'", "500m"),
    ('memory = "4GB"', "'memory'", "8Gi"),
    ('memory = "-1Gi"', "'memory'", "512Mi"),
    ('time_limit = "forever"', "'time_limit'", "90m"),
    ("gpus = -1", "'gpus'", "use 0"),
    ("nodes = 0", "'nodes'", "nodes = 1 or more"),
    ("max_retries = -2", "'max_retries'", "use 0"),
    ("elastic = True", "'elastic'", "min_nodes = 2, max_nodes = 4"),
    ("elastic = True, min_nodes = 2", "'elastic'", "max_nodes"),
    ("elastic = True, min_nodes = 4, max_nodes = 2", "'min_nodes'", "min_nodes <= max_nodes"),
    ("elastic = True, nodes = 3, min_nodes = 1, max_nodes = 4", "'nodes'", "remove nodes"),
    ("min_nodes = 2", "'min_nodes'", "elastic = True"),
    ("max_nodes = 2", "'max_nodes'", "elastic = True"),
    ('partition = " "', "'partition'", "name a queue"),
    ('checkpoint_dir = "/tmp/ckpt"', "'checkpoint_dir'", "relative path"),
    ('checkpoint_dir = "../up"', "'checkpoint_dir'", "relative path"),
    ('outputs = ["../secret"]', "'outputs'", "relative path"),
    ('env = {"RBS_ATTEMPT": "9"}', "'env'", "set by the scheduler"),
    ('env = {"RANK": "0"}', "'env'", "set by the scheduler"),
    ('env = {"1BAD": "x"}', "'env'", "variable name"),
    # The ranges and characters of rbs.units.LIMITS, as for flags and manifests.
    ("max_retries = 100000", "'max_retries'", "from 0 to 1000"),
    ('time_limit = "99999d"', "'time_limit'", "from 1s to 366d"),
    ("gpus = 1000", "'gpus'", "from 0 to 256"),
    ('memory = "1Ei"', "'memory'", "to 64Ti"),
    ('env = {"A": "a\\x00b"}', "'env'", "NUL"),
    ('args = ["a\\x1bb"]', "'args'", "U+001B"),
]


@pytest.mark.parametrize(("attrs", "attr", "fix"), BAD)
def test_bad_values_fail_at_the_target_line_naming_attribute_and_fix(
    analyze_job: Analyze, prelude_lines: int, attrs: str, attr: str, fix: str
) -> None:
    with pytest.raises(BuildError) as e:
        analyze_job(f'\nml_training_job(name = "job", binary = ":train", {attrs})\n')
    err = e.value
    assert err.location is not None
    assert (err.location.file, err.location.line) == ("app/BUILD", prelude_lines + 2)
    assert attr in err.message, err.render()
    assert fix in err.render(), err.render()
    assert "ml_training_job //app:job" in err.message


def test_gpu_job_without_gpus_is_an_error(analyze_job: Analyze) -> None:
    with pytest.raises(BuildError, match=r"'gpus'.*ml_training_job"):
        analyze_job('gpu_job(name = "job", binary = ":train", gpus = 0)\n')


def test_binary_must_be_an_executable_target(analyze_job: Analyze) -> None:
    with pytest.raises(BuildError) as e:
        analyze_job('batch_job(name = "job", binary = ":files")\n')
    assert "'binary' needs an executable" in e.value.message
    assert "sh_binary" in e.value.hint
    with pytest.raises(BuildError) as e:
        analyze_job('batch_job(name = "job", binary = "train.sh")\n')
    assert "'binary'" in e.value.message and "rule target" in e.value.hint


def test_binary_is_mandatory_and_attributes_are_checked(analyze_job: Analyze) -> None:
    with pytest.raises(BuildError, match="mandatory attribute 'binary'"):
        analyze_job('ml_training_job(name = "job")\n')
    with pytest.raises(BuildError, match="did you mean 'nodes'"):
        analyze_job('ml_training_job(name = "job", binary = ":train", node = 2)\n')
    with pytest.raises(BuildError, match=r"'gpus'.*must be an int"):
        analyze_job('ml_training_job(name = "job", binary = ":train", gpus = "2")\n')


def test_data_that_would_cover_the_binary_is_an_error(tmp_path: Path) -> None:
    root = write_ws(
        tmp_path,
        'ml_training_job(name = "job", binary = ":train", data = ["train.runfiles/x"])\n',
        {"app/train.runfiles/x": "x\n"},
    )
    with pytest.raises(BuildError, match=r"'data'.*would land on the binary"):
        load_and_analyze(root, ["//app:job"])


def test_layout_mirrors_the_workspace(analyze_job: Analyze) -> None:
    job = analyze_job('ml_training_job(name = "job", binary = ":train", data = [":files"])\n')
    layout = {rel: f.short_path for rel, f in job.layout("ws").items()}
    assert layout == {
        "app/train": "app/train",
        "app/train.runfiles/ws/app/train": "app/train",
        "app/train.runfiles/ws/app/train.sh": "app/train.sh",
        "app/data.txt": "app/data.txt",
    }


def test_manifest_json_is_canonical_and_round_trips(analyze_job: Analyze) -> None:
    m = manifest(analyze_job, 'ml_training_job(name = "job", binary = ":train", nodes = 2)\n')
    text = manifest_to_json(m)
    assert manifest_from_json(text) == m
    assert manifest_to_json(manifest_from_json(text)) == text
    assert '"apiVersion":"rbs/v1"' in text


def test_provenance_names_the_target_for_the_fields_it_decides() -> None:
    label = Label(package="app", name="job")
    prov = target_provenance(label)
    assert set(prov) == set(PROVENANCE_FIELDS)
    for field in ("command", "input_root", "resources.cpu", "queue", "nodes", "checkpoint_dir"):
        assert prov[field] == "target //app:job"
    for field in ("priority", "array", "dependencies", "begin_time", "requeue"):
        assert prov[field] == "default"


def test_every_rule_and_attribute_is_documented(tmp_path: Path) -> None:
    root = write_ws(tmp_path, "")
    loader = Loader(Workspace(root=root))
    loader.package("app")
    rules = {r.kind: r for r in loader.rules.values() if r.module.package == "job"}
    assert set(rules) == {"batch_job", "ml_training_job", "gpu_job"}
    for rule in rules.values():
        assert rule.doc, rule.kind
        for name, spec in rule.attrs.items():
            assert spec.doc, f"{rule.kind}.{name} has no doc="


def test_a_job_target_names_its_secrets_never_values(analyze_job: Analyze) -> None:
    m = manifest(
        analyze_job,
        'batch_job(name = "job", binary = ":train", secrets = ["WANDB_KEY", "HF_TOKEN"])\n',
    )
    assert m.secrets == ("HF_TOKEN", "WANDB_KEY")
    assert m.env == ()


def test_a_bad_secret_name_fails_naming_the_attribute(analyze_job: Analyze) -> None:
    with pytest.raises(BuildError, match=r"attribute 'secrets'.*RBS_X"):
        analyze_job('batch_job(name = "job", binary = ":train", secrets = ["RBS_X"])\n')


def test_cpu_cores_and_max_iobps_are_rule_attributes(analyze_job: Analyze) -> None:
    m = manifest(
        analyze_job,
        'batch_job(name = "job", binary = ":train", cpu_cores = "0-1,3", max_iobps = "10M")\n',
    )
    assert (m.cpu_cores, m.max_iobps) == ((0, 1, 3), 10_000_000)


def test_bad_cpu_cores_fail_naming_the_attribute(analyze_job: Analyze) -> None:
    with pytest.raises(BuildError, match=r"attribute 'cpu_cores'.*3-1"):
        analyze_job('batch_job(name = "job", binary = ":train", cpu_cores = "3-1")\n')
    with pytest.raises(BuildError, match=r"attribute 'max_iobps'"):
        analyze_job('batch_job(name = "job", binary = ":train", max_iobps = "10MB")\n')


def test_a_job_target_names_its_container_image(analyze_job: Analyze) -> None:
    m = manifest(
        analyze_job,
        'batch_job(name = "job", binary = ":train", container = "localhost/tools:1")\n',
    )
    assert (m.container, m.network) == ("localhost/tools:1", "host")
    plain = manifest(analyze_job, 'batch_job(name = "job", binary = ":train")\n')
    assert plain.container is None


def test_a_bad_container_image_fails_naming_the_attribute(analyze_job: Analyze) -> None:
    with pytest.raises(BuildError, match=r"attribute 'container'.*not an image reference"):
        analyze_job('batch_job(name = "job", binary = ":train", container = "two words")\n')
