"""Close-match suggestions for misspelt names: keys, stages, images, indexes."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The one choice most like ``word``, when one is close enough to be a likely typo."""
    options = sorted(set(choices))
    matches = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if not matches:
        matches = difflib.get_close_matches(word.lower(), options, n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for a close match, else the empty string."""
    match = closest(word, choices)
    return f" (did you mean {match!r}?)" if match else ""


def one_of(choices: Iterable[str]) -> str:
    """``'a', 'b' or 'c'``: the allowed values, for a hint."""
    quoted = [repr(choice) for choice in sorted(set(choices))]
    if len(quoted) <= 1:
        return "".join(quoted)
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]
