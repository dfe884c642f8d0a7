"""``mounts = [...]`` of a run or pip layer: the RUN's own BuildKit mounts, checked.

Each entry is a table with ``type`` (bind, cache, tmpfs, secret, ssh) and the keys BuildKit
takes for that type. Invariants: every value is one word of letters, digits and ``_./@:+-``
(it lands in a comma-separated ``--mount=`` flag, so no comma, quote, ``=`` or space); a bind
from the recipe names a file or folder of the recipe folder; ``from`` names an earlier stage
(``vK``) or an image; no mount touches the guard's paths or the pip secrets' ids, so a kept
mount can never hide or replace what the guard reads.
"""

from __future__ import annotations

import re
from typing import Any

from audit.recipe.context import STAGE_NAME, ParseContext, earlier_stage, own_file
from audit.recipe.located_toml import Node
from audit.recipe.model import Mount
from audit.suggest import did_you_mean, one_of

MOUNT_TYPES: dict[str, tuple[str, ...]] = {
    "bind": ("target", "source", "from", "readonly", "readwrite"),
    "cache": ("target", "id", "sharing", "from", "source", "mode", "uid", "gid", "readonly"),
    "tmpfs": ("target", "size"),
    "secret": ("id", "target", "required", "mode", "uid", "gid"),
    "ssh": ("id", "target", "required", "mode", "uid", "gid"),
}
NEEDS_TARGET = ("bind", "cache", "tmpfs")
MOUNT_WORD = re.compile(r"[A-Za-z0-9_./@:+-]+")
FLAGS = ("readonly", "readwrite", "required")  # true or false
SHARING = ("shared", "private", "locked")
GUARD_PATHS = ("/tmp/layer-audit", "/var/lib/layer-audit")  # noqa: S108 - paths in the image
RESERVED_SECRETS = ("pip-ca", "pip-netrc")  # the build's own BuildKit secrets
IMAGE_SOURCE = re.compile(r"[a-z0-9][a-z0-9._/:@-]*")


def parse_mounts(node: Node, context: ParseContext) -> tuple[Mount, ...]:
    """The layer's ``mounts`` list, each entry checked (errors name ``mounts[N].key``)."""
    items = node.value("mounts", list, "a list of tables")
    return tuple(
        _mount(node.element(f"mounts[{n}]", item), f"mounts[{n}]", context)
        for n, item in enumerate(items, 1)
    )


def _mount(holder: Node, key: str, context: ParseContext) -> Mount:
    node = holder.table(key)
    kind = node.text("type") if "type" in node.data else ""
    if kind not in MOUNT_TYPES:
        raise node.error(
            "type",
            f"{kind!r} is not a mount type{did_you_mean(kind, MOUNT_TYPES)}",
            f"use {one_of(MOUNT_TYPES)}",
        )
    required = ("target",) if kind in NEEDS_TARGET else ()
    node.check_keys(("type", *MOUNT_TYPES[kind]), required=required)
    values = {k: _word(node, k) for k in node.data if k not in ("type", "from", "source")}
    _check_reserved(node, kind, values)
    origin = _origin(node, context) if "from" in node.data else None
    source = _source(node, kind, origin, context) if "source" in node.data else None
    if kind == "secret" and "id" not in values:
        raise node.error("id", "a secret mount names its id", 'e.g. { type = "secret", id = "hf" }')
    named = [k for k in MOUNT_TYPES[kind] if k in values and k not in ("target", "id")]
    options = tuple((k, values[k]) for k in named)
    return Mount(kind, values.get("target"), source, origin, values.get("id"), options)


def _word(node: Node, key: str) -> str:
    """One mount value as BuildKit reads it: a flag's true/false, else one plain word."""
    raw: Any = node.data[key]
    if key in FLAGS:
        return "true" if node.boolean(key, False) else "false"
    if isinstance(raw, int) and not isinstance(raw, bool) and key in ("uid", "gid"):
        return str(raw)
    text = node.text(key)
    if not MOUNT_WORD.fullmatch(text):
        raise node.error(
            key,
            f"{text!r}: a mount value is one word of letters, digits and _./@:+-",
            "no spaces, commas, quotes or '=' (it lands in the --mount= flag)",
        )
    if key == "sharing" and text not in SHARING:
        raise node.error(key, f"{text!r} is not a cache sharing mode", f"use {one_of(SHARING)}")
    return text


def _check_reserved(node: Node, kind: str, values: dict[str, str]) -> None:
    target = values.get("target", "")
    if any(target == path or target.startswith(path + "/") for path in GUARD_PATHS):
        raise node.error("target", f"{target} is where the guard works", "mount somewhere else")
    if kind == "secret" and values.get("id") in RESERVED_SECRETS:
        raise node.error(
            "id",
            f"{values['id']!r} is the build's own secret for pip",
            "choose another id (the build passes pip's CA bundle and netrc under these)",
        )


def _origin(node: Node, context: ParseContext) -> str:
    """``from``: an earlier stage's name, or an image reference."""
    name = node.text("from")
    if STAGE_NAME.fullmatch(name):
        return earlier_stage(node, "from", name, context)
    if not IMAGE_SOURCE.fullmatch(name):
        raise node.error("from", f"{name!r} is neither a stage (vK) nor an image reference")
    return name


def _source(node: Node, kind: str, origin: str | None, context: ParseContext) -> str:
    """A bind's or cache's ``source``: a path in ``from``, or (a bind without ``from``) a
    file or folder of the recipe, which the render brings into the build context."""
    if origin is None and kind == "bind":
        return own_file(node, "source", context)
    return _word(node, "source")
