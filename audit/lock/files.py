"""Lock files and the base record under ``locks/<image>/``: their formats, reading and verifying.

A lock is pip-compile output (``--generate-hashes``) wrapped in comment lines, so it stays a
valid pip requirements file. It pins only what its layer installs or changes (what is already
installed and stays is covered by the input digests of the base record and earlier locks), and
records, as comments, what pip's resolver reads of each pin, so later layers resolve against
it without an index::

    # layer-audit lock: do not edit; re-create with: nox -s lock -- IMAGE
    # format: 2
    # layer: v2-01
    # requirements: requirements/v2.in
    # resolver: pip-tools==7.6.2 pip==25.2
    # input base: sha256:...          (one line per input, see audit.lock.plan)
    # inputs: sha256:...              (digest of every input line)
    # content: sha256:...             (digest of the body below the header)
    #
    alpha==2.0 \\
        --hash=sha256:...
        # via -r requirements/v2.in
    # requires alpha: {"requires_dist": ["beta>=1"], "requires_python": ">=3.9"}
    # end of layer-audit lock

A truncated file (no end marker) or a hand-edited one (content digest mismatch) is refused
with :class:`LockError` (exit 2). ``base.json`` holds the base image's identity and the
snapshot of every recipe interpreter inside it, as :func:`audit.history.snapshot.dump_snapshot`
wrote it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from audit.errors import LockError, SnapshotError
from audit.history.snapshot import (
    Environment,
    dump_snapshot,
    environment_platform,
    snapshot_from_document,
)
from audit.lock.format import LockFormatError, Pin
from audit.lock.format import parse_pins as parse_body
from audit.project.frontdoor import CONSOLE_SCRIPT, FrontDoor
from audit.project.memo import Kind, Memo
from audit.project.sources import Source
from audit.recipe.model import PipLayer, Recipe, Step

LOCK_FORMAT = "2"
READABLE_FORMATS = ("1", "2")  # format 1 (no requires lines) reads, and is stale by its inputs
BASE_SCHEMA = "layer-audit.base/1"
TITLE = "# layer-audit lock: do not edit; re-create with: nox -s lock -- {image}"
END_MARKER = "# end of layer-audit lock"
# Verified locks by header text and body digest, their bodies by text, base records by the
# sha256 of their bytes, in the command's memo: a lock unchanged at both refs of the gate, or a
# fleet's images locking the same lines under headers of their own, is parsed once. Without
# them callgrind counts 36 % more instructions for benchmarks/bench_gate.py's 40-image gate and
# 62 % more for benchmarks/bench_audit_deps.py's 10 recipes.
LOCKS: Kind[tuple[str, str], Lock] = Kind("locks", 64)
BODIES: Kind[str, ParsedBody] = Kind("lock bodies", 64)
BASES: Kind[str, BaseRecord] = Kind("base records", 64)
_REQUIRES_LINE = re.compile(r"^# requires (?P<name>[a-z0-9][a-z0-9.-]*): (?P<json>\{.*\})$", re.M)
_HEADER_FIELD = re.compile(r"^# (?P<key>[a-z-]+(?: [^:\n]+)?): (?P<value>.*)$")


@dataclass(frozen=True)
class PinMetadata:
    """What pip's resolver reads of one pinned distribution."""

    requires_dist: tuple[str, ...]
    requires_python: str = ""

    def to_json(self) -> str:
        document = {
            "requires_dist": list(self.requires_dist),
            "requires_python": self.requires_python,
        }
        return json.dumps(document, sort_keys=True, separators=(", ", ": "))


@dataclass(frozen=True)
class Lock:
    slug: str
    inputs_digest: str
    pins: Mapping[str, Pin]
    content_digest: str = ""
    inputs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    metadata: Mapping[str, PinMetadata] = field(default_factory=lambda: MappingProxyType({}))
    # The digest of what this lock installs (:func:`effect_of`); made from ``pins`` and
    # ``metadata`` when not given (a parse gives it: made once per body text).
    effect_digest: str = ""

    def __post_init__(self) -> None:
        if not self.effect_digest:
            object.__setattr__(self, "effect_digest", effect_of(self.pins, self.metadata))


