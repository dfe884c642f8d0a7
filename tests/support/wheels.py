"""Tiny, valid wheels written with zipfile, for local package indexes in tests.

A wheel here is one module (``<name>/__init__.py`` holding ``__version__``), METADATA with
``Requires-Dist`` lines, WHEEL, and a RECORD with sha256 hashes, so pip and pip-tools accept
it like any published wheel. Names and versions go through ``packaging`` so local versions
(``1.0+cu130``), pre-releases and odd spellings (``Foo_Bar``) come out the way pip expects.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.tags import parse_tag
from packaging.utils import canonicalize_name
from packaging.version import Version

from audit.lock.standins import provided_extras

# A fixed timestamp keeps a wheel's bytes (and so its sha256) identical from run to run.
_ZIP_DATE = (2020, 1, 1, 0, 0, 0)


def wheel_stem(name: str, version: str) -> str:
    """``<distribution>-<version>`` as wheel file names and .dist-info folders spell it."""
    return f"{canonicalize_name(name).replace('-', '_')}-{Version(version)}"


def wheel_filename(name: str, version: str, tag: str = "py3-none-any") -> str:
    """The wheel's file name, e.g. ``foo_bar-1.0+cu130-py3-none-any.whl``."""
    parse_tag(tag)  # a bad tag is a bug in the test: fail at once
    return f"{wheel_stem(name, version)}-{tag}.whl"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def _metadata(name: str, version: str, requires: Sequence[str]) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {Version(version)}"]
    lines += [f"Provides-Extra: {extra}" for extra in provided_extras(requires)]
    lines += [f"Requires-Dist: {Requirement(req)}" for req in requires]
    return "\n".join(lines) + "\n\n"


def _wheel_info(tag: str) -> str:
    lines = ["Wheel-Version: 1.0", "Generator: tests.support.wheels", "Root-Is-Purelib: true"]
    lines += [f"Tag: {t}" for t in sorted(str(t) for t in parse_tag(tag))]
    return "\n".join(lines) + "\n"


def wheel_contents(
    name: str,
    version: str,
    *,
    requires: Sequence[str] = (),
    tag: str = "py3-none-any",
    files: Mapping[str, str | bytes] | None = None,
) -> dict[str, bytes]:
    """Every archive member of the wheel except RECORD, path -> bytes, in archive order."""
    module = canonicalize_name(name).replace("-", "_")
    info = f"{wheel_stem(name, version)}.dist-info"
    members: dict[str, str | bytes] = {
        f"{module}/__init__.py": f'__version__ = "{Version(version)}"\n'
    }
    members.update(files or {})
    members[f"{info}/METADATA"] = _metadata(name, version, requires)
    members[f"{info}/WHEEL"] = _wheel_info(tag)
    return {path: _bytes(data) for path, data in members.items()}


def _bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode()


def make_wheel(
    dest: Path,
    name: str,
    version: str,
    *,
    requires: Sequence[str] = (),
    tag: str = "py3-none-any",
    files: Mapping[str, str | bytes] | None = None,
) -> Path:
    """Write a wheel into directory ``dest`` and return its path.

    ``files`` adds or replaces archive members (path inside the wheel -> text or bytes), e.g. a
    different module body to make a same-version rebuild.
    """
    members = wheel_contents(name, version, requires=requires, tag=tag, files=files)
    record_path = f"{wheel_stem(name, version)}.dist-info/RECORD"
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in members.items()]
    members[record_path] = ("\n".join([*record, f"{record_path},,"]) + "\n").encode()
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / wheel_filename(name, version, tag)
    with zipfile.ZipFile(target, "w") as archive:
        for path, data in members.items():
            member = zipfile.ZipInfo(path, date_time=_ZIP_DATE)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(member, data)
    return target
