"""Snapshots as plain data: the distributions one interpreter sees, and loading them safely.

PURE CORE: stdlib + ``packaging`` only, Python 3.9 syntax (the guard runs it inside images).
The in-image writer is ``audit/inimage/snapshot.py`` (stdlib only); this module reads its JSON.

File format (``SCHEMA``)::

    {"schema": "layer-audit.snapshot/2",
     "environments": [{"interpreter": "/usr/bin/python3", "python": "3.11.2",
                        "markers": {...PEP 508 environment markers...},
                        "paths": [site directories in sys.path order],
                        "distributions": [{"name": canonical, "raw_name": as written,
                                           "version": str, "location": site dir,
                                           "installer": str, "digest": str,
                                           "metadata": "dist-info"|"egg-info",
                                           "requires_dist": [PEP 508 strings],
                                           "requires_python": str}, ...],
                        "libc": "glibc 2.36" (optional),
                        "platform": "linux/arm64" (optional: os/arch as the image
                                    platform names it, from the markers),
                        "system": {...} (optional: OS packages and native libraries,
                                   see audit/history/system.py)}],
     "digest": "sha256:<hex of the canonical JSON of everything but this key>"}

``requires_dist``/``requires_python`` are what pip's resolver reads of an installed
distribution: locks resolve later layers against them, so a package no index carries still
takes part in resolution. Schema 1 (before they were recorded) is still read; its
distributions have ``requires_dist`` None ("not recorded"). ``system`` is optional in both (a
snapshot recorded before it existed has none: ``Environment.system`` is None, nothing below
Python is compared for it). ``platform`` is optional too: a snapshot written before it was
recorded says the same through its markers (:func:`environment_platform` reads either).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import MISSING, asdict, dataclass
from dataclasses import fields as dataclass_fields
from functools import cached_property
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from audit.errors import SnapshotError
from audit.history.system import System, SystemFormatError, parse_system

# The guard imports this module on every layer: pathlib, hashlib and packaging.utils (which
# loads packaging.tags, platform, subprocess and logging) cost more than the guard's own work,
# so this module uses a C hash module directly and its own PEP 503 rule. OpenSSL's SHA-256
# first (its C module alone, as audit/inimage/snapshot.py takes it): checking a seal hashes the
# whole snapshot again, ~5x faster there than with the builtin one. Same digests either way.
try:
    from _hashlib import openssl_sha256 as sha256  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - depends on how Python was built
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            from hashlib import sha256

if TYPE_CHECKING:
    from pathlib import Path

    from packaging.version import Version

    SCRIPT_PATH: Path  # the in-image snapshot script (audit/inimage/snapshot.py)

SCHEMA = "layer-audit.snapshot/2"
SCHEMA_V1 = "layer-audit.snapshot/1"
METADATA_KINDS = ("dist-info", "egg-info")
_DIST_FIELDS_V1 = ("name", "version", "location", "installer", "digest", "raw_name", "metadata")
_DIST_FIELDS = (*_DIST_FIELDS_V1, "requires_dist", "requires_python")
_ENV_FIELDS = ("interpreter", "python", "markers", "paths", "distributions")
_OPTIONAL_ENV_FIELDS = frozenset({"libc", "system", "platform"})
_RECREATE = "take the snapshot again with `python -m audit snapshot` (never edit one by hand)"


@dataclass(frozen=True)
class Distribution:
    """One installed distribution. ``location``/``installer``/``digest`` are "" when predicted."""

    name: str  # canonical (PEP 503)
    version: str  # as installed; may be unparsable (reported, never crashed on)
    location: str = ""
    installer: str = ""
    digest: str = ""
    raw_name: str = ""
    metadata: str = "dist-info"
    requires_dist: tuple[str, ...] | None = None  # None: not recorded (schema 1)
    requires_python: str = ""

    @cached_property
    def parsed_version(self) -> Version | None:
        """``version`` as PEP 440 (None when it is not one), parsed once per object: prediction
        shares one object per distribution across a command (``Memo.distributions``), so a
        fleet's versions are parsed once each (``benchmarks/bench_gate.py``, 40 images: 20 %
        more instructions when every comparison parsed its versions again)."""
        return parse_version(self.version)


def parse_version(text: str) -> Version | None:
    """The PEP 440 version, or None when ``text`` is not one (reported, never crashed on)."""
    # Imported on first use: a guarded layer that changed nothing never needs it.
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


_DEFAULTS = {f.name: f.default for f in dataclass_fields(Distribution) if f.default is not MISSING}


# platform_machine (the PEP 508 marker) -> the architecture (and variant) of an image platform;
# audit/inimage/snapshot.py holds the same table (tests/test_base_platform.py checks it): this
# module is vendored into the guard, which has no in-image script to import it from
ARCHITECTURES = {
    "x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
    "armv7l": "arm/v7", "armv6l": "arm/v6", "i386": "386", "i686": "386",
    "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64",
}  # fmt: skip


def platform_of(markers: dict[str, str]) -> str:
    """``linux/arm64`` from PEP 508 markers (``platform_system``, ``platform_machine``); ""
    when the machine is not one an image platform names (or the markers do not say)."""
    arch = ARCHITECTURES.get(markers.get("platform_machine", ""))
    if arch is None:
        return ""
    return f"{(markers.get('platform_system') or 'Linux').lower()}/{arch}"


@dataclass(frozen=True)
class Environment:
    """What one interpreter sees. ``distributions`` keeps every copy, in ``sys.path`` order,

    so a name installed twice (shadowed) appears twice and the first copy is the one imported.
    """

    interpreter: str
    python: str
    markers: dict[str, str]
    paths: tuple[str, ...]
    distributions: tuple[Distribution, ...]
    libc: str = ""  # "glibc 2.36" (os.confstr), "" when unknown: a lock's target for wheel tags
    system: System | None = None  # OS packages and native libraries; None: not recorded
    platform: str = ""  # "linux/arm64" as the snapshot script saw it; "": not recorded

    def winners(self) -> dict[str, Distribution]:
        """Canonical name -> the copy that wins the import (first on the path)."""
        seen: dict[str, Distribution] = {}
        for dist in self.distributions:
            seen.setdefault(dist.name, dist)
        return seen


def environment_platform(env: Environment) -> str:
    """The platform ``env`` was recorded on: its own field, else what its markers say ("")."""
    return env.platform or platform_of(env.markers)


_PEP503_SEPARATORS = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    """PEP 503's rule, exactly as ``packaging.utils.canonicalize_name`` applies it.

    Here rather than from ``packaging.utils``, whose import costs the guard more than a layer's
    whole verdict (tests/test_guard.py checks both agree).
    """
    lowered = name.lower()
    if "_" in lowered or "." in lowered or "--" in lowered:  # else no separator run to fold
        return _PEP503_SEPARATORS.sub("-", lowered)
    return lowered


if not TYPE_CHECKING:  # mypy sees the declaration above, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        """``SCRIPT_PATH`` on first use: the guard never needs it, nor pathlib."""
        if name == "SCRIPT_PATH":
            from pathlib import Path

            return Path(__file__).resolve().parent.parent / "inimage" / "snapshot.py"
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def linux_markers(machine: str, python: str) -> dict[str, str]:
    """PEP 508 markers of CPython ``python`` (``3.11.2``) on Linux ``machine`` (``aarch64``),
    for an interpreter that is not run (a replica's, a walked image's); kernel fields ""."""
    return {
        "implementation_name": "cpython",
        "implementation_version": python,
        "os_name": "posix",
        "platform_machine": machine,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": python,
        "python_version": ".".join(python.split(".")[:2]),
        "sys_platform": "linux",
    }


def canonical_json(document: dict[str, Any]) -> str:
    """The one serialisation hashed and written (same as the in-image script's)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _digest_of(body: dict[str, Any]) -> str:
    hexdigest: str = sha256(canonical_json(body).encode("ascii")).hexdigest()
    return "sha256:" + hexdigest


def _distribution_json(dist: Distribution) -> dict[str, Any]:
    data = asdict(dist)
    data["requires_dist"] = None if dist.requires_dist is None else list(dist.requires_dist)
    return data


def _environment_json(env: Environment) -> dict[str, Any]:
    return {
        "interpreter": env.interpreter,
        "python": env.python,
        "markers": dict(env.markers),
        "paths": list(env.paths),
        "distributions": [_distribution_json(dist) for dist in env.distributions],
        **({"libc": env.libc} if env.libc else {}),
        **({"system": env.system.to_json()} if env.system is not None else {}),
        **({"platform": env.platform} if env.platform else {}),
    }


def dump_snapshot(envs: Sequence[Environment]) -> bytes:
    """Canonical bytes of a snapshot file, sealed with its digest, newline-terminated."""
    body: dict[str, Any] = {"schema": SCHEMA, "environments": [_environment_json(e) for e in envs]}
    return (canonical_json(dict(body, digest=_digest_of(body))) + "\n").encode("ascii")


def _fail(where: str, problem: str) -> SnapshotError:
    return SnapshotError(f"{where}: {problem}", _RECREATE)


def _load_document(data: bytes, where: str) -> dict[str, Any]:
    try:
        document = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _fail(where, f"not UTF-8 text ({exc.reason})") from exc
    except json.JSONDecodeError as exc:
        raise _fail(where, f"truncated or invalid JSON ({exc.msg}, line {exc.lineno})") from exc
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, arrays nested 10^5 deep
        raise _fail(where, f"not a snapshot: {type(exc).__name__}: {str(exc)[:80]}") from exc
    if not isinstance(document, dict):
        raise _fail(where, "not a snapshot: the top level is not a JSON object")
    return document


def _check_seal(document: dict[str, Any], where: str) -> None:
    if document.get("schema") not in (SCHEMA, SCHEMA_V1):
        raise _fail(where, f"schema: {document.get('schema')!r} is not {SCHEMA!r}")
    if set(document) != {"schema", "environments", "digest"}:
        raise _fail(where, f"keys {sorted(document)}: expected digest, environments, schema")
    body = {key: value for key, value in document.items() if key != "digest"}
    if document["digest"] != _digest_of(body):
        raise _fail(where, "digest: does not match the content (the file was edited or damaged)")


def _strings(value: Any, key: str, where: str) -> None:
    if not isinstance(value, str):
        raise _fail(where, f"{key}: expected a string, got {type(value).__name__}")


def _requires(item: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    value = item.get("requires_dist")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(where, f"{key}.requires_dist: expected a list of strings")
    return tuple(value)


def _parse_distributions(
    items: list[Any], key: str, where: str, fields: tuple[str, ...]
) -> tuple[Distribution, ...]:
    """Each item as a :class:`Distribution`. A well-formed item takes :func:`_plain_distribution`
    (no error text made); any other is judged by :func:`_parse_distribution`, which names the
    first problem exactly (``environments[0].distributions[3].name: ...``)."""
    keys = frozenset(fields)
    strings = itemgetter(*(name for name in fields if name != "requires_dist"))
    return tuple(
        _plain_distribution(item, keys, strings)
        or _parse_distribution(item, f"{key}.distributions[{i}]", where, fields)
        for i, item in enumerate(items)
    )


_STR = {str}


def _plain_distribution(
    item: Any, keys: frozenset[str], strings: Callable[[dict[str, Any]], tuple[Any, ...]]
) -> Distribution | None:
    """``item`` as a Distribution when :func:`_parse_distribution` would accept it as it is:
    exactly ``keys``, every field ``strings`` gets a string, a canonical name, a known metadata
    kind, ``requires_dist`` None or a list of strings; None when anything differs."""
    if type(item) is not dict or item.keys() != keys or set(map(type, strings(item))) != _STR:
        return None
    name, requires = item["name"], item.get("requires_dist")
    if not (name and name == canonical_name(name) and item["metadata"] in METADATA_KINDS):
        return None
    if requires is not None and not (type(requires) is list and set(map(type, requires)) <= _STR):
        return None
    return _distribution(item, None if requires is None else tuple(requires))


def _distribution(item: dict[str, Any], requires: tuple[str, ...] | None) -> Distribution:
    """``Distribution(**item, requires_dist=requires)`` for a checked ``item``, made without the
    frozen ``__init__``'s ``object.__setattr__`` per field (most of the cost of reading a
    snapshot: a fleet's gate reads 20,000 distributions). A field ``item`` lacks (schema 1's
    ``requires_python``) keeps its default; the result is equal, field for field."""
    made: Distribution = object.__new__(Distribution)
    made.__dict__.update({**_DEFAULTS, **item, "requires_dist": requires})
    return made


def _parse_distribution(item: Any, key: str, where: str, fields: tuple[str, ...]) -> Distribution:
    if not isinstance(item, dict) or set(item) != set(fields):
        raise _fail(where, f"{key}: expected an object with keys {sorted(fields)}")
    for field_name in fields:
        if field_name != "requires_dist":
            _strings(item[field_name], f"{key}.{field_name}", where)
    if item["name"] != canonical_name(item["name"]) or not item["name"]:
        raise _fail(where, f"{key}.name: {item['name']!r} is not a canonical (PEP 503) name")
    if item["metadata"] not in METADATA_KINDS:
        raise _fail(where, f"{key}.metadata: {item['metadata']!r} is not one of {METADATA_KINDS}")
    return Distribution(**dict(item, requires_dist=_requires(item, key, where)))


def _parse_environment(item: Any, key: str, where: str, fields: tuple[str, ...]) -> Environment:
    if not isinstance(item, dict) or set(item) - _OPTIONAL_ENV_FIELDS != set(_ENV_FIELDS):
        raise _fail(where, f"{key}: expected an object with keys {sorted(_ENV_FIELDS)}")
    libc, platform = item.get("libc", ""), item.get("platform", "")
    _strings(libc, f"{key}.libc", where)
    _strings(platform, f"{key}.platform", where)
    _strings(item["interpreter"], f"{key}.interpreter", where)
    _strings(item["python"], f"{key}.python", where)
    markers, paths, dists = item["markers"], item["paths"], item["distributions"]
    if not isinstance(markers, dict) or not all(isinstance(v, str) for v in markers.values()):
        raise _fail(where, f"{key}.markers: expected an object of strings")
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise _fail(where, f"{key}.paths: expected a list of strings")
    if not isinstance(dists, list):
        raise _fail(where, f"{key}.distributions: expected a list")
    parsed = _parse_distributions(dists, key, where, fields)
    system = _parse_system(item.get("system"), key, where)
    return Environment(
        item["interpreter"],
        item["python"],
        dict(markers),
        tuple(paths),
        parsed,
        libc,
        system,
        platform,
    )


def _parse_system(value: Any, key: str, where: str) -> System | None:
    if value is None:
        return None
    try:
        return parse_system(value, f"{key}.system")
    except SystemFormatError as exc:
        raise _fail(where, str(exc)) from exc


def parse_snapshot(data: bytes, where: str) -> tuple[Environment, ...]:
    """Verify and load a snapshot file's bytes; ``where`` names it in errors.

    Raises :class:`SnapshotError` (exit 2) when the bytes are truncated or not JSON, of another
    schema, tampered with (digest mismatch), or hold malformed fields.
    """
    return snapshot_from_document(_load_document(data, where), where)


def snapshot_from_document(document: Any, where: str) -> tuple[Environment, ...]:
    """:func:`parse_snapshot` for a snapshot already loaded from JSON (a base record holds one
    inside its own document): the same checks, seal included, without serialising it again."""
    if not isinstance(document, dict):
        raise _fail(where, "not a snapshot: the top level is not a JSON object")
    _check_seal(document, where)
    envs = document["environments"]
    if not isinstance(envs, list) or not envs:
        raise _fail(where, "environments: expected a non-empty list")
    fields = _DIST_FIELDS if document["schema"] == SCHEMA else _DIST_FIELDS_V1
    return tuple(
        _parse_environment(e, f"environments[{i}]", where, fields) for i, e in enumerate(envs)
    )


# A real snapshot is about 0.5 KB per distribution (a 200-package vLLM stack: ~0.1 MB per
# interpreter); 32 MiB is ~60,000 distributions. Over it, a file is refused before it is read;
# diffing two files at the limit takes ~12 s and ~300 MiB (benchmarks/bench_diff_size.py).
SNAPSHOT_LIMIT = 32 * 1024 * 1024


def read_snapshot(path: Path) -> tuple[Environment, ...]:
    """Read and verify a snapshot file; a missing, unreadable, special or oversized
    (> :data:`SNAPSHOT_LIMIT`) file is bad input too, refused before it is read."""
    try:
        data = read_bounded(path, SNAPSHOT_LIMIT)
    except OSError as exc:
        raise SnapshotError(
            f"{path}: cannot read snapshot ({exc.strerror})", "check the path"
        ) from exc
    return parse_snapshot(data, str(path))


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, read without blocking on a
    FIFO; anything else raises :class:`SnapshotError` (exit 2) before a byte is read."""
    fd = os.open(str(path), os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SnapshotError(f"{path}: not a regular file", "give the snapshot file's path")
        if info.st_size > limit:
            raise SnapshotError(
                f"{path}: {info.st_size / 2**20:.0f} MiB, over the {limit // 2**20} MiB a "
                "snapshot file may be",
                "a snapshot holds ~0.5 KB per distribution: check that this is a snapshot "
                "file (python -m audit snapshot writes one)",
            )
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while we read
        raise SnapshotError(f"{path}: over {limit // 2**20} MiB", "check the file")
    return data