@dataclass(frozen=True)
class BaseRecord:
    image: str
    image_id: str
    repo_digest: str | None
    environments: tuple[Environment, ...]
    source: str | None = None  # None: snapshotted from the image here; "snapshot-file": elsewhere
    standins: tuple[str, ...] = ()  # a replica's pins no index carried (``name==version``)


def lock_relpath(recipe: Recipe, step: Step) -> str:
    return f"locks/{recipe.name}/{step.slug}.txt"


def base_relpath(recipe: Recipe) -> str:
    return f"locks/{recipe.name}/base.json"


def sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def digest_inputs(inputs: Mapping[str, str]) -> str:
    """One digest over every ``key: value`` input line, in key order."""
    return sha256("".join(f"{key}: {inputs[key]}\n" for key in sorted(inputs)).encode())


# -- writing --------------------------------------------------------------------------------


def render_lock(image: str, step: Step, resolver: str, inputs: Mapping[str, str], body: str) -> str:
    """The whole lock file text around pip-compile's ``body`` (which ends with a newline)."""
    assert isinstance(step.layer, PipLayer)
    lines = [
        TITLE.format(image=image),
        f"# format: {LOCK_FORMAT}",
        f"# layer: {step.slug}",
        f"# requirements: {step.layer.requirements}",
        f"# resolver: {resolver}",
        *(f"# input {key}: {inputs[key]}" for key in sorted(inputs)),
        f"# inputs: {digest_inputs(inputs)}",
        f"# content: {sha256(body.encode())}",
        "#",
    ]
    return "\n".join(lines) + "\n" + body + END_MARKER + "\n"


def render_base(record: BaseRecord) -> str:
    """``base.json`` text: sorted keys, stable indentation, the snapshot sealed inside."""
    document = {
        "schema": BASE_SCHEMA,
        "image": record.image,
        "image_id": record.image_id,
        "repo_digest": record.repo_digest,
        "snapshot": json.loads(dump_snapshot(record.environments)),
    }
    if record.source is not None:  # written only when set: older records keep their bytes
        document["source"] = record.source
    if record.standins:  # likewise
        document["standins"] = list(record.standins)
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


# -- reading --------------------------------------------------------------------------------


def _refuse(where: str, problem: str, front: FrontDoor) -> LockError:
    return LockError(
        f"{where}: {problem}",
        f"never edit a lock by hand: re-create it with {front.command('lock', 'IMAGE')} "
        "(git restore it first if the edit was an accident)",
    )


def _split_header(text: str, where: str, front: FrontDoor) -> tuple[dict[str, str], str]:
    """The header's fields and the text after its closing ``#`` line; only the header's lines
    are split off (a lock's body is hundreds of lines). The usual header is split with plain
    string operations: every line up to the first ``#`` line is ``# KEY: VALUE`` (its first
    ``: `` ends the key, as ``_HEADER_FIELD`` reads it); any other header is read line by line,
    which names its first line that is not a field."""
    if not text.startswith("# layer-audit lock:"):
        raise _refuse(where, "not a layer-audit lock (first line is not its title)", front)
    start, end = text.find("\n") + 1, text.find("\n#\n")
    fields = [line.partition(": ") for line in text[start:end].split("\n")] if start else []
    if not (0 < start <= end and all(_is_field(key, sep) for key, sep, _ in fields)):
        return _split_header_lines(text, where, front)
    return {key[2:]: value for key, _, value in fields}, text[end + 3 :]


def _is_field(key: str, sep: str) -> bool:
    """``# KEY`` and its ``: `` are the start of a header field line."""
    return bool(sep) and _HEADER_FIELD.match(f"{key}: ") is not None


