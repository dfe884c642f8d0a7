"""A tiny source distribution whose build leaves a marker file wherever it runs.

The sdist's ``setup.py`` is its own PEP 517 build backend (``build-backend = "setup"``,
``backend-path = ["."]``, no build requirements, so no index is asked for setuptools): importing
it, which every resolver does to read the metadata of an sdist, writes ``marker`` (an absolute
path) and then answers the hooks with a one-file wheel. On this machine the marker appears at
``marker``; in a container it appears inside the container, never on the host.

Its ``PKG-INFO`` says ``Metadata-Version: 2.1`` (no static metadata, PEP 643), so a resolver
must run the build to learn its dependencies: the case lock must never meet on the host.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import canonicalize_name

_BACKEND = '''"""An in-tree build backend that leaves a marker wherever it runs."""
import base64, hashlib, pathlib, zipfile

pathlib.Path({marker!r}).parent.mkdir(parents=True, exist_ok=True)
pathlib.Path({marker!r}).write_text("built here")
NAME, VERSION, REQUIRES = {name!r}, {version!r}, {requires!r}
DIST = NAME.replace("-", "_") + "-" + VERSION
INFO = DIST + ".dist-info"


def _metadata():
    lines = ["Metadata-Version: 2.1", "Name: " + NAME, "Version: " + VERSION]
    return "\\n".join(lines + ["Requires-Dist: " + r for r in REQUIRES]) + "\\n\\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(directory, config_settings=None):
    folder = pathlib.Path(directory, INFO)
    folder.mkdir()
    (folder / "METADATA").write_text(_metadata())
    return INFO


def _hash(text):
    digest = hashlib.sha256(text.encode()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def build_wheel(directory, config_settings=None, metadata_directory=None):
    name = DIST + "-py3-none-any.whl"
    wheel = "Wheel-Version: 1.0\\nGenerator: tests\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    files = {{INFO + "/METADATA": _metadata(), INFO + "/WHEEL": wheel}}
    record = "".join(k + "," + _hash(v) + "," + str(len(v)) + "\\n" for k, v in files.items())
    with zipfile.ZipFile(pathlib.Path(directory, name), "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
        archive.writestr(INFO + "/RECORD", record + INFO + "/RECORD,,\\n")
    return name
'''
_PYPROJECT = '[build-system]\nrequires = []\nbuild-backend = "setup"\nbackend-path = ["."]\n'


def make_marker_sdist(
    folder: Path, name: str, version: str, marker: Path, requires: Sequence[str] = ()
) -> Path:
    """``folder/<name>-<version>.tar.gz``, whose build writes ``marker``; its path."""
    stem = f"{canonicalize_name(name).replace('-', '_')}-{version}"
    pkg_info = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n"
    backend = _BACKEND.format(marker=str(marker), name=name, version=version, requires=[*requires])
    members = {"setup.py": backend, "pyproject.toml": _PYPROJECT, "PKG-INFO": pkg_info}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for member, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{stem}/{member}")
            info.size, info.mtime = len(data), 0
            archive.addfile(info, io.BytesIO(data))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path
