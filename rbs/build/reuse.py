"""The analyser's side of the per-package cache: record what each analysis read, restore clean ones.

Each fresh analysis of a rule target runs inside a `Frame` that collects the labels it
resolves (its edges) and which actions its own implementation added (those appended
while it ran that no nested analysis claimed). Restoring an entry restores its edges
first, then appends its actions and sets its info, exactly as analysing it would have,
and never loads its package. See `rbs.build.pkgcache` for when an entry is clean.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rbs.build.graph import ActionSpec, TargetInfo
from rbs.build.labels import Label
from rbs.build.pkgcache import AnalysisCache, Entry, Frame, Key

if TYPE_CHECKING:
    from rbs.build.rules import Target


class Reuse:
    """Mixin of the analyser (its state is shared by every configuration's analyser)."""

    config: str
    infos: dict[Label, TargetInfo]
    plain: dict[Label, dict[str, Any]]
    actions: list[ActionSpec]
    producers: dict[str, int]
    cache: AnalysisCache | None
    _frames: list[Frame]
    _owner: list[Key | None]

    if TYPE_CHECKING:  # provided by the analyser

        def config_analyzer(self, config: str) -> Reuse: ...
        def resolve(
            self, label: Label, *, referrer: Target | None = None, attr: str = ""
        ) -> TargetInfo: ...

    def _edge(self, label: Label) -> None:
        if self._frames:
            self._frames[-1].edges.append((self.config, label))

    def _restore(self, label: Label) -> TargetInfo | None:
        """The info of `label` from the cache when it is clean there, else None."""
        cache = self.cache
        if cache is None:
            return None
        key = (self.config, label)
        e = cache.clean(key)
        if e is None:
            return None
        self._frames.append(Frame(key=key))  # the edges of a restored entry are its own
        try:
            for config, dep, _ in e.edges:
                self.config_analyzer(config).resolve(dep)
        finally:
            self._frames.pop()
        owner = self._claim_upto()
        for spec in e.actions:
            have = self.producers.get(spec.outputs[0]) if spec.outputs else None
            if have is not None and self.actions[have] == spec:
                continue  # shared with another entry (rbs's own @bazel_tools files)
            idx = len(self.actions)
            self.actions.append(spec)
            owner.append(key)
            for out in spec.outputs:
                self.producers[out] = idx
        self.infos[label] = e.info
        self.plain[label] = e.plain
        cache.keep_restored(key, e)
        if not e.source and e.info.kind != "generated file":
            cache.restored += 1
        return e.info

    def _claim_upto(self) -> list[Key | None]:
        owner = self._owner
        owner.extend([None] * (len(self.actions) - len(owner)))
        return owner

    def _begin(self, label: Label) -> Frame | None:
        if self.cache is None:
            return None
        frame = Frame(key=(self.config, label))
        self._frames.append(frame)
        return frame

    def _end(self, frame: Frame | None) -> None:
        if frame is not None:
            self._frames.pop()

    def _keep_rule(self, frame: Frame | None, target: Target, start: int) -> None:
        """Record a fresh analysis: the actions added since `start` that are its own."""
        cache = self.cache
        if frame is None or cache is None:
            return
        owner = self._claim_upto()
        own = [i for i in range(start, len(owner)) if owner[i] is None]
        for i in own:
            owner[i] = frame.key
        label = target.label
        cache.analysed += 1
        self._keep(frame.key, label, tuple(self.actions[i] for i in own), frame.edges, frame)

    def _keep_file(self, label: Label, source: str = "", owner: Label | None = None) -> None:
        if self.cache is not None:
            edges = [] if owner is None else [(self.config, owner)]
            self._keep((self.config, label), label, (), edges, None, source=source)

    def _keep(
        self,
        key: Key,
        label: Label,
        actions: tuple[ActionSpec, ...],
        edges: list[Key],
        frame: Frame | None,
        *,
        source: str = "",
    ) -> None:
        assert self.cache is not None
        entry = Entry(
            stamp=self.cache.stamp,
            package=(label.package, -1),
            info=self.infos[label],
            plain=self.plain[label],
            actions=actions,
            edges=(),
            packages=tuple((p, -1) for p in sorted(frame.packages)) if frame else (),
            source=source,
        )
        self.cache.fresh[key] = (entry, list(dict.fromkeys(edges)))
