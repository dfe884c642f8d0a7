"""An image's config (the JSON every image format carries) read into what the walk needs.

PURE: standard library only. The config names the platform, the environment (``Env``: PATH,
LD_LIBRARY_PATH, PYTHONPATH, HOME), the user, the layers' diff-ids (``rootfs.diff_ids``) and
one history entry per instruction (``created_by``, ``empty_layer``), the same in a ``docker
save`` archive, an OCI layout and a registry.

Invariant of :func:`layer_refs`: one :class:`~audit.history.model.LayerRef` per history entry,
in order, whose non-empty entries pair with the diff-ids one to one; a config whose history
does not pair (``docker import``, hand-made images) gets one ref per layer instead, with an
empty instruction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from audit.history.model import LayerRef
from audit.redact import redact

# GOARCH -> platform.machine() as PEP 508's platform_machine reads it on Linux
MACHINES = {
    "amd64": "x86_64", "arm64": "aarch64", "386": "i686", "arm": "armv7l",
    "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64", "mips64le": "mips64",
    "loong64": "loongarch64",
}  # fmt: skip
CONFIG_LIMIT = 64 << 20  # a real config is kilobytes; a bigger "config" is not one


class ConfigError(ValueError):
    """The bytes are not an image config (the caller names where they came from)."""


@dataclass(frozen=True)
class HistoryEntry:
    """One instruction of the image's history (``created_by`` already redacted)."""

    created_by: str
    empty_layer: bool
    comment: str = ""


@dataclass(frozen=True)
class OciConfig:
    """What the walk reads of a config."""

    architecture: str
    os: str
    variant: str
    env: tuple[tuple[str, str], ...]
    user: str
    diff_ids: tuple[str, ...]
    history: tuple[HistoryEntry, ...]

    @property
    def platform(self) -> str:
        """``linux/arm64`` (``linux/arm/v7`` with a variant)."""
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)

    @property
    def machine(self) -> str:
        """PEP 508's ``platform_machine`` for this architecture (the GOARCH when unknown)."""
        return MACHINES.get(self.architecture, self.architecture)

    def environ(self) -> dict[str, str]:
        """``Env`` as a mapping (the last value of a repeated name wins, as for a container)."""
        return dict(self.env)


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return value


def _env(items: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        key, _, value = item.partition("=")
        pairs.append((key, value))
    return tuple(pairs)


def _history(value: Any) -> tuple[HistoryEntry, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError("history: expected a list")
    entries = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise ConfigError(f"history[{index}]: expected an object")
        created = item.get("created_by", "")
        comment = item.get("comment", "")
        entries.append(
            HistoryEntry(
                redact(created if isinstance(created, str) else ""),
                item.get("empty_layer") is True,
                redact(comment if isinstance(comment, str) else ""),
            )
        )
    return tuple(entries)


def parse_config(data: bytes) -> OciConfig:
    """The config's facts; :class:`ConfigError` when ``data`` is not an image config."""
    if len(data) > CONFIG_LIMIT:
        raise ConfigError(f"{len(data)} bytes: too big for an image config")
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(document, dict):
        raise ConfigError("not a JSON object")
    rootfs = document.get("rootfs")
    if not isinstance(rootfs, dict) or rootfs.get("type") != "layers":
        raise ConfigError("no rootfs of type layers: not an image config")
    diff_ids = _strings(rootfs.get("diff_ids"), "rootfs.diff_ids")
    if not all(d.startswith("sha256:") and len(d) == 71 for d in diff_ids):
        raise ConfigError("rootfs.diff_ids: expected sha256:<64 hex> digests")
    config = document.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError("config: expected an object")
    user = config.get("User") or ""
    return OciConfig(
        architecture=str(document.get("architecture") or ""),
        os=str(document.get("os") or ""),
        variant=str(document.get("variant") or ""),
        env=_env(_strings(config.get("Env"), "config.Env")),
        user=user if isinstance(user, str) else "",
        diff_ids=tuple(diff_ids),
        history=_history(document.get("history")),
    )


def layer_refs(config: OciConfig) -> tuple[LayerRef, ...]:
    """One ref per history entry (see the module's invariant)."""
    entries = config.history
    if sum(1 for e in entries if not e.empty_layer) != len(config.diff_ids):
        return tuple(
            LayerRef(index=i, instruction="", digest=digest)
            for i, digest in enumerate(config.diff_ids)
        )
    refs, layer = [], 0
    for index, entry in enumerate(entries):
        text = entry.created_by or entry.comment
        if entry.empty_layer:
            refs.append(LayerRef(index=index, instruction=text, empty=True))
        else:
            refs.append(LayerRef(index=index, instruction=text, digest=config.diff_ids[layer]))
            layer += 1
    return tuple(refs)


_ENV_PREFIXES = ("ENV ", "/bin/sh -c #(nop)  ENV ", "/bin/sh -c #(nop) ENV ", "#(nop) ENV ")


def env_instruction(text: str) -> tuple[tuple[str, str], ...] | None:
    """The assignments of a history entry that is an ``ENV`` instruction, as BuildKit
    (``ENV A=1 B=2``) or the classic builder (``/bin/sh -c #(nop)  ENV A=1``) records it;
    None for any other entry. ``ENV KEY value`` (the old form) is one assignment; a word
    without ``=`` continues the value before it (a value with spaces)."""
    prefix = next((p for p in _ENV_PREFIXES if text.startswith(p)), None)
    if prefix is None:
        return None
    words = text[len(prefix) :].split()
    if words and "=" not in words[0]:
        return ((words[0], " ".join(words[1:])),)
    pairs: list[list[str]] = []
    for word in words:
        key, equals, value = word.partition("=")
        if equals and key.replace("_", "a").isalnum():
            pairs.append([key, value])
        elif pairs:
            pairs[-1][1] += " " + word
    return tuple((key, value.strip('"')) for key, value in pairs)


def env_timeline(config: OciConfig) -> tuple[tuple[tuple[str, str], ...], ...]:
    """The environment after each entry of :func:`layer_refs` (one per ref, in order).

    A variable that ``ENV`` entries of the history set takes, after each entry, the value the
    last of them gave (unset before the first); any other variable has its value in ``Env``
    throughout. Where replaying the entries does not end at the config's own value (an entry
    the parser misread, a value the history redacted, an image without a full history), that
    variable has the config's value throughout: the last state always has ``Env`` exactly.
    """
    refs = layer_refs(config)
    final = config.environ()
    steps = [env_instruction(ref.instruction) or () for ref in refs]
    replayed: dict[str, str] = {}
    for step in steps:
        replayed.update(step)
    trusted = {key for key, value in replayed.items() if final.get(key) == value}
    current = {key: value for key, value in final.items() if key not in trusted}
    found = []
    for step in steps:
        current.update((key, value) for key, value in step if key in trusted)
        ordered = sorted(current.items(), key=lambda item: _order(final, item[0]))
        found.append(tuple(ordered))
    return tuple(found)


def _order(final: dict[str, str], key: str) -> tuple[int, str]:
    """The config's order first (as ``Env`` lists them), then new names by name."""
    names = list(final)
    return (names.index(key), "") if key in final else (len(names), key)
