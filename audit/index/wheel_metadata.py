"""A distribution's core metadata from a package index, without downloading its payload.

What a resolver does to learn a pin's requirements, for the replica base (real published
metadata in metadata-only stand-ins) and the uv lock backend (what moved pins require):

1. the project's files from the index (:mod:`audit.index.simple`: PEP 691 JSON, else
   PEP 503 HTML), the wheel of the pinned version whose tags rank best for the target;
2. the PEP 658/714 ``<file>.metadata`` when the index offers one, checked against its hash;
3. otherwise range requests into the wheel (:mod:`audit.index.remote_zip`): the tail with
   the central directory, then the ``*.dist-info/METADATA`` member; a server without range
   support costs one whole download, checked against the file's index hash and counted.

Public API: :func:`fetch_metadata` (one pin), :func:`fetch_many` (many, in parallel),
:func:`read_wheel_metadata` (one file URL), :func:`target_tags` (a platform's wheel tags), and
:class:`FetchStats` (requests, bytes, metadata files, range reads, fallbacks, cache hits).

Invariants: bytes returned are the METADATA file as published (never re-written); a hash the
index gives is checked whenever the bytes it covers were downloaded; no URL is printed without
:func:`audit.redact.redact`. Errors: the index has no wheel for the pin ->
:class:`MetadataUnavailable` (exit 2, callers may turn it into a warning); the network or a
broken file -> :class:`EnvironmentProblem` (exit 3) naming the index and the reason. With a
``cache`` folder, metadata is kept by the wheel's sha256 (content-addressed: never stale).
"""

from __future__ import annotations

import hashlib
import re
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.metadata import parse_email
from packaging.tags import Tag, compatible_tags, cpython_tags, parse_tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from audit.errors import EnvironmentProblem, MetadataUnavailable
from audit.host import atomic
from audit.index.http import FetchStats, get, unreachable
from audit.index.remote_zip import NotAZip, read_member
from audit.index.simple import IndexFile, ProjectPages, project_files
from audit.lock.resolvers.job import tls_context
from audit.redact import redact

__all__ = [
    "FetchStats",
    "IndexFile",
    "Metadata",
    "fetch_many",
    "fetch_metadata",
    "project_files",
    "read_wheel_metadata",
    "target_tags",
    "tls_context",
]

_METADATA = re.compile(r"^[^/]+\.dist-info/METADATA$")
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
_OLDEST = {"aarch64": 17, "ppc64le": 17, "s390x": 17}


@dataclass(frozen=True)
class Metadata:
    """One distribution's published metadata and where it came from.

    ``how`` is ``"pep658"``, ``"range"``, ``"download"`` or ``"cache"``.
    """

    name: str
    version: str
    requires_dist: tuple[str, ...]
    requires_python: str
    provides_extra: tuple[str, ...]
    raw: bytes
    file: IndexFile
    how: str


def target_tags(
    platform: str = "linux/arm64", python: str = "3.12", glibc: str = "2.36"
) -> list[Tag]:
    """The wheel tags a CPython ``python`` on glibc ``glibc`` Linux accepts, best first.

    ``platform`` is a Docker platform (``linux/arm64``, ``linux/amd64``) or a machine name.
    """
    machine = {"arm64": "aarch64", "amd64": "x86_64"}.get(platform.rsplit("/", 1)[-1])
    machine = machine or platform.rsplit("/", 1)[-1]
    major, minor = (int(p) for p in python.split(".")[:2])
    platforms = _manylinux(machine, int(glibc.split(".")[1]))
    version = (major, minor)
    return [
        *cpython_tags(version, [f"cp{major}{minor}", "abi3", "none"], platforms),
        *compatible_tags(version, f"cp{major}{minor}", platforms),
    ]


def _manylinux(machine: str, newest: int) -> list[str]:
    names = []
    for minor in range(newest, _OLDEST.get(machine, 5) - 1, -1):
        names.append(f"manylinux_2_{minor}_{machine}")
        if minor in _LEGACY:
            names.append(f"{_LEGACY[minor]}_{machine}")
    return [*names, f"linux_{machine}"]


def best_wheel(
    files: Iterable[IndexFile], version: str, tags: Sequence[Tag] | None
) -> IndexFile | None:
    """The wheel of ``version`` whose best tag ranks highest in ``tags`` (any wheel when
    ``tags`` is None, pure ones first); a yanked file only when nothing else fits."""
    rank = {tag: i for i, tag in enumerate(tags or [])}
    wanted = _version(version)
    if wanted is None:
        return None
    best: tuple[tuple[bool, int], IndexFile] | None = None
    for file in files:
        score = _score(file, wanted, rank, tags is None)
        if score is not None and (best is None or score < best[0]):
            best = (score, file)
    return best[1] if best else None


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _score(
    file: IndexFile, wanted: Version, rank: Mapping[Tag, int], anything: bool
) -> tuple[bool, int] | None:
    try:
        _, version, _, file_tags = parse_wheel_filename(file.filename)
    except InvalidWheelFilename:
        return None
    if version != wanted:
        return None
    if anything:
        return (file.yanked is not None, 0 if parse_tag("py3-none-any") & file_tags else 1)
    places = [rank[t] for t in file_tags if t in rank]
    return (file.yanked is not None, min(places)) if places else None


