"""What a replica base is: a pinned package list in, metadata-only installed distributions out.

A replica stands in for a base image that cannot be pulled here (a 20 GB vendor image, a private
registry, an arm64 image on an amd64 runner): the project's offline Debian base for the
recipe's platform, whose virtual environment holds one ``*.dist-info`` folder per pinned
distribution with the package's **real published METADATA** (read without payloads by
:mod:`audit.index.wheel_metadata`), an ``INSTALLER`` naming the replica and a ``RECORD``;
no code. pip, the snapshot script and the guard see exactly those distributions and their
requirements, so ``lock --record-base`` records the replica the usual way and a build on it
installs each layer's real packages against the real requirements (a dry build).

Pure: pins parsed from text, files as bytes (byte-identical for the same input), the
Dockerfile and the manifest as text. The maker is :mod:`audit.base.replica`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.markers import UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from audit.errors import UsageError
from audit.lock.plan import Constraint
from audit.lock.standins import metadata_text

INSTALLER = "layer-audit-replica"
MANIFEST = "/opt/layer-audit/replica.json"
MANIFEST_SCHEMA = "layer-audit.replica/1"
NO_INDEX_SUMMARY = "layer-audit replica stand-in: the index does not carry this version"
_SKIPPED_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--hash")


@dataclass(frozen=True)
class ListedDistribution:
    """One distribution of the list: canonical name, the name as written, exact version."""

    name: str
    raw_name: str
    version: str


@dataclass(frozen=True)
class PinList:
    """The pins to replicate, and what was left out of the list and why."""

    pins: tuple[ListedDistribution, ...]
    skipped: tuple[str, ...]


def parse_pin_list(text: str, where: str, markers: Mapping[str, str]) -> PinList:
    """``name==version`` lines of a ``pip freeze`` or a compiled requirements file.

    Comments, ``# via`` lines, hash continuations and index options are ignored; a line whose
    marker is false for ``markers`` is left out; ``-e``/``name @ URL`` lines (no version to
    replicate) are left out and reported in ``skipped``. Anything else that is not an exact
    pin, or a name listed twice, is bad input (exit 2) naming ``where`` and the line.
    """
    pins: dict[str, ListedDistribution] = {}
    skipped: list[str] = []
    for number, raw in enumerate(_logical_lines(text), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#") or line.startswith(_SKIPPED_OPTIONS):
            continue
        if line.startswith(("-e", "--editable")) or " @ " in line:
            skipped.append(f"{line}: no version to replicate (editable or direct URL)")
            continue
        pin = _pin(line, f"{where}:{number}", markers)
        if pin is None:
            continue
        if pin.name in pins:
            raise UsageError(f"{where}:{number}: {pin.name} is listed twice", "list each once")
        pins[pin.name] = pin
    if not pins:
        raise UsageError(f"{where}: no name==version pins", "give a pip freeze or a lock")
    return PinList(tuple(pins[name] for name in sorted(pins)), tuple(skipped))


def _logical_lines(text: str) -> list[str]:
    """Lines with ``\\`` continuations joined, hashes dropped; numbering by logical line."""
    joined = re.sub(r"\\\s*\n", " ", text)
    return [re.sub(r"\s--hash=\S+", "", line) for line in joined.splitlines()]


def _pin(line: str, where: str, markers: Mapping[str, str]) -> ListedDistribution | None:
    try:
        requirement = Requirement(line)
    except InvalidRequirement as exc:
        raise UsageError(f"{where}: {line!r} is not a requirement ({exc})") from exc
    specs = list(requirement.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "==="):
        raise UsageError(f"{where}: {line!r} is not an exact pin", "use name==version lines")
    if requirement.marker is not None and not _marker_true(requirement, markers):
        return None
    try:
        version = str(Version(specs[0].version))
    except InvalidVersion as exc:
        raise UsageError(f"{where}: {specs[0].version!r} is not a PEP 440 version") from exc
    return ListedDistribution(canonicalize_name(requirement.name), requirement.name, version)


def _marker_true(requirement: Requirement, markers: Mapping[str, str]) -> bool:
    assert requirement.marker is not None
    try:
        return requirement.marker.evaluate(dict(markers, extra=""))
    except (UndefinedComparison, UndefinedEnvironmentName):
        return True


def list_digest(pins: Sequence[ListedDistribution]) -> str:
    """``sha256:`` of the sorted ``name==version`` lines: what the replica replicates."""
    text = "".join(f"{pin.name}=={pin.version}\n" for pin in sorted(pins, key=lambda p: p.name))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


# -- the installed files ---------------------------------------------------------------------


def no_index_metadata(pin: ListedDistribution, observed: Constraint | None) -> bytes:
    """METADATA for a pin the index lacks: from an observed snapshot when given, else with
    no requirements (a warning the maker prints)."""
    if observed is not None:
        return metadata_text(observed, pin.version).encode()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {pin.raw_name}",
        f"Version: {pin.version}",
        f"Summary: {NO_INDEX_SUMMARY}",
    ]
    return ("\n".join(lines) + "\n\n").encode()


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest},{len(data)}"


def dist_info_files(pin: ListedDistribution, metadata: bytes) -> dict[str, bytes]:
    """``<name>-<version>.dist-info/{METADATA,INSTALLER,RECORD}`` relative to site-packages.

    Invariant: the folder name follows the binary distribution format (``-``, ``.`` in the
    name become ``_``); METADATA is kept byte for byte; RECORD lists every file with its hash.
    """
    folder = f"{re.sub(r'[-_.]+', '_', pin.name)}-{pin.version}.dist-info"
    files = {f"{folder}/METADATA": metadata, f"{folder}/INSTALLER": f"{INSTALLER}\n".encode()}
    lines = [f"{path},{_record_hash(data)}" for path, data in sorted(files.items())]
    files[f"{folder}/RECORD"] = ("\n".join([*lines, f"{folder}/RECORD,,"]) + "\n").encode()
    return files


def replaced(present: Sequence[str], pins: Sequence[ListedDistribution]) -> tuple[str, ...]:
    """The base venv's own dist-info folders (``setuptools-66.1.1.dist-info``) of pinned names:
    the list's version replaces them, or the name would be installed twice."""
    pinned = {pin.name for pin in pins}
    return tuple(folder for folder in present if canonicalize_name(folder.split("-")[0]) in pinned)


