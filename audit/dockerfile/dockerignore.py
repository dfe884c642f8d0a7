"""What Docker leaves out of a build context: ``.dockerignore``, read as Docker reads it.

BuildKit takes ``<Dockerfile>.dockerignore`` beside the Dockerfile when there is one, else
``.dockerignore`` at the context's root. Lines are patterns (Go's ``filepath.Match`` plus
``**``), ``#`` starts a comment, ``!`` re-includes, the last matching line wins. The matching
is the Docker SDK's own (:class:`docker.utils.build.PatternMatcher`), so ``import`` copies what
``docker build`` would have sent: a ``.env`` the project keeps out of its images stays out of
the recipe too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from audit.errors import UsageError

Ignored = Callable[[str], bool]  # a path relative to the context -> Docker leaves it out


def ignore_file(context: Path, dockerfile: Path) -> Path | None:
    """The ignore file Docker would use for this Dockerfile and context, if any."""
    for candidate in (
        dockerfile.with_name(dockerfile.name + ".dockerignore"),
        context / ".dockerignore",
    ):
        if candidate.is_file():
            return candidate
    return None


def patterns(text: str) -> list[str]:
    """The pattern lines of an ignore file: stripped, without blanks and comments."""
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def ignored(context: Path, dockerfile: Path) -> Ignored:
    """A predicate over context-relative paths; nothing is ignored without an ignore file."""
    found = ignore_file(context, dockerfile)
    if found is None:
        return lambda _relpath: False
    try:
        text = found.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"{found}: cannot read it as text ({exc})", "fix or remove the ignore file"
        ) from exc
    from docker.utils.build import PatternMatcher

    matcher = PatternMatcher(patterns(text))
    return lambda relpath: bool(matcher.matches(relpath.strip("/")))
