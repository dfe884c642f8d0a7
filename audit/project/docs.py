"""Where this layer-audit's reference documents are, for ``--help`` to name.

A wheel carries them as ``audit/docs/`` (pyproject.toml maps the checkout's ``docs/`` there);
a checkout has them at ``docs/`` beside ``audit/``. Pure: it only looks at paths.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent


def docs_folder(package: Path = _PACKAGE) -> Path | None:
    """The folder holding ``recipes.md`` and the other references; None when neither place
    has them (a copy of the sources without docs)."""
    for folder in (package / "docs", package.parent / "docs"):
        if (folder / "recipes.md").is_file():
            return folder
    return None


def docs_line(package: Path = _PACKAGE) -> str:
    """``--help``'s closing line naming the reference, or "" when there is none here."""
    folder = docs_folder(package)
    return f"reference: {folder} (recipes.md: every image.toml key)" if folder else ""
