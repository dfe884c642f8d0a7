"""Reports as indented JSON text, byte for byte what ``json.dumps(value, indent=2,
sort_keys=True, ensure_ascii=False)`` writes, in a fraction of its time.

With ``indent`` the standard library encodes in pure Python, one generator per container and
one yielded piece per token (a fleet's gate report has 900,000 of them); this writer builds each
container's text with one join and leaves strings to the C encoder. It covers what reports hold
(dicts with string keys, lists, tuples, strings, ints, bools, None); anything else (a float, a
non-string key, a subclass) is handed to ``json.dumps`` itself, so the text never differs.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring  # the C encoder when available
from typing import Any

INDENT = "  "


def dumps(value: Any) -> str:
    """``json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)``."""
    try:
        return _encode(value, "\n")
    except _Unusual:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


class _Unusual(Exception):
    """A value this writer does not handle itself (the standard library then writes it all)."""


_SCALARS = {True: "true", False: "false", None: "null"}


def _encode(value: Any, newline: str) -> str:
    """``value`` at the depth ``newline`` (a line break and that depth's indent) stands for."""
    kind = type(value)
    if kind is str:
        return encode_basestring(value)
    if kind is dict:
        return _object(value, newline)
    if kind is list or kind is tuple:
        return _array(value, newline)
    if kind is int:
        return int.__repr__(value)
    if kind is bool or value is None:
        return _SCALARS[value]
    raise _Unusual


def _object(value: dict[Any, Any], newline: str) -> str:
    if not value:
        return "{}"
    if any(type(key) is not str for key in value):
        raise _Unusual  # json converts such keys, and sorts before it does
    inner = newline + INDENT
    items = [
        # a string value inline: most of a report's values are strings
        f"{encode_basestring(key)}: "
        + (encode_basestring(item) if type(item) is str else _encode(item, inner))
        for key, item in sorted(value.items())
    ]
    return "{" + inner + ("," + inner).join(items) + newline + "}"


def _array(value: list[Any] | tuple[Any, ...], newline: str) -> str:
    if not value:
        return "[]"
    inner = newline + INDENT
    return "[" + inner + ("," + inner).join(_encode(item, inner) for item in value) + newline + "]"
