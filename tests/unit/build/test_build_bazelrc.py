"""`.bazelrc` reading: commands, inheritance, --config, imports, as Bazel orders them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rbs.build.bazelrc import RcError, rc_args


def texts(root: Path, command: str, **kw: object) -> list[str]:
    return [a.text for a in rc_args(root, command, **kw)]  # type: ignore[arg-type]


def test_common_then_build_then_test_lines_and_configs_in_place(tmp_path: Path) -> None:
    (tmp_path / ".bazelrc").write_text(
        "# a comment\n"
        "test --define=t=1\n"
        "build --define=b=1 --config=fast\n"
        "common --keep_going\n"
        "build:fast --jobs=3 \\\n"
        "    --define=mode=fast\n"
        "build:slow --define=mode=slow\n"
        "run --define=r=1\n"
        "try-import %workspace%/user.bazelrc\n"
    )
    assert texts(tmp_path, "build") == [
        "--keep_going",
        "--define=b=1",
        "--jobs=3",
        "--define=mode=fast",
    ]
    assert texts(tmp_path, "test") == [
        "--keep_going",
        "--define=b=1",
        "--jobs=3",
        "--define=mode=fast",
        "--define=t=1",
    ]
    assert texts(tmp_path, "build", configs=["slow"])[-1] == "--define=mode=slow"
    (tmp_path / "user.bazelrc").write_text("build --define=user=1\n")
    assert texts(tmp_path, "build")[-1] == "--define=user=1"
    src = rc_args(tmp_path, "build")[-1].source
    assert src.endswith("user.bazelrc:1")


def test_import_errors_unknown_configs_and_cycles_name_the_line(tmp_path: Path) -> None:
    (tmp_path / ".bazelrc").write_text("import %workspace%/missing.rc\n")
    with pytest.raises(RcError, match=r"missing\.rc does not exist"):
        rc_args(tmp_path, "build")
    (tmp_path / ".bazelrc").write_text("build:a --config=b\nbuild:b --config=a\n")
    with pytest.raises(RcError, match="expands itself"):
        rc_args(tmp_path, "build", configs=["a"])
    with pytest.raises(RcError, match=r"--config=zzz: no rc line defines it .*a, b"):
        rc_args(tmp_path, "build", configs=["zzz"])


def test_bazelrc_flag_files_and_ignore_all(tmp_path: Path) -> None:
    (tmp_path / ".bazelrc").write_text("build --define=ws=1\n")
    extra = tmp_path / "extra.rc"
    extra.write_text("build --define=extra=1\n")
    assert texts(tmp_path, "build", bazelrc=[str(extra)]) == ["--define=ws=1", "--define=extra=1"]
    assert texts(tmp_path, "build", ignore_rc=True) == []
    with pytest.raises(RcError, match="does not exist"):
        rc_args(tmp_path, "build", bazelrc=[str(tmp_path / "nope.rc")])