def _split_header_lines(text: str, where: str, front: FrontDoor) -> tuple[dict[str, str], str]:
    """:func:`_split_header` one line at a time, for a header that is not the usual one."""
    header: dict[str, str] = {}
    start, number = text.find("\n") + 1, 1
    while start:  # 0: the line before was the last
        end = text.find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
        if line == "#":
            return header, "" if end < 0 else text[end + 1 :]
        match = _HEADER_FIELD.match(line)
        if match is None:
            raise _refuse(where, f"line {number + 1}: unexpected header line", front)
        header[match["key"]] = match["value"]
        start, number = end + 1, number + 1
    raise _refuse(where, "truncated: the header never ends", front)


def _ended_body(text: str, where: str, front: FrontDoor) -> str:
    """The body: ``text`` (what follows the header) without its end marker line."""
    if not text.endswith("\n" + END_MARKER + "\n") and text != END_MARKER + "\n":
        raise _refuse(where, f"truncated: the last line is not {END_MARKER!r}", front)
    return text[: -len(END_MARKER) - 1]


def parse_pins(body: str, where: str, front: FrontDoor = CONSOLE_SCRIPT) -> dict[str, Pin]:
    """Canonical name -> pin, through the one lock-line reader the guard uses too."""
    try:
        return parse_body(body)
    except LockFormatError as exc:
        raise _refuse(where, str(exc), front) from exc


def parse_lock(
    data: bytes, where: str, memo: Memo | None = None, front: FrontDoor = CONSOLE_SCRIPT
) -> Lock:
    """Verify and load a lock file's bytes; :class:`LockError` (exit 2) if damaged or edited.

    With the command's ``memo``, what was verified is not verified again: a body's digest and
    parse once per body text (locks share bodies, and a lock the pull request leaves alone is
    read at both refs), a lock once per header text and body digest.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(where, "not UTF-8 text", front) from exc
    header, rest = _split_header(text, where, front)
    body = _ended_body(rest, where, front)
    known = memo.table(BODIES).get(body) if memo is not None else None
    digest = known.digest if known is not None else sha256(body.encode())
    if header.get("content") != digest:
        raise _refuse(where, "edited by hand: its content digest does not match", front)
    if memo is None:
        return _verify_lock(header, body, digest, where, memo=None, front=front)
    key = (text[: len(text) - len(rest)], digest)
    return memo.table(LOCKS).made(
        key, lambda: _verify_lock(header, body, digest, where, memo=memo, front=front)
    )


def _verify_lock(
    header: Mapping[str, str],
    body: str,
    digest: str,
    where: str,
    *,
    memo: Memo | None,
    front: FrontDoor,
) -> Lock:
    """The rest of :func:`parse_lock`'s checks, for a header and a body of ``digest`` that match."""
    inputs = {k.removeprefix("input "): v for k, v in header.items() if k.startswith("input ")}
    if header.get("format") not in READABLE_FORMATS or "layer" not in header:
        raise _refuse(where, f"format {header.get('format')!r}, expected {LOCK_FORMAT}", front)
    if header.get("inputs") != digest_inputs(inputs):
        raise _refuse(
            where, "edited by hand: its input lines do not match the inputs digest", front
        )
    parsed = _parsed_body(body, digest, where, memo, front)
    return Lock(
        header["layer"],
        header["inputs"],
        parsed.pins,
        digest,
        MappingProxyType(inputs),
        parsed.metadata,
        parsed.effect,
    )


class ParsedBody(NamedTuple):
    """A verified lock body: its sha256 and what it pins (read-only: locks share it)."""

    digest: str
    pins: Mapping[str, Pin]
    metadata: Mapping[str, PinMetadata]
    effect: str  # effect_of(pins, metadata)


def effect_of(pins: Mapping[str, Pin], metadata: Mapping[str, PinMetadata]) -> str:
    """The digest of what a lock installs: each pin (name, version, hashes, marker) and its
    recorded metadata, in name order; not the comments around them (``# via``). A later
    layer's lock records it as its ``after`` input: a line added to a layer's ``.in`` for a
    package it already installed changes that lock's text, not what it installs, and leaves
    the later locks fresh."""
    listed = [[p.name, p.version, sorted(p.hashes), p.marker] for _, p in sorted(pins.items())]
    required = {name: [list(m.requires_dist), m.requires_python] for name, m in metadata.items()}
    text = json.dumps({"pins": listed, "requires": required}, sort_keys=True)
    return f"effect:{hashlib.sha256(text.encode()).hexdigest()}"


