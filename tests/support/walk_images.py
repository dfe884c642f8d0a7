"""Image layers and image files made in memory, for the layer walk's tests (no Docker).

- :class:`Layer`: a layer's members (files, folders, links, whiteouts) -> its tar bytes, as a
  build engine writes them (parent folders first, PAX headers for long names);
- :func:`dist_info` / :func:`egg_info`: the files pip (or distutils) leaves for one
  distribution;
- :func:`config`: an image config whose history pairs with the layers;
- :func:`docker_archive`: a ``docker save`` tarball (manifest first or last);
- :func:`oci_layout`: an OCI image layout's files (gzip or plain layers, one or several
  platforms), :func:`write_layout` as a folder, :func:`tar_of` as a tarball.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

MTIME = 1_600_000_000


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Layer:
    """Members in order: ``files`` path -> bytes, ``links`` path -> target, ``hard`` path ->
    target, ``folders``, ``whiteouts`` (paths removed from lower layers), ``opaque`` folders."""

    files: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    hard: dict[str, str] = field(default_factory=dict)
    folders: list[str] = field(default_factory=list)
    whiteouts: list[str] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)

    def add(self, files: Mapping[str, bytes | str]) -> Layer:
        for path, data in files.items():
            self.files[path] = data.encode() if isinstance(data, str) else data
        return self

    def tar(self, fmt: int = tarfile.PAX_FORMAT) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=fmt) as archive:
            for folder in self._all_folders():
                archive.addfile(_info(folder, tarfile.DIRTYPE))
            for path in self.opaque:
                archive.addfile(
                    _info(f"{path.strip('/')}/.wh..wh..opq", tarfile.REGTYPE), io.BytesIO()
                )
            for path in self.whiteouts:
                parent, _, name = path.strip("/").rpartition("/")
                member = f"{parent}/.wh.{name}" if parent else f".wh.{name}"
                archive.addfile(_info(member, tarfile.REGTYPE), io.BytesIO())
            for path, data in self.files.items():
                info = _info(path.strip("/"), tarfile.REGTYPE)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
            for path, target in self.links.items():
                archive.addfile(_info(path.strip("/"), tarfile.SYMTYPE, target))
            for path, target in self.hard.items():
                archive.addfile(_info(path.strip("/"), tarfile.LNKTYPE, target.strip("/")))
        return buffer.getvalue()

    def _all_folders(self) -> list[str]:
        found: dict[str, None] = {}
        paths = [*self.files, *self.links, *self.hard, *self.whiteouts, *self.opaque]
        for path in paths:
            parts = path.strip("/").split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                found["/".join(parts[:depth])] = None
        for folder in self.folders:
            found[folder.strip("/")] = None
        return sorted(found)


def _info(name: str, kind: bytes, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mtime = MTIME
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    info.linkname = link
    return info


def metadata(name: str, version: str, requires: Sequence[str] = (), python: str = "") -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Python: {python}"] if python else []
    lines += [f"Requires-Dist: {r}" for r in requires]
    return "\n".join(lines) + "\n\nA long description.\n"


def dist_info(
    site: str,
    name: str,
    version: str,
    *,
    installer: str = "pip",
    requires: Sequence[str] = (),
    files: Mapping[str, bytes | str] | None = None,
) -> dict[str, bytes | str]:
    """The files pip leaves for one wheel: its module, METADATA, INSTALLER and RECORD."""
    module = canonicalize_name(name).replace("-", "_")
    folder = f"{site}/{module}-{version}.dist-info"
    members: dict[str, bytes | str] = {f"{site}/{module}/__init__.py": f"V = {version!r}\n"}
    members.update({f"{site}/{path}": data for path, data in (files or {}).items()})
    members[f"{folder}/METADATA"] = metadata(name, version, requires)
    if installer:
        members[f"{folder}/INSTALLER"] = installer + "\n"
    record = [f"{path.removeprefix(site + '/')},sha256=x,1" for path in members]
    members[f"{folder}/RECORD"] = (
        "\n".join([*record, f"{folder.removeprefix(site + '/')}/RECORD,,"]) + "\n"
    )
    return members


def egg_info(site: str, name: str, version: str, requires_txt: str = "") -> dict[str, bytes | str]:
    folder = f"{site}/{name}-{version}.egg-info"
    members: dict[str, bytes | str] = {f"{folder}/PKG-INFO": metadata(name, version)}
    if requires_txt:
        members[f"{folder}/requires.txt"] = requires_txt
    return members


def debian_python(short: str = "3.11", full: str = "3.11.2") -> dict[str, bytes | str]:
    """A Debian Python's files that matter: the executable, the standard library, dpkg."""
    return {
        f"/usr/bin/python{short}": b"\x7fELF fake",
        f"/usr/lib/python{short}/os.py": "# os\n",
        f"/usr/lib/python{short}/lib-dynload/_x.so": b"\x7fELF",
        "/usr/lib/python3/dist-packages/README": "",
        "/var/lib/dpkg/status": dpkg_status(
            [(f"python{short}-minimal", f"{full}-6"), ("libc6", "2.36-9+deb12u4")]
        ),
        "/usr/lib/os-release": 'ID=debian\nVERSION_ID="12"\n',
    }


