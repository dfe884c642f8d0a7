"""Where an image comes from: the walk's image spec, parsed.

PURE: standard library only. The syntax (``docs/layer-walk.md``):

- ``REF`` or ``docker:REF``: an image of the Docker engine (``my/app:1``, an image id);
- ``docker-archive:PATH[:TAG]``: a ``docker save`` tarball (TAG picks one image of several);
- ``oci:PATH[:TAG]``: an OCI image layout, a folder or a tarball (TAG: the
  ``org.opencontainers.image.ref.name`` annotation);
- ``registry:HOST/REPO[:TAG|@sha256:…]`` (also ``docker://…``): a registry, by the
  distribution API; a name without a host is Docker Hub's (``library/`` for one component).

For a path that holds ``:`` itself the longest existing prefix is the path (``exists`` says
which prefixes exist), as skopeo reads ``docker-archive:`` and ``oci:``. A bare spec that
names an existing path and reads as one (it holds a ``/`` or ends in ``.tar``: ``./app.tar``,
``/tmp/layout``) is that file or folder, as syft and grype read one; the archive reader tells
a ``docker save`` tarball from an OCI layout by its content. A bare name such as ``ubuntu`` is
always the engine's, whatever the current folder holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from audit.errors import UsageError
from audit.redact import redact

ENGINE, DOCKER_ARCHIVE, OCI, REGISTRY = "engine", "docker-archive", "oci", "registry"
DOCKER_HUB = "registry-1.docker.io"
_HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io")
SYNTAX = (
    "write REF (an engine image), docker-archive:PATH[:TAG], oci:PATH[:TAG] or "
    "registry:HOST/REPO[:TAG|@sha256:DIGEST]"
)


@dataclass(frozen=True)
class ImageSpec:
    """A parsed spec: ``kind``, ``target`` (a reference or a path) and an optional ``tag``."""

    kind: str
    target: str
    tag: str = ""


@dataclass(frozen=True)
class RegistryRef:
    """``host`` (as contacted), ``repository`` and a tag or a ``sha256:`` digest."""

    host: str
    repository: str
    reference: str

    @property
    def by_digest(self) -> bool:
        return self.reference.startswith("sha256:")

    def __str__(self) -> str:
        joint = "@" if self.by_digest else ":"
        return f"{self.host}/{self.repository}{joint}{self.reference}"


_PREFIXES = ("registry:", "docker-archive:", "oci:", "docker:")
_CREDENTIALS = (
    "a reference with credentials in it is refused (they would show in logs and process lists)"
)
_LOGIN = (
    "log in with docker login HOST, or set LAYER_AUDIT_REGISTRY_USER and "
    "LAYER_AUDIT_REGISTRY_PASSWORD"
)


def shown_spec(text: str) -> str:
    """``text`` as messages show it: redacted after its prefix too (``registry:user:pw@host/x``
    shows as ``registry:host/x``; :func:`~audit.redact.redact` alone keeps a ``user:pw@``
    that follows a ``:``)."""
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            return prefix + redact(text[len(prefix) :])
    return redact(text)


def _has_credentials(reference: str) -> bool:
    """``user:password@host/...``: an ``@`` in the first component that is not a digest's."""
    first = reference.split("/", 1)[0]
    return "@" in first and not first.partition("@")[2].startswith("sha256:")


def parse_spec(text: str, exists: Callable[[str], bool]) -> ImageSpec:
    """The spec of ``text``; :class:`UsageError` (exit 2) when it names nothing. An engine
    reference with credentials in it is refused without being repeated (the engine's own
    error would echo it, URL-encoded past any redaction)."""
    if not text.strip() or "\n" in text or "\0" in text:
        raise UsageError(f"image spec {shown_spec(text)!r}: empty or not one line", SYNTAX)
    for prefix, kind in (("docker-archive:", DOCKER_ARCHIVE), ("oci:", OCI)):
        if text.startswith(prefix):
            path, tag = _path_and_tag(text[len(prefix) :], exists)
            if not path:
                raise UsageError(f"image spec {redact(text)!r}: no path", SYNTAX)
            return ImageSpec(kind, path, tag)
    for prefix in ("registry:", "docker://"):
        if text.startswith(prefix):
            return ImageSpec(REGISTRY, text[len(prefix) :])
    if not text.startswith("docker:") and _reads_as_path(text) and exists(text):
        return ImageSpec(DOCKER_ARCHIVE, text)
    reference = text.removeprefix("docker:")
    if _has_credentials(reference):
        raise UsageError(f"image spec: {_CREDENTIALS}", _LOGIN)
    return ImageSpec(ENGINE, reference)


def _reads_as_path(text: str) -> bool:
    return "/" in text or text.endswith((".tar", ".tar.gz", ".tgz"))


def _path_and_tag(rest: str, exists: Callable[[str], bool]) -> tuple[str, str]:
    if exists(rest) or ":" not in rest:
        return rest, ""
    cut = rest.find(":")
    while cut >= 0:
        if exists(rest[:cut]):
            return rest[:cut], rest[cut + 1 :]
        cut = rest.find(":", cut + 1)
    return rest, ""  # nothing exists: the caller names the missing path


def parse_registry_ref(text: str) -> RegistryRef:
    """``HOST/REPO[:TAG|@DIGEST]`` as the docker CLI reads it. Credentials in the reference
    (``user:password@host/...``) are refused without being repeated."""
    if _has_credentials(text):
        raise UsageError(f"registry: {_CREDENTIALS}", _LOGIN)
    name, at, digest = text.partition("@")
    if at and (not digest.startswith("sha256:") or len(digest) != 71):
        raise UsageError(
            f"registry:{redact(text)}: {redact(digest)!r} is not a sha256:<64 hex> digest", SYNTAX
        )
    last = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > last:
        name, tag = name[:colon], name[colon + 1 :]
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        host, repository = first, rest
    else:
        host, repository = "docker.io", name
    if host in _HUB_NAMES:
        host = DOCKER_HUB
        repository = repository if "/" in repository else f"library/{repository}"
    if not repository or repository != repository.lower() or " " in repository:
        raise UsageError(f"registry:{redact(text)}: not a repository name", SYNTAX)
    return RegistryRef(host, repository, digest if at else (tag or "latest"))
