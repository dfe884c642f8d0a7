"""A TOML file read into :class:`Node` tables that know where they are.

Every error a recipe check raises names the file and the 1-based key path
(``images/x/image.toml: stage[2].layer[1].pip``); a TOML syntax error names the line and the key
path in force there. :meth:`Node.text` is the one gate for string values: each may land in a
Dockerfile, a label or a report, so none may hold a newline, a control character or a credential.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from audit.errors import RecipeError
from audit.project.sources import Source
from audit.redact import redact
from audit.suggest import did_you_mean, one_of

UNSAFE_TEXT = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# a name a recipe gives as a table key: an index, a lockstep group
SIMPLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
TOML_POSITION = re.compile(r"\(at (?:line (\d+), column \d+|end of document)\)$")
TOML_HEADER = re.compile(r"\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
FORMAT_HINT = "fix the value: docs/recipes.md describes every key"
TOML_KEY = re.compile(r"\s*([A-Za-z0-9_.\-\"' ]+?)\s*=")


def read_toml(source: Source, relpath: str) -> Node:
    """The top-level table of ``relpath``; RecipeError at the line and key path when unreadable."""
    where = source.describe(relpath)
    try:
        text = source.read_bytes(relpath).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(where, f"not UTF-8 text ({exc.reason})", "save it as UTF-8") from exc
    except OSError as exc:  # a directory or an unreadable file where the recipe should be
        raise RecipeError(where, f"cannot read ({exc.strerror})", "make it a plain file") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(where, text, str(exc)) from exc
    except RecursionError as exc:  # tomllib recurses once per nested array or inline table
        raise RecipeError(where, "values are nested too deeply", "see docs/recipes.md") from exc
    return Node(where, "", data)


def _toml_error(where: str, text: str, message: str) -> RecipeError:
    """tomllib's message, placed at its line and the key path in force there."""
    match = TOML_POSITION.search(message)
    problem = TOML_POSITION.sub("", message).strip()
    lines = text.splitlines()
    line = int(match.group(1)) if match and match.group(1) else len(lines)
    path = _key_path_at(lines[:line])
    duplicate = "overwrite" in problem or "twice" in problem or "Duplicate" in problem
    label = f"duplicate key ({problem})" if duplicate else f"invalid TOML: {problem}"
    hint = (
        "each key may appear once per table: remove or merge one"
        if duplicate
        else ("see docs/recipes.md for the format")
    )
    return RecipeError(f"{where}: {path or '(top level)'} (line {line})", label, hint)


def _key_path_at(lines: list[str]) -> str:
    """The 1-based key path of the last line: ``stage[2].layer[1].pip``, best effort."""
    counts: dict[str, int] = {}
    table = ""
    for text in lines:
        header = TOML_HEADER.match(text)
        if header:
            table = ".".join(part.strip().strip("\"'") for part in header.group(2).split("."))
            if header.group(1) == "[[":
                counts[table] = counts.get(table, 0) + 1
                counts = {k: v for k, v in counts.items() if not k.startswith(table + ".")}
    parts = table.split(".") if table else []
    shown = []
    for depth, part in enumerate(parts, start=1):
        prefix = ".".join(parts[:depth])
        shown.append(f"{part}[{counts[prefix]}]" if prefix in counts else part)
    key = TOML_KEY.match(lines[-1]) if lines and not TOML_HEADER.match(lines[-1]) else None
    if key:
        shown.append(key.group(1).strip().strip("\"'"))
    return ".".join(shown)


@dataclass(frozen=True)
class Node:
    """One TOML table and where it is, with typed getters that raise located errors."""

    file: str
    path: str
    data: Mapping[str, Any]

    def at(self, key: str | None) -> str:
        if key is None:
            return self.path or "(top level)"
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str | None, problem: str, hint: str = "") -> RecipeError:
        return RecipeError(f"{self.file}: {self.at(key)}", problem, hint or FORMAT_HINT)

    def check_keys(self, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> None:
        for key in self.data:
            if key not in allowed:
                raise self.error(
                    key,
                    f"unknown key{did_you_mean(key, allowed)}",
                    f"allowed here: {one_of(allowed)}",
                )
        for key in required:
            if key not in self.data:
                raise self.error(key, "required key is missing", "see docs/recipes.md")

    def value(self, key: str, kinds: type | tuple[type, ...], what: str) -> Any:
        value = self.data[key]
        if not isinstance(value, kinds):
            raise self.error(key, f"must be {what}, not {type(value).__name__} {value!r}")
        return value

    def text(self, key: str, default: str | None = None) -> str:
        if key not in self.data and default is not None:
            return default
        value: str = self.value(key, str, "a string")
        if UNSAFE_TEXT.search(value):
            raise self.error(
                key,
                "newline or control character in value",
                "keep it on one line: a value that lands in a Dockerfile could inject instructions",
            )
        if not value.strip():
            raise self.error(key, "must not be empty")
        if redact(value) != value:
            raise self.error(
                key,
                f"holds a credential: {redact(value)!r}",
                "a recipe is committed and its values land in Dockerfiles, labels and reports: "
                "give credentials to pip as BuildKit secrets and to registries with docker login",
            )
        return value

    def optional_text(self, key: str) -> str | None:
        return self.text(key) if key in self.data else None

    def matching(self, key: str, pattern: re.Pattern[str], what: str, default: str = "") -> str:
        value = self.text(key, default or None)
        if not pattern.fullmatch(value):
            raise self.error(key, f"not {what}: {value!r}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        return bool(self.value(key, bool, "true or false")) if key in self.data else default

    def texts(self, key: str) -> list[str]:
        items = self.value(key, list, "a list of strings") if key in self.data else []
        return [
            self.element(f"{key}[{n}]", item).text(f"{key}[{n}]") for n, item in enumerate(items, 1)
        ]

    def element(self, key: str, value: Any) -> Node:
        """A node holding one list element, so its errors read ``…key[2]``."""
        return Node(self.file, self.path, {key: value})

    def table(self, key: str) -> Node:
        value = self.value(key, dict, "a table")
        return Node(self.file, self.at(key), value)

    def tables(self, key: str) -> list[Node]:
        if key not in self.data:
            return []
        value = self.data[key]
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.error(key, f"must be an array of tables: write [[{self.at(key)}]] headers")
        return [Node(self.file, f"{self.at(key)}[{n}]", v) for n, v in enumerate(value, 1)]
