"""A worker's container images on the wire (rbs.v1.Images, LocalImage) and their matching.

A worker sends an `ImagesReport` after Register and after each pull and each removal
by its cache cap; the server keeps the latest per connected worker, shows it in `rbs
remote status`, and refuses at submit an image no such worker has while none can pull
(`image_refusal`). docs/design/containers.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalImageInfo:
    """One image in a worker's engine: its id, tags and repo digests, its size."""

    image_id: str  # sha256:<hex>
    names: tuple[str, ...] = ()
    size_bytes: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ImagesReport:
    """A worker's local images and whether it expects a pull to work."""

    images: tuple[LocalImageInfo, ...] = ()
    can_pull: bool = False


def image_to_pb(i: LocalImageInfo) -> w_pb2.LocalImage:
    return w_pb2.LocalImage(image_id=i.image_id, names=list(i.names), size_bytes=i.size_bytes)


def image_from_pb(pb: w_pb2.LocalImage) -> LocalImageInfo:
    return LocalImageInfo(image_id=pb.image_id, names=tuple(pb.names), size_bytes=pb.size_bytes)


def images_to_pb(r: ImagesReport) -> w_pb2.Images:
    return w_pb2.Images(images=[image_to_pb(i) for i in r.images], can_pull=r.can_pull)


def images_from_pb(pb: w_pb2.Images) -> ImagesReport:
    return ImagesReport(images=tuple(image_from_pb(i) for i in pb.images), can_pull=pb.can_pull)


def _spellings(ref: str) -> set[str]:
    """The names an engine may know `ref` by: as given, and short names completed as
    podman and Docker complete them (localhost/, docker.io/library/, a :latest tag)."""
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    forms = {ref, name} if "@" not in ref else {ref}
    if "@" not in ref and ":" not in last:
        forms.add(f"{name}:latest")
    first = name.split("/", 1)[0]
    if "/" not in name or ("." not in first and ":" not in first and first != "localhost"):
        for f in list(forms):
            forms.update({f"localhost/{f}", f"docker.io/{f}"})
            if "/" not in name:
                forms.add(f"docker.io/library/{f}")
    return forms


def has_image(images: Iterable[LocalImageInfo], ref: str) -> bool:
    """Whether `ref` (a name, name:tag, name@sha256:..., an id or its prefix) is among them."""
    forms = _spellings(ref)
    digest = ref.split("@", 1)[1] if "@" in ref else None
    bare = ref.removeprefix("sha256:")
    for i in images:
        if forms & set(i.names):
            return True
        hexid = i.image_id.removeprefix("sha256:")
        if digest is not None and (
            digest == i.image_id or any(n.endswith("@" + digest) for n in i.names)
        ):
            return True
        if (
            len(bare) >= 12
            and all(c in "0123456789abcdef" for c in bare)
            and hexid.startswith(bare)
        ):
            return True
    return False


def image_refusal(ref: str, reports: Iterable[ImagesReport | None]) -> str | None:
    """Why a job naming `ref` is refused at submit, or None: `reports` are those of the
    live workers with a container runtime (None: one that has not reported yet, which
    may have it). Refused when none has it and none can pull."""
    seen: list[ImagesReport] = []
    for r in reports:
        if r is None or r.can_pull or has_image(r.images, ref):
            return None
        seen.append(r)
    if not seen:
        return None  # no worker with a runtime: the job core's own refusal says so
    names = sorted({n for r in seen for i in r.images for n in i.names if "@" not in n})
    listed = ", ".join(names[:20]) + (f" (and {len(names) - 20} more)" if len(names) > 20 else "")
    return (
        f"--container {ref}: unknown image: no worker has it and none can pull it "
        f"(rbs remote worker --container-pull); images on workers: {listed or 'none'}; "
        "load it on a worker (podman load / podman import; the worker reports it within "
        "30 s) or name one of these"
    )