def _parsed_body(
    body: str, digest: str, where: str, memo: Memo | None, front: FrontDoor
) -> ParsedBody:
    """A verified body's pins, metadata and effect digest, made once per ``memo`` for its text:
    a fleet's images lock the same layers to the same lines under headers of their own (their
    inputs differ). Read-only mappings, so locks may share them."""

    def parsed() -> ParsedBody:
        pins = MappingProxyType(parse_pins(body, where, front))
        metadata = MappingProxyType(parse_requires(body, where, front))
        return ParsedBody(digest, pins, metadata, effect_of(pins, metadata))

    return memo.table(BODIES).made(body, parsed) if memo is not None else parsed()


def requires_lines(metadata: Mapping[str, PinMetadata]) -> str:
    """The ``# requires NAME: {...}`` comment lines of a lock body, sorted by name."""
    return "".join(f"# requires {name}: {metadata[name].to_json()}\n" for name in sorted(metadata))


def parse_requires(
    body: str, where: str, front: FrontDoor = CONSOLE_SCRIPT
) -> dict[str, PinMetadata]:
    """Canonical name -> recorded metadata, from a lock body's ``# requires`` lines."""
    found: dict[str, PinMetadata] = {}
    for match in _REQUIRES_LINE.finditer(body):
        try:
            document = json.loads(match["json"])
            requires = tuple(str(item) for item in document["requires_dist"])
            found[match["name"]] = PinMetadata(requires, str(document["requires_python"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise _refuse(
                where, f"requires {match['name']}: not valid metadata ({exc})", front
            ) from exc
    return found


def read_file(source: Source, relpath: str, hint: str | Callable[[FrontDoor], str]) -> bytes:
    """A lock or base record's bytes; missing or a directory is :class:`LockError` (exit 2).

    ``hint`` may be a function that makes it: naming the command looks for the project's
    noxfile, and a fleet's gate reads thousands of files that are there."""
    try:
        return source.read_bytes(relpath)
    except FileNotFoundError as exc:
        raise LockError(f"{source.describe(relpath)}: missing", _text(hint, source.front)) from exc
    except IsADirectoryError as exc:
        raise LockError(
            f"{source.describe(relpath)}: is a directory, not a file", _text(hint, source.front)
        ) from exc


def _text(hint: str | Callable[[FrontDoor], str], front: FrontDoor) -> str:
    return hint if isinstance(hint, str) else hint(front)


def compile_hint(front: FrontDoor) -> str:
    """What to do about a missing or damaged lock."""
    return f"compile it: {front.command('lock', 'IMAGE')}"


def rerecord_hint(front: FrontDoor) -> str:
    """What to do about a missing or damaged base record."""
    return f"re-record it: {front.command('lock', 'IMAGE --record-base')}"


def read_lock(source: Source, relpath: str) -> Lock:
    data = read_file(source, relpath, compile_hint)
    return parse_lock(data, source.describe(relpath), source.memo, source.front)


def parse_base(
    data: bytes,
    where: str,
    digest: str = "",
    memo: Memo | None = None,
    front: FrontDoor = CONSOLE_SCRIPT,
) -> BaseRecord:
    """Verify and load ``base.json``; :class:`LockError` (exit 2) when damaged.

    Like :func:`parse_lock`, bytes verified once are not verified again with the same ``memo``.
    ``digest``: :func:`sha256` of ``data``, when the caller has made it already.
    """
    if memo is None:
        return _verify_base(data, where, front)
    return memo.table(BASES).made(digest or sha256(data), lambda: _verify_base(data, where, front))


def _verify_base(data: bytes, where: str, front: FrontDoor) -> BaseRecord:
    try:
        document: Any = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LockError(f"{where}: not JSON ({exc})", rerecord_hint(front)) from exc
    if not isinstance(document, dict) or document.get("schema") != BASE_SCHEMA:
        raise LockError(f"{where}: not a base record of schema {BASE_SCHEMA}", rerecord_hint(front))
    try:
        environments = snapshot_from_document(document["snapshot"], f"{where}: snapshot")
        return BaseRecord(
            str(document["image"]),
            str(document["image_id"]),
            _optional(document["repo_digest"]),
            environments,
            _optional(document.get("source")),
            _standins(document.get("standins", []), where, front),
        )
    except KeyError as exc:
        raise LockError(f"{where}: missing key {exc}", rerecord_hint(front)) from exc
    except SnapshotError as exc:
        raise LockError(exc.message, rerecord_hint(front)) from exc


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)


def _standins(value: Any, where: str, front: FrontDoor) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise LockError(f"{where}: standins: not a list of name==version", rerecord_hint(front))
    return tuple(value)


def read_base(source: Source, relpath: str) -> BaseRecord:
    data = read_file(
        source, relpath, f"record it: {source.front.command('lock', 'IMAGE --record-base')}"
    )
    return parse_base(data, source.describe(relpath), memo=source.memo, front=source.front)


def base_changes(old: BaseRecord | None, new: BaseRecord) -> list[str]:
    """Human lines saying what a re-recorded base changed, [] when nothing did: the platform,
    the image id, each interpreter recorded anew or no longer, and for each interpreter kept its
    Python and C library, the counts of distributions added, removed and changed, then each."""
    if old is None:
        return [f"recorded {new.image} ({new.image_id})"] + [
            f"{env.interpreter}: {_described(env)}" for env in new.environments
        ]
    lines = _platform_change(old, new)
    lines += [f"image id {old.image_id} -> {new.image_id}"] if old.image_id != new.image_id else []
    olds = {env.interpreter: env for env in old.environments}
    news = {env.interpreter: env for env in new.environments}
    lines += [f"{path}: no longer recorded (was {_described(env)})"
              for path, env in olds.items() if path not in news]  # fmt: skip
    for path, env in news.items():
        before = olds.get(path)
        if before is None:
            lines.append(f"{path}: newly recorded ({_described(env)})")
        else:
            lines += _environment_changes(before, env)
    return lines


def _described(env: Environment) -> str:
    """``Python 3.11.2, 12 distributions``."""
    count = len(env.winners())
    return f"Python {env.python}, {count} distribution{'s' * (count != 1)}"


def _platform_change(old: BaseRecord, new: BaseRecord) -> list[str]:
    """``platform linux/amd64 -> linux/arm64`` when the records' platforms differ (one that
    does not say is ``unknown``)."""
    before, after = (_record_platform(record) for record in (old, new))
    return [f"platform {before} -> {after}"] if before != after else []


def _record_platform(record: BaseRecord) -> str:
    found = sorted({environment_platform(env) or "unknown" for env in record.environments})
    return ", ".join(found) or "unknown"


def _environment_changes(old: Environment, new: Environment) -> list[str]:
    path = new.interpreter
    lines = [f"{path}: Python {old.python} -> {new.python}"] if old.python != new.python else []
    if old.libc != new.libc:
        lines.append(f"{path}: libc {old.libc or 'unknown'} -> {new.libc or 'unknown'}")
    moved = _winner_changes(old.winners(), new.winners())
    if moved:
        added = sum(1 for _, before, _ in moved if before is None)
        removed = sum(1 for _, _, after in moved if after is None)
        counts = f"{len(old.winners())} -> {len(new.winners())} distributions"
        lines.append(f"{path}: {added} added, {removed} removed, "
                     f"{len(moved) - added - removed} changed ({counts})")  # fmt: skip
        lines += [f"{path}: {name} {before or '(absent)'} -> {after or '(absent)'}"
                  for name, before, after in moved]  # fmt: skip
    return lines


def _winner_changes(
    old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[tuple[str, str | None, str | None]]:
    """(name, version before or None, version after or None) of every winner that moved."""
    moved = []
    for name in sorted(set(old) | set(new)):
        before = old[name].version if name in old else None
        after = new[name].version if name in new else None
        if before != after:
            moved.append((name, before, after))
    return moved