def read_wheel_metadata(
    file: IndexFile | str,
    *,
    context: ssl.SSLContext | None = None,
    stats: FetchStats | None = None,
    cache: Path | None = None,
) -> tuple[bytes, str]:
    """The METADATA bytes of one wheel, and how they were read (see :class:`Metadata`).

    ``file`` is an :class:`IndexFile` (hashes and PEP 658 offer known) or a bare file URL.
    """
    file = file if isinstance(file, IndexFile) else IndexFile(file.rsplit("/", 1)[-1], file, {})
    stats = stats if stats is not None else FetchStats()
    context = context if context is not None else tls_context()
    cached = _cache_path(cache, file)
    if cached is not None and cached.is_file():
        stats.count("cached")
        return cached.read_bytes(), "cache"
    data, how = _read(file, context, stats)
    if cached is not None:
        atomic.write_bytes(cached, data)
    return data, how


def _read(file: IndexFile, context: ssl.SSLContext, stats: FetchStats) -> tuple[bytes, str]:
    if file.metadata_hashes is not None:
        return _pep658(file, context, stats), "pep658"
    try:
        member, whole = read_member(file.url, _pick, context=context, stats=stats)
    except NotAZip as exc:
        raise _broken(file, str(exc)) from exc
    if whole is not None:
        _check(file.hashes, whole, file, "wheel")
    return member, "download" if whole is not None else "range"


def _pep658(file: IndexFile, context: ssl.SSLContext, stats: FetchStats) -> bytes:
    url = f"{file.url}.metadata"
    answer = get(url, {}, context=context, stats=stats)
    if answer.status != 200:
        raise unreachable(url, f"HTTP {answer.status} for an offered metadata file")
    stats.count("metadata_files")
    _check(file.metadata_hashes or {}, answer.body, file, "metadata file")
    return answer.body


def _check(hashes: Mapping[str, str], data: bytes, file: IndexFile, what: str) -> None:
    for algorithm, digest in hashes.items():
        if algorithm in hashlib.algorithms_guaranteed and digest:
            if hashlib.new(algorithm, data).hexdigest() != digest.lower():
                raise _broken(file, f"the {what}'s {algorithm} does not match the index")
            return


def _pick(names: list[str]) -> str | None:
    found = [n for n in names if _METADATA.match(n)]
    return found[0] if len(found) == 1 else None


def _broken(file: IndexFile, reason: str) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"{file.filename}: cannot read its metadata ({reason}): {redact(file.url)}",
        "the index served a broken or incomplete file; run again, or check the index",
    )


def _cache_path(cache: Path | None, file: IndexFile) -> Path | None:
    digest = file.hashes.get("sha256", "")
    return cache / f"{digest}.metadata" if cache is not None and len(digest) == 64 else None


def fetch_metadata(
    index_url: str,
    name: str,
    version: str,
    *,
    tags: Sequence[Tag] | None = None,
    context: ssl.SSLContext | None = None,
    stats: FetchStats | None = None,
    cache: Path | None = None,
    pages: ProjectPages | None = None,
) -> Metadata:
    """``name==version``'s metadata from the best wheel for ``tags`` on ``index_url`` (the
    project's page read through ``pages`` when given: once per run)."""
    stats = stats if stats is not None else FetchStats()
    context = context if context is not None else tls_context()
    read = pages.files if pages is not None else project_files
    files = read(index_url, name, context=context, stats=stats)
    file = best_wheel(files, version, tags)
    if file is None:
        raise _unavailable(index_url, name, version, files)
    raw, how = read_wheel_metadata(file, context=context, stats=stats, cache=cache)
    return parsed(raw, file, how)


def _unavailable(
    index_url: str, name: str, version: str, files: list[IndexFile]
) -> MetadataUnavailable:
    why = (
        "does not carry the project" if not files else "has no wheel of that version for the target"
    )
    return MetadataUnavailable(
        f"{name}=={version}: the index {redact(index_url)} {why}",
        "a vendor build, a local version (+cu130) or a VCS install: give its metadata in a "
        "snapshot file, or accept it without requirements",
    )


def parsed(raw: bytes, file: IndexFile, how: str) -> Metadata:
    """:class:`Metadata` from METADATA bytes (lenient: unknown fields are kept in ``raw``)."""
    fields, _ = parse_email(raw)
    return Metadata(
        name=str(fields.get("name", "")),
        version=str(fields.get("version", "")),
        requires_dist=tuple(fields.get("requires_dist", [])),
        requires_python=str(fields.get("requires_python", "")),
        provides_extra=tuple(fields.get("provides_extra", [])),
        raw=raw,
        file=file,
        how=how,
    )


Outcome = Metadata | MetadataUnavailable


def fetch_many(
    index_url: str,
    pins: Iterable[tuple[str, str]],
    *,
    tags: Sequence[Tag] | None = None,
    stats: FetchStats | None = None,
    cache: Path | None = None,
    workers: int = 8,
    on_done: Callable[[str, Outcome], None] | None = None,
    pages: ProjectPages | None = None,
) -> dict[str, Outcome]:
    """Each pin's metadata (or why the index cannot give it), by canonical name, in parallel.

    Network failures still raise (exit 3); only :class:`MetadataUnavailable` is returned.
    """
    stats = stats if stats is not None else FetchStats()
    context = tls_context()

    def one(pin: tuple[str, str]) -> tuple[str, Outcome]:
        try:
            got: Outcome = fetch_metadata(
                index_url, *pin, tags=tags, context=context, stats=stats, cache=cache, pages=pages
            )
        except MetadataUnavailable as exc:
            got = exc
        if on_done is not None:
            on_done(pin[0], got)
        return canonicalize_name(pin[0]), got

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return dict(pool.map(one, list(pins)))
