"""A ``RUN``'s own flags (``--mount=…``, ``--network=…``, ``--security=…``) read as BuildKit
reads them, and written as the layer's ``mounts`` list.

Invariants: a mount is kept only whole, with every key the recipe can say (``type`` bind,
cache, tmpfs, secret, ssh; BuildKit's aliases ``src``, ``dst``, ``ro``, ``rw`` normalised); a
bind from the build context names the context path it needs (``context``), which the import
copies into the recipe; a stage a mount names is given as the Dockerfile spells it
(``stage``), the caller maps it to ``vK``. Whatever has no recipe key is returned as a reason,
never dropped in silence: the caller lists it.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field

from audit.recipe.mounts import MOUNT_TYPES, MOUNT_WORD

ALIASES = {
    "src": "source",
    "dst": "target",
    "destination": "target",
    "ro": "readonly",
    "rw": "readwrite",
}
FLAG_KEYS = ("readonly", "readwrite", "required")


@dataclass
class MountSpec:
    """One ``--mount=`` as key/value pairs (aliases resolved), and where it reads from."""

    values: dict[str, str]
    stage: str | None = None  # the Dockerfile's stage name or index it mounts from
    context: str | None = None  # the build-context path a bind without from mounts


@dataclass
class RunFlags:
    """What came before the command: its mounts, and the flags the recipe cannot keep."""

    mounts: list[MountSpec] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def split_flags(value: str) -> tuple[list[str], str]:
    """The leading ``--flag`` words of a RUN (quotes kept whole) and the command after them."""
    flags: list[str] = []
    rest = value.lstrip()
    while rest.startswith("--"):
        match = re.match(r"--(?:[^\s\"']|\"[^\"]*\"|'[^']*')+", rest)
        if match is None:
            break
        flags.append(match.group(0))
        rest = rest[match.end() :].lstrip()
    return flags, rest


def read_flags(flags: list[str], stages: set[str]) -> RunFlags:
    """Each flag as a mount or a problem; ``stages`` are the stage names and indexes defined
    so far (a ``from`` naming one is a stage, anything else an image)."""
    found = RunFlags()
    for flag in flags:
        name, _, setting = flag.partition("=")
        if name != "--mount":
            found.problems.append(f"RUN {flag} has no recipe key (the layer runs without it)")
            continue
        mount, problem = _mount(setting, stages)
        if problem:
            found.problems.append(f"--mount={setting}: {problem}")
        else:
            assert mount is not None
            found.mounts.append(mount)
    return found


def _mount(setting: str, stages: set[str]) -> tuple[MountSpec | None, str]:
    try:
        fields = next(csv.reader([setting]))
    except (csv.Error, StopIteration):
        return None, "does not parse"
    values: dict[str, str] = {}
    for item in fields:
        key, equals, text = item.strip().partition("=")
        key = ALIASES.get(key, key)
        values[key] = text if equals else "true"
    kind = values.pop("type", "bind")
    if kind not in MOUNT_TYPES:
        return None, f"a {kind} mount has no recipe key"
    allowed = (*MOUNT_TYPES[kind], *(("readwrite",) if kind == "bind" else ()))
    extra = [key for key in values if key not in allowed]
    bad = [text for key, text in values.items() if not MOUNT_WORD.fullmatch(text)]
    if extra or bad:
        what = f"key {extra[0]}" if extra else f"value {bad[0]!r} (a variable, a space or quotes)"
        return None, f"{what} has no recipe equivalent"
    spec = MountSpec({"type": kind, **values})
    origin = values.get("from")
    if origin is not None and origin in stages:
        spec.stage = origin
    if kind == "bind" and origin is None:
        spec.context = values.get("source", ".")
    return spec, ""


def mount_toml(spec: MountSpec, source: str | None, origin: str | None) -> str:
    """The inline table of one mount; ``source`` and ``origin`` as the recipe names them (a
    recipe file, a ``vK``)."""
    values = dict(spec.values)
    if source is not None:
        values["source"] = source
    if origin is not None:
        values["from"] = origin
    parts = [f"{key} = {_toml_value(key, text)}" for key, text in values.items()]
    return "{ " + ", ".join(parts) + " }"


def _toml_value(key: str, text: str) -> str:
    """A flag as a TOML boolean (BuildKit reads ``ro``, ``ro=true``, ``ro=1`` alike), else a
    string."""
    if key in FLAG_KEYS:
        return "true" if text.lower() in ("true", "1") else "false"
    return json.dumps(text)
