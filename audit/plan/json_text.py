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

from audit.core.redact import redact, redact_json

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
        self.clean_keys: set[str] = set()  # keys that ``clean`` leaves as they are

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
        if any(type(key) is not str for key in value):
            raise _Unusual  # json converts such keys, and sorts before it does
        if self.clean is not None and not self.clean_keys.issuperset(value):
            value = self.cleaned_keys(value)
        inner = newline + INDENT
        strings, string, encode = self.strings, self.string, self.encode
        items = [
            # a string value inline: most of a report's values are strings
            f"{strings.get(key) or string(key)}: "
            + (strings.get(item) or string(item) if type(item) is str else encode(item, inner))
            for key, item in sorted(value.items())
        ]
        return "{" + inner + ("," + inner).join(items) + newline + "}"

    def cleaned_keys(self, value: dict[str, Any]) -> dict[str, Any]:
        """``value`` with its keys cleaned, as ``redact_json`` makes it (two keys that clean
        to one: the later value, at the earlier place; sorting follows anyway)."""
        assert self.clean is not None
        cleaned: dict[str, Any] = {}
        for key, item in value.items():
            clean = self.clean(key)
            if clean == key:
                self.clean_keys.add(key)
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
