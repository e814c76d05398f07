"""--preemptible in manifests and flags: present only when set, refused as a non-boolean."""

from __future__ import annotations

import pytest

from rbs.units import SpecError
from rbs.wire.manifest import apply_flags, manifest_from_dict, manifest_to_dict


def test_the_flag_sets_the_field_which_appears_only_when_set() -> None:
    m, _ = apply_flags(None, None, {"--preemptible": True}, command=["x"])
    assert m.preemptible
    data = manifest_to_dict(m)
    assert data["preemptible"] is True
    assert manifest_from_dict(data) == m
    plain, _ = apply_flags(None, None, {}, command=["x"])
    assert "preemptible" not in manifest_to_dict(plain) and not plain.preemptible


def test_a_non_boolean_value_is_refused_naming_the_flag() -> None:
    with pytest.raises(SpecError) as e:
        apply_flags(None, None, {"--preemptible": "yes"}, command=["x"])
    assert e.value.flag == "--preemptible"
    with pytest.raises(SpecError, match="preemptible"):
        manifest_from_dict({"command": ["x"], "preemptible": "yes"})
