"""Debian package versions compared as ``dpkg --compare-versions`` compares them.

PURE CORE: standard library only, Python 3.9 syntax (vendored into images for the guard).

A version is ``[epoch:]upstream[-revision]``: the epoch is a number (0 when absent), the
revision is what follows the LAST hyphen (none: ``""``, which compares like ``"0"``). Upstream
and revision are compared with the same rule (``verrevcmp`` in dpkg's ``lib/dpkg/version.c``):
alternately a run of non-digits, compared character by character where ``~`` sorts before
everything (even the end of the string), letters before the other characters, and a run of
digits compared as a number (leading zeros do not count). ``tests/test_debversion.py`` checks
this implementation against the machine's ``dpkg --compare-versions``.
"""

from __future__ import annotations

from typing import NamedTuple

_DIGITS = frozenset("0123456789")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class DebianVersion(NamedTuple):
    """The three parts of a Debian version; ``revision`` is "" when the version has none."""

    epoch: int
    upstream: str
    revision: str


class DebianVersionError(ValueError):
    """The text is not a Debian version (empty, bad epoch, upstream not starting with a digit)."""


def parse_debian_version(text: str) -> DebianVersion:
    """Split ``[epoch:]upstream[-revision]``; raises :class:`DebianVersionError` when invalid."""
    value = text.strip()
    if not value or any(c.isspace() for c in value):
        raise DebianVersionError(f"{text!r} is not a Debian version (empty or has spaces)")
    epoch_text, colon, rest = value.partition(":")
    if not colon:
        epoch_text, rest = "0", value
    if not epoch_text or not set(epoch_text) <= _DIGITS:
        raise DebianVersionError(f"{text!r}: the epoch {epoch_text!r} is not a number")
    upstream, hyphen, revision = rest.rpartition("-")
    if not hyphen:
        upstream, revision = rest, ""
    if not upstream or upstream[0] not in _DIGITS:
        raise DebianVersionError(f"{text!r}: the upstream version must start with a digit")
    return DebianVersion(int(epoch_text), upstream, revision)


def _order(char: str) -> int:
    """dpkg's weight of one non-digit character: ``~`` < end < letters < everything else."""
    if char == "~":
        return -1
    if char in _LETTERS:
        return ord(char)
    return ord(char) + 256


def _split_digits(text: str, start: int) -> tuple[int, int]:
    """(value of the digit run at ``start`` (0 when none), index after it)."""
    end = start
    while end < len(text) and text[end] in _DIGITS:
        end += 1
    return (int(text[start:end]) if end > start else 0), end


def _compare_part(left: str, right: str) -> int:
    """``verrevcmp``: -1, 0 or 1 for one upstream or revision part against another."""
    i = j = 0
    while i < len(left) or j < len(right):
        while (i < len(left) and left[i] not in _DIGITS) or (
            j < len(right) and right[j] not in _DIGITS
        ):
            a = _order(left[i]) if i < len(left) and left[i] not in _DIGITS else 0
            b = _order(right[j]) if j < len(right) and right[j] not in _DIGITS else 0
            if a != b:
                return -1 if a < b else 1
            i, j = i + 1, j + 1
        a_num, i = _split_digits(left, i)
        b_num, j = _split_digits(right, j)
        if a_num != b_num:
            return -1 if a_num < b_num else 1
    return 0


def compare_debian_versions(left: str, right: str) -> int:
    """-1, 0 or 1 as ``left`` sorts before, equal to or after ``right`` (Debian policy 5.6.12).

    Raises :class:`DebianVersionError` when either is not a Debian version.
    """
    a, b = parse_debian_version(left), parse_debian_version(right)
    if a.epoch != b.epoch:
        return -1 if a.epoch < b.epoch else 1
    return _compare_part(a.upstream, b.upstream) or _compare_part(a.revision, b.revision)
