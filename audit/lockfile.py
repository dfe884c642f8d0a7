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

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

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


def _parse_pin(line: str, where: str) -> Pin:
    words = line.split(" --")
    try:
        requirement = Requirement(words[0])
    except InvalidRequirement as exc:
        raise _refuse(where, f"not a requirement: {exc}") from exc
    specs = list(requirement.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "===") or requirement.url:
        raise _refuse(where, f"{requirement.name}: not pinned with == to one version")
    hashes = []
    for option in words[1:]:
        match = _HASH.match("--" + option.strip())
        if match is None:
            raise _refuse(where, f"{requirement.name}: unexpected option --{option.strip()}")
        hashes.append(f"{match['algo']}:{match['hex']}")
    if not hashes:
        raise _refuse(where, f"{requirement.name}: no --hash (locks are compiled with hashes)")
    return Pin(canonicalize_name(requirement.name), specs[0].version, tuple(hashes))


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
    """Verify and load a lock file's bytes; :class:`LockError` (exit 2) if damaged or edited."""
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


def _read(source: Source, relpath: str, hint: str) -> bytes:
    try:
        return source.read_bytes(relpath)
    except FileNotFoundError as exc:
        raise LockError(f"{source.describe(relpath)}: missing", hint) from exc


def read_lock(source: Source, relpath: str) -> Lock:
    data = _read(source, relpath, "compile it: nox -s lock -- IMAGE")
    return parse_lock(data, source.describe(relpath))


def parse_base(data: bytes, where: str) -> BaseRecord:
    """Verify and load ``base.json``; :class:`LockError` (exit 2) when damaged."""
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
    data = _read(source, relpath, "record it: nox -s lock -- IMAGE --record-base")
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
