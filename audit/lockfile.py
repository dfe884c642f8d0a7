"""Lock files and the base record under ``locks/<image>/``: their formats, reading and verifying.

A lock is pip-compile output (``--generate-hashes``) wrapped in comment lines, so it stays a
valid pip requirements file::

    # layer-audit lock: do not edit; re-create with: nox -s lock -- IMAGE
    # format: 1
    # layer: v2-01
    # requirements: requirements/v2.in
    # resolver: pip-tools==7.6.2 pip==25.2
    # input base: sha256:...          (one line per input, see audit.lock)
    # inputs: sha256:...              (digest of every input line)
    # content: sha256:...             (digest of the body below the header)
    #
    alpha==2.0 \\
        --hash=sha256:...
    # end of layer-audit lock

A truncated file (no end marker) or a hand-edited one (content digest mismatch) is refused
with :class:`LockError` (exit 2). ``base.json`` holds the base image's identity and the
snapshot of every recipe interpreter inside it, as :func:`audit.snapshot.dump_snapshot` wrote it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from packaging.utils import InvalidName, canonicalize_name
from packaging.version import InvalidVersion, Version

from audit.errors import LockError, SnapshotError
from audit.recipe import PipLayer, Recipe, Step
from audit.snapshot import Environment, dump_snapshot, parse_snapshot
from audit.sources import Source

LOCK_FORMAT = "1"
BASE_SCHEMA = "layer-audit.base/1"
TITLE = "# layer-audit lock: do not edit; re-create with: nox -s lock -- {image}"
END_MARKER = "# end of layer-audit lock"
_HEADER_FIELD = re.compile(r"^# (?P<key>[a-z-]+(?: [^:\n]+)?): (?P<value>.*)$")
_HASH = re.compile(r"^--hash=(?P<algo>sha256|sha384|sha512):(?P<hex>[0-9a-f]+)$")
# The shape pip-compile writes, ``name==version``: anything else (extras, markers, ===, URLs,
# spaces) goes to packaging's full PEP 508 parser.
_SIMPLE_PIN = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[A-Za-z0-9.+!_-]+)$")
# Verified locks by the sha256 of their bytes: the gate reads each lock twice (freshness, then
# prediction) and ``lock`` looks again under its file lock, and a Lock is immutable, so a second
# parse of the same bytes is free.
_PARSED: dict[bytes, Lock] = {}
_PARSED_BASES: dict[bytes, BaseRecord] = {}


@dataclass(frozen=True)
class Pin:
    name: str  # canonical (PEP 503)
    version: str
    hashes: tuple[str, ...]  # "sha256:<hex>", as pip's --hash takes them


@dataclass(frozen=True)
class Lock:
    slug: str
    inputs_digest: str
    pins: Mapping[str, Pin]
    content_digest: str = ""
    inputs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class BaseRecord:
    image: str
    image_id: str
    repo_digest: str | None
    environments: tuple[Environment, ...]


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
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


# -- reading --------------------------------------------------------------------------------


def _refuse(where: str, problem: str) -> LockError:
    return LockError(
        f"{where}: {problem}",
        "never edit a lock by hand: re-create it with nox -s lock -- IMAGE (git restore it first"
        " if the edit was an accident)",
    )


def _split_header(text: str, where: str) -> tuple[dict[str, str], str]:
    lines = text.split("\n")
    if not lines or not lines[0].startswith("# layer-audit lock:"):
        raise _refuse(where, "not a layer-audit lock (first line is not its title)")
    header: dict[str, str] = {}
    for number, line in enumerate(lines[1:], start=1):
        if line == "#":
            return header, "\n".join(lines[number + 1 :])
        match = _HEADER_FIELD.match(line)
        if match is None:
            raise _refuse(where, f"line {number + 1}: unexpected header line")
        header[match["key"]] = match["value"]
    raise _refuse(where, "truncated: the header never ends")


def _checked_body(text: str, header: Mapping[str, str], where: str) -> str:
    if not text.endswith("\n" + END_MARKER + "\n") and text != END_MARKER + "\n":
        raise _refuse(where, f"truncated: the last line is not {END_MARKER!r}")
    body = text[: -len(END_MARKER) - 1]
    if header.get("content") != sha256(body.encode()):
        raise _refuse(where, "edited by hand: its content digest does not match")
    return body


def _logical_lines(body: str) -> list[tuple[int, str]]:
    """Requirement lines with backslash continuations joined, comments dropped."""
    joined: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(body.split("\n"), start=1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        if pending + line:
            joined.append((start, (pending + line).strip()))
        pending = ""
    return joined


def _simple_pin(requirement: str) -> tuple[str, str] | None:
    """(canonical name, version) of a plain ``name==version``, validated by packaging."""
    match = _SIMPLE_PIN.match(requirement)
    if match is None:
        return None
    try:
        name = canonicalize_name(match["name"], validate=True)
        Version(match["version"])
    except (InvalidName, InvalidVersion):
        return None  # the full parser says precisely what is wrong
    return name, match["version"]


def _any_pin(requirement: str, where: str) -> tuple[str, str]:
    """(canonical name, version) of any PEP 508 requirement pinned with ``==`` or ``===``."""
    # Imported only here: pip-compile's plain pins never need the full parser's import time.
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        parsed = Requirement(requirement)
    except InvalidRequirement as exc:
        raise _refuse(where, f"not a requirement: {exc}") from exc
    specs = list(parsed.specifier)
    pinned = len(specs) == 1 and specs[0].operator in ("==", "===")
    if not pinned or specs[0].version.endswith(".*") or parsed.url:
        raise _refuse(where, f"{parsed.name}: not pinned with == to one version")
    return canonicalize_name(parsed.name), specs[0].version


def _parse_pin(line: str, where: str) -> Pin:
    words = line.split(" --")
    name, version = _simple_pin(words[0]) or _any_pin(words[0], where)
    hashes = []
    for option in words[1:]:
        match = _HASH.match("--" + option.strip())
        if match is None:
            raise _refuse(where, f"{name}: unexpected option --{option.strip()}")
        hashes.append(f"{match['algo']}:{match['hex']}")
    if not hashes:
        raise _refuse(where, f"{name}: no --hash (locks are compiled with hashes)")
    return Pin(name, version, tuple(hashes))


def parse_pins(body: str, where: str) -> dict[str, Pin]:
    """Canonical name -> pin, from pip-compile output; duplicates and options are refused."""
    pins: dict[str, Pin] = {}
    for number, line in _logical_lines(body):
        pin = _parse_pin(line, f"{where}: line {number}")
        if pin.name in pins:
            raise _refuse(where, f"line {number}: {pin.name} pinned twice")
        pins[pin.name] = pin
    return pins


def parse_lock(data: bytes, where: str) -> Lock:
    """Verify and load a lock file's bytes; :class:`LockError` (exit 2) if damaged or edited.

    Bytes verified once are not verified again in this process (see ``_PARSED``).
    """
    key = hashlib.sha256(data).digest()
    lock = _PARSED.get(key)
    if lock is None:
        lock = _PARSED[key] = _verify_lock(data, where)
    return lock


def forget_parsed() -> None:
    """Drop every remembered lock and base record (benchmarks time cold parses with this)."""
    _PARSED.clear()
    _PARSED_BASES.clear()


def _verify_lock(data: bytes, where: str) -> Lock:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(where, "not UTF-8 text") from exc
    header, rest = _split_header(text, where)
    body = _checked_body(rest, header, where)
    inputs = {k.removeprefix("input "): v for k, v in header.items() if k.startswith("input ")}
    if header.get("format") != LOCK_FORMAT or "layer" not in header:
        raise _refuse(where, f"format {header.get('format')!r}, expected {LOCK_FORMAT}")
    if header.get("inputs") != digest_inputs(inputs):
        raise _refuse(where, "edited by hand: its input lines do not match the inputs digest")
    pins = MappingProxyType(parse_pins(body, where))
    return Lock(
        header["layer"], header["inputs"], pins, header["content"], MappingProxyType(inputs)
    )


def read_file(source: Source, relpath: str, hint: str) -> bytes:
    """A lock or base record's bytes; missing or a directory is :class:`LockError` (exit 2)."""
    try:
        return source.read_bytes(relpath)
    except FileNotFoundError as exc:
        raise LockError(f"{source.describe(relpath)}: missing", hint) from exc
    except IsADirectoryError as exc:
        raise LockError(f"{source.describe(relpath)}: is a directory, not a file", hint) from exc


