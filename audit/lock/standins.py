"""Stand-in wheels: what is installed before a layer, offered to pip's resolver as metadata.

A vendor base holds packages no index carries (a source-built ``vllm 0.11.1.dev5+g…cu130``,
``torch 2.9.0+cu130`` from another index). For a layer to resolve the way ``pip install``
would inside the image, every installed distribution must be a candidate at its installed
version with its recorded ``Requires-Dist`` and ``Requires-Python``. Each becomes a wheel that
holds only ``METADATA``, ``WHEEL`` and ``RECORD``, served to the resolver from a local
find-links folder while the layer compiles. A stand-in is never installed: a pin that stays at
its installed version is dropped from the lock, and a pin that moves comes from an index.

Pure: the wheels are bytes, byte-identical for the same input (fixed zip timestamps, sorted
entries), so each is made once per process and reused by every later layer. Requirement
strings packaging cannot parse are left out (pip would refuse the whole stand-in for one of
them), and so are unparsable ``Requires-Python`` values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import zipfile
from collections.abc import Iterable, Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from audit.lock.plan import Constraint
from audit.project.memo import Kind, Memo

_EPOCH = (1980, 1, 1, 0, 0, 0)
SUMMARY = "layer-audit stand-in for an installed distribution (metadata only)"


def wheel_name(name: str) -> str:
    """The distribution part of a wheel filename: runs of ``-``, ``_``, ``.`` become ``_``."""
    return re.sub(r"[-_.]+", "_", name)


def _valid_requirements(texts: Iterable[str]) -> list[str]:
    valid = []
    for text in texts:
        try:
            Requirement(text)
        except InvalidRequirement:
            continue
        valid.append(text)
    return valid


def _valid_python(text: str) -> str:
    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        return ""
    return text


def metadata_text(constraint: Constraint, version: str) -> str:
    """``METADATA`` (core metadata 2.1) with the recorded requirements of ``constraint``."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {constraint.raw_name or constraint.name}",
        f"Version: {version}",
        f"Summary: {SUMMARY}",
    ]
    python = _valid_python(constraint.requires_python)
    if python:
        lines.append(f"Requires-Python: {python}")
    requires = _valid_requirements(constraint.requires_dist)
    lines += [f"Provides-Extra: {extra}" for extra in provided_extras(requires)]
    lines += [f"Requires-Dist: {text}" for text in requires]
    return "\n".join(lines) + "\n\n"


_EXTRA = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")


def provided_extras(requires: Iterable[str]) -> list[str]:
    """The extras a distribution's requirements mention (``; extra == "fast"``): pip ignores a
    requested extra that METADATA does not declare with ``Provides-Extra``."""
    found = {
        re.sub(r"[-_.]+", "-", extra).lower() for text in requires for extra in _EXTRA.findall(text)
    }
    return sorted(found)


def _zip(files: Mapping[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, _EPOCH)
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[path], zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def standin_wheel(constraint: Constraint, memo: Memo | None = None) -> tuple[str, bytes]:
    """(filename, bytes) of the stand-in wheel for one installed distribution, made once per
    ``memo`` (the command's) for each distinct distribution: who installed it does not change
    its wheel, so every later layer, and the digests, reuse the bytes (each compile offers the
    resolver a wheel per installed package)."""
    key = dataclasses.replace(constraint, origin="")
    if memo is None:
        return _standin(key)
    return memo.table(STANDINS).made(key, lambda: _standin(key))


# Stand-in wheels by distribution, in the command's memo: every layer of a lock run offers the
# resolver one per installed package. No benchmark here isolates it (benchmarks/
# bench_lock_bare.py needs the public index): zipping and hashing the 200 of a vLLM stack again
# costs ~120 ms a layer, measured directly, beside a resolver run of a few seconds.
STANDINS: Kind[Constraint, tuple[str, bytes]] = Kind("stand-in wheels", 4096)


def _standin(constraint: Constraint) -> tuple[str, bytes]:
    version = str(Version(constraint.version))  # pip checks filename and METADATA agree
    stem = f"{wheel_name(constraint.name)}-{version}"
    info = f"{stem}.dist-info"
    files = {
        f"{info}/METADATA": metadata_text(constraint, version),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: layer-audit\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = (
        "".join(f"{path},,\n" for path in sorted(files)) + f"{info}/RECORD,,\n"
    )
    return f"{stem}-py3-none-any.whl", _zip(files)


def standin_wheels(
    installed: Mapping[str, Constraint], memo: Memo | None = None
) -> dict[str, bytes]:
    """Filename -> bytes for every installed distribution (versions are PEP 440 already)."""
    return dict(standin_wheel(c, memo) for _, c in sorted(installed.items()))


def standin_digests(
    installed: Mapping[str, Constraint], memo: Memo | None = None
) -> dict[str, str]:
    """Canonical name -> ``sha256:HEX`` of its stand-in wheel (the file the resolver is offered
    for it). Given as the hash of an installed pin in the resolver's existing output, it lets
    pip-compile's ``--reuse-hashes`` keep a pin that cannot move without fetching and hashing
    every file the index holds of it (a pin at its installed version is never locked)."""
    return {name: _digest(standin_wheel(c, memo)[1]) for name, c in sorted(installed.items())}


def _digest(wheel: bytes) -> str:
    return "sha256:" + hashlib.sha256(wheel).hexdigest()
