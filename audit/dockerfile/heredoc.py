"""Heredocs in a Dockerfile (``RUN <<EOF … EOF``): found in the text, since ``dockerfile-parse``
reads each body line as an instruction of its own.

Invariant: every body line belongs to exactly one heredoc and to no instruction, so the walk
over instructions never sees a body line as ``ECHO`` or ``PRINT(1)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# <<EOF, <<-EOF, <<'EOF', <<"EOF" (not the here-string <<<, not a shift like 1<<2)
MARK = re.compile(r"(?<!<)<<(?!<)(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
WITH_BODIES = ("RUN", "COPY", "ADD")


@dataclass(frozen=True)
class Heredoc:
    """One heredoc: its delimiter, its body (``<<-`` tabs stripped), whether the delimiter was
    quoted (then the shell does not expand ``$`` in it) and whether the body was closed."""

    name: str
    body: str
    quoted: bool
    closed: bool
    mark: str  # the operator as written: <<-'EOF'


def attach(items: list[dict[str, Any]], lines: list[str]) -> list[dict[str, Any]]:
    """``items`` without the parser's items for body lines; an instruction with heredocs gets
    ``item["heredocs"]``, a list of :class:`Heredoc` in order."""
    kept: list[dict[str, Any]] = []
    skip_to = -1
    for item in items:
        if int(item["startline"]) <= skip_to:
            continue
        marks = list(MARK.finditer(str(item["value"])))
        copy = dict(item)
        if marks and str(item["instruction"]).upper() in WITH_BODIES:
            copy["heredocs"], skip_to = _bodies(marks, lines, int(item["endline"]) + 1)
        kept.append(copy)
    return kept


def _bodies(marks: list[re.Match[str]], lines: list[str], start: int) -> tuple[list[Heredoc], int]:
    """The bodies after line ``start`` (0-based), one per mark, and the last line they use."""
    found, line = [], start
    for mark in marks:
        strip, quote, name = mark.group(1), mark.group(2), mark.group(3)
        body: list[str] = []
        closed = False
        while line < len(lines):
            text = lines[line].rstrip("\r\n")
            line += 1
            if (text.lstrip("\t") if strip else text) == name:
                closed = True
                break
            body.append(text.lstrip("\t") if strip else text)
        found.append(
            Heredoc(name, "".join(f"{b}\n" for b in body), bool(quote), closed, mark.group(0))
        )
    return found, line - 1
