"""Which image an archive, a layout or a registry answer holds: manifests, indexes, platforms.

PURE: standard library only. Three shapes name an image's config and layers:

- a ``docker save`` archive's ``manifest.json``: ``[{"Config": path, "RepoTags": [...],
  "Layers": [paths]}]`` (legacy ``<id>/layer.tar`` paths, or ``blobs/sha256/<hex>`` since
  Docker 25, which writes an OCI layout beside it);
- an OCI image layout's ``index.json``, an OCI image index or a Docker manifest list
  (``manifests``: descriptors with ``platform``), and an image manifest (``config``,
  ``layers``: descriptors with ``digest``);
- a registry answers with the same documents (see :mod:`audit.history.walk.registry`).

:func:`select_image` reads them through a ``read(name)`` callable (a member of a tar stream
captured so far, a file of a layout folder), so a stream can ask again as members arrive:
:class:`Incomplete` means "not yet"; :class:`LayoutError` that the input cannot name an image.
Platform choice: the one asked for, else the host's; an index without it is an error listing
the platforms it has (attestation entries, ``unknown/unknown``, are never images).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
ACCEPT = (OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST)
REF_NAME = "org.opencontainers.image.ref.name"
JSON_LIMIT = 16 << 20  # an index, a manifest or a config bigger than this is not one
_MAX_NESTING = 4


class LayoutError(ValueError):
    """The input does not name one image (the message says what is missing or ambiguous)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


class Incomplete(LookupError):
    """A document needed to choose is not there (yet): a stream may still bring it."""


@dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor: what the digest names, and for an index entry its platform."""

    media_type: str
    digest: str
    size: int
    platform: str = ""
    annotations: tuple[tuple[str, str], ...] = ()

    def annotation(self, key: str) -> str:
        return dict(self.annotations).get(key, "")


@dataclass(frozen=True)
class Selection:
    """One image: its config's bytes and where each layer is, in order.

    ``layers`` are (name to read it by, blob digest or "" when unknown); the i-th layer's
    diff-id is the config's ``rootfs.diff_ids[i]``.
    """

    config: bytes
    config_digest: str
    layers: tuple[tuple[str, str], ...]
    tags: tuple[str, ...] = ()
    platform: str = ""
    manifest_digest: str = ""
    notes: tuple[str, ...] = field(default=())


Read = Callable[[str], bytes | None]


def load_json(data: bytes, where: str) -> Any:
    if len(data) > JSON_LIMIT:
        raise LayoutError(f"{where}: {len(data)} bytes, too big for an image document")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise LayoutError(f"{where}: not JSON ({str(exc)[:80]})") from None


def _platform(value: Any) -> str:
    if not isinstance(value, dict):
        return ""
    parts = [value.get("os"), value.get("architecture"), value.get("variant")]
    return "/".join(str(p) for p in parts if isinstance(p, str) and p)


def descriptor(value: Any, where: str) -> Descriptor:
    """A descriptor object; :class:`LayoutError` unless it has a sha256 digest."""
    if not isinstance(value, dict):
        raise LayoutError(f"{where}: expected a descriptor object")
    digest = value.get("digest")
    if not isinstance(digest, str) or not digest.startswith("sha256:") or len(digest) != 71:
        raise LayoutError(f"{where}: digest {str(digest)[:80]!r} is not sha256:<64 hex>")
    if any(c not in "0123456789abcdef" for c in digest[7:]):
        raise LayoutError(f"{where}: digest {digest!r} is not lower-case hex")
    annotations = value.get("annotations") or {}
    pairs = tuple(
        sorted((str(k), str(v)) for k, v in annotations.items())
        if isinstance(annotations, dict)
        else ()
    )
    size = value.get("size")
    return Descriptor(
        str(value.get("mediaType") or ""), digest,
        size if isinstance(size, int) else -1, _platform(value.get("platform")), pairs,
    )  # fmt: skip


def is_index(document: Any) -> bool:
    return isinstance(document, dict) and isinstance(document.get("manifests"), list)


def index_entries(document: Any, where: str) -> tuple[Descriptor, ...]:
    """The ``manifests`` of an OCI index or a Docker manifest list."""
    items = document.get("manifests") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise LayoutError(f"{where}: not an image index (no manifests list)")
    return tuple(descriptor(item, f"{where}: manifests[{i}]") for i, item in enumerate(items))


def manifest_parts(document: Any, where: str) -> tuple[Descriptor, tuple[Descriptor, ...]]:
    """(config, layers) of an image manifest; schema 1 manifests are refused."""
    if not isinstance(document, dict):
        raise LayoutError(f"{where}: not an image manifest")
    if document.get("schemaVersion") == 1:
        raise LayoutError(
            f"{where}: a Docker schema 1 manifest (deprecated, no config): not supported"
        )
    layers = document.get("layers")
    if "config" not in document or not isinstance(layers, list):
        raise LayoutError(f"{where}: not an image manifest (no config and layers)")
    config = descriptor(document["config"], f"{where}: config")
    return config, tuple(descriptor(item, f"{where}: layers[{i}]") for i, item in enumerate(layers))


def _same_platform(have: str, want: str) -> bool:
    """``linux/arm64`` matches ``linux/arm64/v8``; a wanted variant must match otherwise."""
    h, w = have.split("/"), want.split("/")
    if h[:2] != w[:2]:
        return False
    hv, wv = (h[2] if len(h) > 2 else ""), (w[2] if len(w) > 2 else "")
    if h[1] == "arm64":
        hv, wv = hv.replace("v8", ""), wv.replace("v8", "")
    return not wv or hv == wv


def choose_platform(
    entries: Sequence[Descriptor], wanted: str | None, host: str, where: str
) -> Descriptor:
    """The entry for ``wanted`` (else ``host``); a single image entry without a platform is
    taken as it is. :class:`LayoutError` lists what the index has when nothing matches."""
    images = [e for e in entries if not e.platform.startswith("unknown")]
    if len(images) == 1 and not images[0].platform:
        return images[0]
    target = wanted or host
    for entry in images:
        if entry.platform and _same_platform(entry.platform, target):
            return entry
    have = ", ".join(sorted({e.platform or "(no platform)" for e in images})) or "nothing"
    how = "--platform" if wanted else f"the host's platform ({host}); pass --platform"
    raise LayoutError(f"{where}: no image for {target} (it has: {have})", how)


def blob_name(digest: str) -> str:
    return "blobs/sha256/" + digest[7:]


def missing_text(missing: Incomplete, what: str) -> str:
    """Why a complete input (an archive or a folder: nothing more will arrive) names no image:
    the document ``missing`` names is absent, or too big to be one (:data:`JSON_LIMIT`: a
    reader hands such a document back as absent, never reading it whole)."""
    return (
        f"not an image {what}: no {missing.args[0]} (a docker save or OCI layout {what} has "
        f"one; a document over {JSON_LIMIT >> 20} MiB is not read)"
    )


def _need(read: Read, name: str) -> bytes:
    data = read(name)
    if data is None:
        raise Incomplete(name)
    return data


def _resolve_manifest(
    read: Read, entry: Descriptor, wanted: str | None, host: str, depth: int = 0
) -> tuple[Descriptor, Any]:
    """Follow index entries down to an image manifest: (its descriptor, its document)."""
    name = blob_name(entry.digest)
    document = load_json(_need(read, name), name)
    if is_index(document):
        if depth >= _MAX_NESTING:
            raise LayoutError(f"{name}: indexes nested deeper than {_MAX_NESTING}")
        chosen = choose_platform(index_entries(document, name), wanted, host, name)
        return _resolve_manifest(read, chosen, wanted, host, depth + 1)
    return entry, document


def select_oci(read: Read, tag: str, wanted: str | None, host: str) -> Selection:
    """The image of an OCI layout (``index.json``): by ``tag`` (the ref.name annotation) when
    given, else by platform."""
    index = load_json(_need(read, "index.json"), "index.json")
    entries = index_entries(index, "index.json")
    if tag:
        tagged = [e for e in entries if e.annotation(REF_NAME) == tag]
        if not tagged:
            names = sorted({e.annotation(REF_NAME) for e in entries} - {""})
            raise LayoutError(
                f"index.json: no image tagged {tag!r} (tags: {', '.join(names) or 'none'})"
            )
        entries = tuple(tagged)
    entry = choose_platform(entries, wanted, host, "index.json")
    manifest_entry, document = _resolve_manifest(read, entry, wanted, host)
    config, layers = manifest_parts(document, blob_name(manifest_entry.digest))
    tags = tuple(sorted({e.annotation(REF_NAME) for e in entries} - {""}))
    return Selection(
        _need(read, blob_name(config.digest)), config.digest,
        tuple((blob_name(layer.digest), layer.digest) for layer in layers),
        tags, manifest_entry.platform, manifest_entry.digest,
    )  # fmt: skip


def select_docker(read: Read, tag: str) -> Selection:
    """The image of a ``docker save`` archive's ``manifest.json`` (by ``tag`` when it holds
    several)."""
    document = load_json(_need(read, "manifest.json"), "manifest.json")
    if not isinstance(document, list) or not document:
        raise LayoutError("manifest.json: expected a non-empty list of images")
    images = [item for item in document if isinstance(item, dict)]
    chosen = _by_tag(images, tag)
    config_path, layers = chosen.get("Config"), chosen.get("Layers")
    if not isinstance(config_path, str) or not isinstance(layers, list):
        raise LayoutError("manifest.json: an image without Config and Layers")
    if not all(isinstance(p, str) for p in layers):
        raise LayoutError("manifest.json: Layers must be paths")
    config = _need(read, config_path)
    tags = tuple(t for t in chosen.get("RepoTags") or () if isinstance(t, str))
    return Selection(config, "", tuple((path, "") for path in layers), tags)


def _by_tag(images: list[dict[str, Any]], tag: str) -> dict[str, Any]:
    if tag:
        for item in images:
            if tag in (item.get("RepoTags") or ()):
                return item
        raise LayoutError(f"manifest.json: no image tagged {tag!r} (tags: {_tags(images)})")
    if len(images) > 1:
        raise LayoutError(
            f"manifest.json: {len(images)} images (tags: {_tags(images)}): name one, "
            "docker-archive:PATH:TAG"
        )
    return images[0]


def _tags(images: list[dict[str, Any]]) -> str:
    names = sorted(t for item in images for t in item.get("RepoTags") or () if isinstance(t, str))
    return ", ".join(names) or "none"


def select_image(read: Read, tag: str, wanted: str | None, host: str) -> Selection:
    """The image an archive or layout holds: ``manifest.json`` (a ``docker save``) first, else
    ``index.json`` (an OCI layout). :class:`Incomplete` while neither has arrived."""
    if read("manifest.json") is not None:
        return select_docker(read, tag)
    if read("index.json") is not None:
        return select_oci(read, tag, wanted, host)
    raise Incomplete("manifest.json or index.json")
