"""Published outputs are read-only, and writing to one never changes the store's blob."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import blake3
import pytest

from rbs.build import backend
from rbs.build.driver import BuildOptions, BuildResult, run_build
from rbs.model import Digest

MakeWs = Callable[[dict[str, str]], Path]

FILES = {
    "pkg/BUILD": (
        'genrule(name = "g", outs = ["g.out"], cmd = "echo generated > $@")\n'
        'genrule(name = "x", outs = ["x.sh"], cmd = "printf \'#!/bin/sh\\\\necho hi\\\\n\' > $@",'
        " executable = True)\n"
    ),
}


def build(root: Path) -> BuildResult:
    return run_build(root, ("//...",), options=BuildOptions(jobs=2))


def blob(root: Path, digest: Digest) -> Path:
    return root / ".rbs/cas/blobs/blake3" / digest.hash[:2] / digest.hash


def digest_of(r: BuildResult, name: str) -> Digest:
    return next(d for p, (d, _) in r.report.digests.items() if p.endswith("/" + name))


def test_outputs_are_read_only(make_ws: MakeWs) -> None:
    root = make_ws(FILES)
    assert build(root).ok
    assert (root / "rbs-out/bin/pkg/g.out").stat().st_mode & 0o777 == 0o444
    assert (root / "rbs-out/bin/pkg/x.sh").stat().st_mode & 0o777 == 0o555


def test_appending_to_an_output_leaves_the_store_intact(make_ws: MakeWs) -> None:
    root = make_ws(FILES)
    r = build(root)
    assert r.ok
    digest = digest_of(r, "g.out")
    out = root / "rbs-out/bin/pkg/g.out"
    try:
        with open(out, "a") as f:  # what `echo x >> rbs-out/bin/pkg/g.out` does
            f.write("x\n")
    except PermissionError:
        assert os.geteuid() != 0  # a plain user is stopped by the 0444 mode
    else:
        assert out.read_text() == "generated\nx\n"  # root wrote to its own copy
    data = blob(root, digest).read_bytes()
    assert data == b"generated\n" and blake3.blake3(data).hexdigest() == digest.hash
    again = build(root)  # and the next build puts the output back
    assert again.ok and out.read_text() == "generated\n"


def test_root_gets_copies_and_other_users_hardlinks(
    make_ws: MakeWs, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert backend.may_link_outputs() is (os.geteuid() != 0)
    root = make_ws(FILES)
    monkeypatch.setattr(backend.os, "geteuid", lambda: 0)
    r = build(root)
    assert r.ok
    out = root / "rbs-out/bin/pkg/g.out"
    assert out.stat().st_ino != blob(root, digest_of(r, "g.out")).stat().st_ino

    linked = root / "linked"
    linked.mkdir()
    (linked / "WORKSPACE").touch()
    (linked / "pkg").mkdir()
    (linked / "pkg/BUILD").write_text(FILES["pkg/BUILD"])
    monkeypatch.setattr(backend.os, "geteuid", lambda: 1000)
    r = build(linked)
    assert r.ok
    out = linked / "rbs-out/bin/pkg/g.out"
    assert out.stat().st_ino == blob(linked, digest_of(r, "g.out")).stat().st_ino
