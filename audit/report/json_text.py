"""Reports as indented JSON text, byte for byte what ``json.dumps(value, indent=2,
sort_keys=True, ensure_ascii=False)`` writes, in a fraction of its time.

With ``indent`` the standard library encodes in pure Python, one generator per container and
one yielded piece per token (a fleet's gate report has 900,000 of them); this writer builds each
container's text with one join and leaves strings to the C encoder, each distinct string once
per document (a report repeats its package names, versions and rule words thousands of times).
It covers what reports hold (dicts with string keys, lists, tuples, strings, ints, bools,
None); anything else (a float, a non-string key, a subclass) is handed to ``json.dumps``
itself, so the text never differs.

:func:`redacted_dumps` writes ``dumps(redact_json(value))``: every string, keys included,
redacted as it is written, without a redacted copy of the document first.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import encode_basestring  # the C encoder when available
from typing import Any

from audit.redact import redact, redact_json

INDENT = "  "


def dumps(value: Any) -> str:
    """``json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)``."""
    try:
        return _Writer(None).encode(value, "\n")
    except _Unusual:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def redacted_dumps(value: Any) -> str:
    """``dumps(redact_json(value))``: every string and key written redacted (no URL userinfo,
    no token), each distinct one redacted once."""
    try:
        return _Writer(redact).encode(value, "\n")
    except _Unusual:
        return dumps(redact_json(value))


class _Unusual(Exception):
    """A value this writer does not handle itself (the standard library then writes it all)."""


_SCALARS = {True: "true", False: "false", None: "null"}


class _Writer:
    """One document's writer. ``clean`` (None: none) is applied to every string and key
    before it is encoded; it must be idempotent (a cleaned key is looked up cleaned)."""

    def __init__(self, clean: Callable[[str], str] | None) -> None:
        self.clean = clean
        self.strings: dict[str, str] = {}  # a string -> its cleaned JSON text
        # string keys that ``clean`` leaves as they are -> their cleaned JSON text and ": "
        self.keys: dict[str, str] = {}

    def string(self, text: str) -> str:
        """``text`` cleaned and encoded (never empty: at least its quotes); remembered."""
        encoded = self.strings.get(text)
        if encoded is None:
            clean = text if self.clean is None else self.clean(text)
            encoded = self.strings[text] = encode_basestring(clean)
        return encoded

    def encode(self, value: Any, newline: str) -> str:
        """``value`` at the depth ``newline`` (a line break and that depth's indent) stands for."""
        kind = type(value)
        if kind is str:
            return self.strings.get(value) or self.string(value)
        if kind is dict:
            return self.object(value, newline)
        if kind is list or kind is tuple:
            return self.array(value, newline)
        if kind is int:
            return int.__repr__(value)
        if kind is bool or value is None:
            return _SCALARS[value]
        raise _Unusual

    def object(self, value: dict[Any, Any], newline: str) -> str:
        if not value:
            return "{}"
        keys = self.keys
        if not keys.keys() >= value.keys():  # a key not seen yet (a report has a few dozen)
            value = self.new_keys(value)
        inner = newline + INDENT
        strings, string, encode = self.strings, self.string, self.encode
        items = [
            # a string value inline: most of a report's values are strings
            keys[key]
            + (strings.get(item) or string(item) if type(item) is str else encode(item, inner))
            for key in sorted(value)  # strings sort faster than (key, item) pairs
            for item in [value[key]]  # an assignment (Python compiles this idiom as one)
        ]
        return "{" + inner + ("," + inner).join(items) + newline + "}"

    def new_keys(self, value: dict[Any, Any]) -> dict[str, Any]:
        """``value`` with its keys cleaned, as ``redact_json`` makes it (two keys that clean
        to one: the later value, at the earlier place; sorting follows anyway); each key is
        then known (cleaning is idempotent: a cleaned key cleans to itself)."""
        if any(type(key) is not str for key in value):
            raise _Unusual  # json converts such keys, and sorts before it does
        cleaned: dict[str, Any] = {}
        for key, item in value.items():
            clean = key if self.clean is None else self.clean(key)
            self.keys[clean] = encode_basestring(clean) + ": "
            cleaned[clean] = item
        return cleaned

    def array(self, value: list[Any] | tuple[Any, ...], newline: str) -> str:
        if not value:
            return "[]"
        inner = newline + INDENT
        encode = self.encode
        return (
            "["
            + inner
            + ("," + inner).join([encode(item, inner) for item in value])
            + newline
            + "]"
        )
