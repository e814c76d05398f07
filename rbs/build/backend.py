"""The store-side half of execution: REAPI actions, the action cache, and a runner."""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from rbs.build.engine import Backend, BackendOutcome, OutputRef, out_path
from rbs.build.graph import CONFIG_BIN_DIRS, ActionSpec
from rbs.build.reapi import FUNCTION, prepare
from rbs.build.runner import ActionResultCache, ActionRunner, LocalActionCache, LocalRunner
from rbs.build.trees import expand_argv, expand_input_dirs, publish_dir, root_of
from rbs.cas.errors import CasError
from rbs.cas.store import BlobStore
from rbs.cas.tree import TreeEntry
from rbs.model import Digest

if TYPE_CHECKING:
    from rbs.cas.bridge import DigestBridge

_STDERR_LIMIT = 8000
GENERATED = tuple(d + "/" for d in CONFIG_BIN_DIRS.values())


def may_link_outputs() -> bool:
    """Whether outputs under rbs-out/ may be hardlinks of store blobs.

    A hardlink shares its inode with the blob, so a write through it would change the
    store. Blobs are read-only (0444, 0555), which stops every user but root: for root
    (and for a process with CAP_DAC_OVERRIDE, which we treat as root) outputs are
    copies, so `echo x >> rbs-out/...` changes the copy and never the store."""
    return os.geteuid() != 0


class StoreBackend(Backend):
    """Turns specs into REAPI actions in `store`, asks `cache`, runs misses on `runner`.

    With a `bridge`, actions are built in the server's digest function (the bridge's
    `remote`) and their outputs come back to the engine in the build's own (BLAKE3)."""

    def __init__(
        self,
        root: Path,
        store: BlobStore,
        cache: ActionResultCache,
        runner: ActionRunner,
        *,
        bridge: DigestBridge | None = None,
    ) -> None:
        self.root = root
        self.store = store
        self.cache = cache
        self.runner = runner
        self.bridge = bridge

    def close(self) -> None:
        self.runner.close()

    def abort(self) -> None:
        from rbs.build.runner import kill_running

        kill_running()
        self.runner.close()

    def export(self, digest: Digest, dest: Path, executable: bool) -> None:
        self.store.export_file(digest, dest, executable=executable, link=may_link_outputs())

    def export_tree(self, root: Digest, dest: Path) -> None:
        publish_dir(self.store, root, dest, link=may_link_outputs())

    def _ensure_source(self, path: str, digest: Digest) -> None:
        """Put an input into the store: a source file, or a generated file whose blob the
        store evicted since (the published copy under rbs-out/ still has the bytes)."""
        if self.store.contains(digest):
            return
        generated = path.startswith(GENERATED)
        local = self.root / (out_path(path) if generated else path)
        try:
            self.store.put_file(local, expected=digest)
        except (OSError, CasError) as e:
            raise RuntimeError(
                f"input {path} is neither in the store nor intact at {local} ({e}); "
                "run `rbs clean` and build again"
            ) from None

    def bring_up_to_date(
        self, spec: ActionSpec, inputs: dict[str, tuple[Digest, bool]]
    ) -> BackendOutcome:
        if spec.kind == "write":
            d = self.store.put(spec.content, function=FUNCTION)
            return BackendOutcome(
                outputs=(
                    OutputRef(
                        path=spec.outputs[0], digest=d, executable=bool(spec.executable_outputs)
                    ),
                )
            )
        for path, (d, _x) in inputs.items():
            if path not in spec.input_dirs:  # a tree artifact's Directory is in the store
                self._ensure_source(path, d)
        if spec.kind == "template":
            from rbs.build.actions import expand_template_text

            d, _x = inputs[spec.inputs[0]]
            with self.store.open(d) as f:
                text = expand_template_text(f.read(), spec.content)
            out = self.store.put(text, function=FUNCTION)
            exe = bool(spec.executable_outputs)
            return BackendOutcome(
                outputs=(OutputRef(path=spec.outputs[0], digest=out, executable=exe),)
            )
        if spec.kind == "copy":
            d, _x = inputs[spec.inputs[0]]
            return BackendOutcome(
                outputs=(
                    OutputRef(
                        path=spec.outputs[0], digest=d, executable=bool(spec.executable_outputs)
                    ),
                )
            )
        entries: dict[str, TreeEntry | None] = {
            p: TreeEntry(digest=d, executable=x) for p, (d, x) in inputs.items()
        }
        for dest, src in spec.links:
            d, x = inputs[src]
            entries[dest] = TreeEntry(digest=d, executable=x)
        if spec.input_dirs:
            dirs = {p: inputs[p][0] for p in spec.input_dirs}
            listing = expand_input_dirs(self.store, entries, dirs, spec.links)
            spec = dataclasses.replace(spec, argv=expand_argv(spec.argv, listing))
        function = FUNCTION
        if self.bridge is not None:
            function = self.bridge.remote
            twins = self.bridge.to_remote(
                e.digest for e in entries.values() if e is not None and e.digest
            )
            entries = {
                p: dataclasses.replace(e, digest=twins[e.digest]) if e and e.digest else e
                for p, e in entries.items()
            }
        prepared = prepare(self.store, spec, entries, function=function)
        res = self.cache.get(prepared)
        cached = res is not None
        if res is None:
            res = self.runner.execute(prepared)
        log = res.stdout + res.stderr
        if res.exit_code != 0 or res.missing:
            if res.exit_code != 0:
                err = res.stderr.decode(errors="replace")
                if len(err) > _STDERR_LIMIT:
                    err = "...\n" + err[-_STDERR_LIMIT:]
                msg = f"exit code {res.exit_code}\n  command: {shlex.join(spec.argv)}"
                if err.strip():
                    msg += "\n  stderr:\n" + "\n".join(
                        "    " + line for line in err.rstrip().splitlines()
                    )
            else:
                names = ", ".join(m.rpartition("/")[2] for m in res.missing)
                msg = (
                    f"the action did not create its declared output(s): {names}\n"
                    f"  command: {shlex.join(spec.argv)}"
                )
            return BackendOutcome(error=msg, exit_code=res.exit_code, log=log)
        if res.dirs and self.bridge is not None and not self.bridge.identity:
            return BackendOutcome(
                error="tree artifacts (declare_directory) need a server that offers the "
                "build's digest function (BLAKE3); use --digest-function=blake3 with an rbs "
                "server, or build this target locally",
                log=log,
            )
        if not cached:
            self.cache.put(prepared, res)
        marked = set(spec.executable_outputs)
        bridge = self.bridge
        dir_refs = tuple(
            OutputRef(path=d.path, digest=root_of(self.store, d), executable=False, is_dir=True)
            for d in res.dirs
        )
        outs = tuple(
            OutputRef(
                path=o.path,
                digest=bridge.to_local(o.digest) if bridge else o.digest,
                executable=o.executable or o.path in marked,
            )
            for o in res.outputs
        )
        return BackendOutcome(outputs=outs + dir_refs, cached=cached, log=log)


def local_backend(root: Path, *, store_dir: Path | None = None) -> StoreBackend:
    """A store under `.rbs/cas`, the local action cache `.rbs/ac`, and the local runner."""
    from rbs.cas.disk import DiskStore

    state = root / ".rbs"
    # No fsync per blob: a build store is a cache, and reads verify every blob, so a
    # blob torn by a crash is found, dropped and rebuilt rather than served.
    store = DiskStore(store_dir or state / "cas", durable=False)
    return StoreBackend(
        root, store, LocalActionCache(state / "ac", store), LocalRunner(store, state / "sandbox")
    )