def dpkg_status(packages: Iterable[tuple[str, str]], arch: str = "amd64") -> str:
    blocks = [
        f"Package: {name}\nStatus: install ok installed\nVersion: {version}\nArchitecture: {arch}\n"
        for name, version in packages
    ]
    return "\n".join(blocks)


def config(
    layers: Sequence[bytes],
    history: Sequence[tuple[str, bool]] | None = None,
    *,
    architecture: str = "amd64",
    variant: str = "",
    env: Sequence[str] = ("PATH=/usr/local/bin:/usr/bin:/bin",),
) -> bytes:
    """A config for uncompressed ``layers``; ``history`` (created_by, empty) pairs with them
    (one ``RUN layer N`` entry per layer when None)."""
    entries = (
        history
        if history is not None
        else [(f"RUN layer {i + 1}", False) for i in range(len(layers))]
    )
    document = {
        "architecture": architecture,
        **({"variant": variant} if variant else {}),
        "os": "linux",
        "config": {"Env": list(env)},
        "rootfs": {"type": "layers", "diff_ids": [sha256(layer) for layer in layers]},
        "history": [
            {"created_by": text, **({"empty_layer": True} if empty else {})}
            for text, empty in entries
        ],
    }
    return json.dumps(document, sort_keys=True).encode()


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = _info(name, tarfile.REGTYPE)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def tar_of(files: Mapping[str, bytes]) -> bytes:
    """A tarball of ``files`` in the given order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in files.items():
            _add(archive, name, data)
    return buffer.getvalue()


def docker_archive(
    layers: Sequence[bytes],
    image_config: bytes,
    tags: Sequence[str] = (),
    *,
    manifest_last: bool = True,
) -> bytes:
    """A legacy ``docker save`` tarball: ``<n>/layer.tar``, ``<id>.json``, ``manifest.json``."""
    config_name = sha256(image_config)[7:] + ".json"
    names = [f"{hashlib.sha256(str(i).encode()).hexdigest()}/layer.tar" for i in range(len(layers))]
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": list(tags), "Layers": names}]
    ).encode()
    members = dict(zip(names, layers, strict=True))
    members[config_name] = image_config
    if manifest_last:
        return tar_of({**members, "manifest.json": manifest})
    return tar_of({"manifest.json": manifest, **members})


@dataclass(frozen=True)
class Platform:
    """One image of a layout: its layers (uncompressed), config and platform."""

    layers: tuple[bytes, ...]
    config: bytes
    platform: str  # linux/arm64


def oci_layout(
    images: Sequence[Platform], *, compress: bool = True, tag: str = "", index: bool = True
) -> dict[str, bytes]:
    """An OCI layout's files: ``oci-layout``, ``index.json`` and ``blobs/sha256/*``. With
    several images (or ``index``) ``index.json`` points at an image index of them."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> str:
        digest = sha256(data)
        blobs[f"blobs/sha256/{digest[7:]}"] = data
        return digest

    entries = []
    for image in images:
        layers = [gzip.compress(layer, mtime=0) if compress else layer for layer in image.layers]
        kind = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": blob(image.config),
                "size": len(image.config),
            },
            "layers": [
                {"mediaType": kind, "digest": blob(layer), "size": len(layer)} for layer in layers
            ],
        }
        data = json.dumps(manifest).encode()
        os_name, arch, *variant = image.platform.split("/")
        platform = {
            "os": os_name,
            "architecture": arch,
            **({"variant": variant[0]} if variant else {}),
        }
        entries.append(
            {
                "mediaType": manifest["mediaType"],
                "digest": blob(data),
                "size": len(data),
                "platform": platform,
            }
        )
    top = entries
    if index and len(images) > 1:
        nested = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": entries,
            }
        ).encode()
        top = [
            {
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "digest": blob(nested),
                "size": len(nested),
            }
        ]
    if tag:
        for entry in top:
            entry["annotations"] = {"org.opencontainers.image.ref.name": tag}
    index_json = json.dumps({"schemaVersion": 2, "manifests": top}).encode()
    return {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}', "index.json": index_json, **blobs}


def write_layout(folder: Path, files: Mapping[str, bytes]) -> Path:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def docker_config(folder: Path, host: str, user: str, password: str) -> Path:
    """A docker CLI ``config.json`` holding a login for ``host``."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"auths": {host: {"auth": token}}}))
    return folder
