"""Labels, load labels, patterns and make-variable expansion."""

from __future__ import annotations

import pytest

from rbs.build.errors import BuildError
from rbs.build.expand import expand
from rbs.build.labels import Label, parse_label, parse_load_label, parse_pattern


def test_label_forms() -> None:
    assert parse_label("//pkg:name") == Label(package="pkg", name="name")
    assert parse_label("//pkg/sub") == Label(package="pkg/sub", name="sub")
    assert parse_label(":x", package="a/b") == Label(package="a/b", name="x")
    assert parse_label("file.txt", package="a") == Label(package="a", name="file.txt")
    assert parse_label("//:root") == Label(package="", name="root")
    assert str(parse_label("@rbs//job:rules.rbs")) == "@rbs//job:rules.rbs"


@pytest.mark.parametrize("bad", ["", "//pkg:", "//../x:y", "//pkg/:x", "a:b", "//p:../x"])
def test_bad_labels_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_label(bad)


def test_load_labels() -> None:
    assert parse_load_label("@rbs//job/rules.rbs", package="x") == Label(
        repo="rbs", package="job", name="rules.rbs"
    )
    assert parse_load_label(":defs.rbs", package="pkg") == Label(package="pkg", name="defs.rbs")
    assert parse_load_label("//lib:defs.rbs", package="pkg") == Label(
        package="lib", name="defs.rbs"
    )
    with pytest.raises(ValueError, match=r"\.rbs"):
        parse_load_label("//lib:defs", package="pkg")


def test_patterns() -> None:
    assert parse_pattern("//...").recursive
    p = parse_pattern("//a/...")
    assert p.recursive and p.matches_package("a/b") and not p.matches_package("ab")
    assert parse_pattern("//a:all").name is None
    assert parse_pattern("//a:*").name is None
    assert parse_pattern(":x", cwd_package="a").package == "a"
    assert parse_pattern("sub/...", cwd_package="a").package == "a/sub"
    with pytest.raises(BuildError):
        parse_pattern("@other//x:y")


def test_make_variables() -> None:
    def locate(label: str, field: str, many: bool, func: str) -> str:
        return f"<{label}:{field}:{many}>"

    v = {"@": "out", "<": "in", "SRCS": "a b", "@D": "dir"}
    assert (
        expand("cp $< $@ && echo $$HOME $(SRCS) $(@D)", v, locate)
        == "cp in out && echo $HOME a b dir"
    )
    assert expand("$(location :x) $(locations //y) $(rootpath z)", v, locate) == (
        "<:x:path:False> <//y:path:True> <z:short_path:False>"
    )
    with pytest.raises(ValueError, match=r"\$\(NOPE\) is not defined"):
        expand("$(NOPE)", v, locate)
    with pytest.raises(ValueError, match=r"\$\^ is not defined"):
        expand("$^", v, locate)
    with pytest.raises(ValueError, match="unterminated"):
        expand("$(SRCS", v, locate)
