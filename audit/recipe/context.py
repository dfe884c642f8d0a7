"""What the validation of one layer needs beyond its own table: the recipe folder (its files
are read through a :class:`~audit.project.sources.Source`), the image's indexes and the stages
declared before the layer's own (a layer may copy or mount only from those).

Invariant: every path these helpers return is relative, normalised and inside the recipe
folder, and exists there.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from audit.project.sources import Source
from audit.recipe.located_toml import Node
from audit.recipe.model import Index

STAGE_NAME = re.compile(r"v[1-9][0-9]*")


@dataclass(frozen=True)
class ParseContext:
    """The recipe around the layer being read."""

    source: Source
    folder: str  # images/<name>
    index_url: str
    indexes: tuple[Index, ...]
    earlier: tuple[str, ...] = ()  # the names of the stages before this layer's stage


def recipe_file(node: Node, key: str, context: ParseContext, under: str = "") -> str:
    """A path inside the recipe folder (``under`` it, when given) that exists."""
    path = node.text(key)
    clean = posixpath.normpath(path)
    if path.startswith("/") or clean.startswith("..") or not clean.startswith(under):
        raise node.error(key, f"{path!r} must be a relative path inside {context.folder}/{under}")
    if not context.source.exists(f"{context.folder}/{clean}"):
        raise node.error(key, f"{context.folder}/{clean} does not exist", "create it or fix it")
    return clean


def own_file(node: Node, key: str, context: ParseContext) -> str:
    """A file or folder of the recipe folder that is the user's own (not the recipe itself)."""
    path = recipe_file(node, key, context)
    if path in ("image.toml", ".") or path.startswith("templates"):
        raise node.error(key, "name a file or folder of your own, not the recipe itself")
    return path


def earlier_stage(node: Node, key: str, name: str, context: ParseContext) -> str:
    """``name`` when it is a stage before this one; a located error otherwise."""
    if name not in context.earlier:
        before = ", ".join(context.earlier) or "none"
        raise node.error(
            key,
            f"{name!r} is not a stage before this one (stages before it: {before})",
            "a stage may start from, copy from or mount from an earlier stage only",
        )
    return name