def read_lock(source: Source, relpath: str) -> Lock:
    data = read_file(source, relpath, "compile it: nox -s lock -- IMAGE")
    return parse_lock(data, source.describe(relpath))


def parse_base(data: bytes, where: str) -> BaseRecord:
    """Verify and load ``base.json``; :class:`LockError` (exit 2) when damaged.

    Like :func:`parse_lock`, bytes verified once are not verified again in this process.
    """
    key = hashlib.sha256(data).digest()
    record = _PARSED_BASES.get(key)
    if record is None:
        record = _PARSED_BASES[key] = _verify_base(data, where)
    return record


def _verify_base(data: bytes, where: str) -> BaseRecord:
    hint = "re-record it: nox -s lock -- IMAGE --record-base"
    try:
        document: Any = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LockError(f"{where}: not JSON ({exc})", hint) from exc
    if not isinstance(document, dict) or document.get("schema") != BASE_SCHEMA:
        raise LockError(f"{where}: not a base record of schema {BASE_SCHEMA}", hint)
    try:
        snapshot = json.dumps(document["snapshot"]).encode()
        environments = parse_snapshot(snapshot, f"{where}: snapshot")
        return BaseRecord(
            str(document["image"]),
            str(document["image_id"]),
            _optional(document["repo_digest"]),
            environments,
        )
    except KeyError as exc:
        raise LockError(f"{where}: missing key {exc}", hint) from exc
    except SnapshotError as exc:
        raise LockError(exc.message, hint) from exc


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)


def read_base(source: Source, relpath: str) -> BaseRecord:
    data = read_file(source, relpath, "record it: nox -s lock -- IMAGE --record-base")
    return parse_base(data, source.describe(relpath))


def base_changes(old: BaseRecord | None, new: BaseRecord) -> list[str]:
    """Human lines saying what a re-recorded base changed (image id and distributions)."""
    if old is None:
        return [f"recorded {new.image} ({new.image_id})"]
    lines = [f"image id {old.image_id} -> {new.image_id}"] if old.image_id != new.image_id else []
    olds = {env.interpreter: env.winners() for env in old.environments}
    for env in new.environments:
        lines += _winner_changes(env.interpreter, olds.get(env.interpreter, {}), env.winners())
    return lines


def _winner_changes(interpreter: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    lines = []
    for name in sorted(set(old) | set(new)):
        before = old[name].version if name in old else None
        after = new[name].version if name in new else None
        if before != after:
            lines.append(f"{interpreter}: {name} {before or '(absent)'} -> {after or '(absent)'}")
    return lines