def dockerfile(
    base: str, site_packages: str, labels: Mapping[str, str], replaced: Sequence[str] = ()
) -> str:
    """FROM the offline base, the dist-info folders into its venv, the manifest, labels.

    Only COPY, except one ``rm`` of the base venv's own metadata of pinned names (``replaced``):
    the only thing that runs in the (possibly emulated) image while it is made.
    """
    label_line = " ".join(f"{key}={json.dumps(value)}" for key, value in sorted(labels.items()))
    remove = " ".join(f"{site_packages}/{folder}" for folder in replaced)
    return (
        f"FROM {base}\n"
        + (f"RUN rm -rf {remove}\n" if replaced else "")
        + f"COPY site-packages/ {site_packages}/\n"
        f"COPY replica.json {MANIFEST}\n"
        f"LABEL {label_line}\n"
    )


def manifest(
    pins: Sequence[ListedDistribution],
    reads: Mapping[str, Mapping[str, str]],
    extra: Mapping[str, str],
) -> str:
    """``replica.json``: what was replicated and where each METADATA came from."""
    document = {
        "schema": MANIFEST_SCHEMA,
        **extra,
        "distributions": [
            {"name": pin.name, "version": pin.version, **reads.get(pin.name, {})} for pin in pins
        ],
    }
    return json.dumps(document, indent=1, sort_keys=True) + "\n"
