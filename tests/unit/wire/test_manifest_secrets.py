"""A manifest's secrets: names only, with the env's naming rules."""

from __future__ import annotations

import pytest

from rbs.model import JobManifest
from rbs.units import SpecError
from rbs.wire.manifest import apply_flags, manifest_from_dict, manifest_to_dict


def test_flags_name_secrets_and_the_manifest_keeps_names_only() -> None:
    m, prov = apply_flags(None, None, {"--secret": ["B", "A"]}, command=["true"])
    assert m.secrets == ("A", "B")
    assert prov["secrets"] == "flag --secret"
    data = manifest_to_dict(m)
    assert data["secrets"] == ["A", "B"]
    assert manifest_from_dict(data) == m


def test_flags_add_to_a_targets_secrets() -> None:
    base = JobManifest(name="t", command=("./t",), secrets=("HF_TOKEN",))
    m, _ = apply_flags(base, None, {"--secret": "WANDB_KEY"})
    assert m.secrets == ("HF_TOKEN", "WANDB_KEY")


@pytest.mark.parametrize(
    ("names", "env", "problem"),
    [
        (["1BAD"], [], "not a valid variable name"),
        (["RBS_X"], [], "set by the scheduler"),
        (["CUDA_VISIBLE_DEVICES"], [], "set by the scheduler"),
        (["A"], ["A=1"], "also given as a plain variable"),
    ],
)
def test_secret_names_follow_the_env_rules(names: list[str], env: list[str], problem: str) -> None:
    flags: dict[str, object] = {"--secret": names}
    if env:
        flags["--env"] = env
    with pytest.raises(SpecError, match=problem) as e:
        apply_flags(None, None, flags, command=["true"])
    assert e.value.flag == "--secret"
