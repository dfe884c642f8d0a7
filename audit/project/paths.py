"""Where things live in a project checkout: recipes, locks, build contexts, reports.

A project is any folder holding ``images/``: this checkout, or a user's own repository. The
commands find it by walking up from the working folder, unless ``--project DIR`` named it
(the command's run context, :mod:`audit.cli.context`, holds that choice).
The default templates ship inside the package (:data:`PACKAGE_TEMPLATES`); a project's
``templates/`` and an image's ``images/<image>/templates/`` override them file by file.
"""

from __future__ import annotations

from pathlib import Path

from audit.errors import UsageError

ROOT_MARKERS = ("noxfile.py", "images")
PACKAGE_DIR = Path(__file__).resolve().parent.parent
PACKAGE_TEMPLATES = PACKAGE_DIR / "templates"  # package data: the default Jinja templates


def find_root(start: Path | None = None) -> Path:
    """The project root: the nearest folder at or above ``start`` (default: the working
    folder) holding ``images/``; exit 2 when there is none."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "images").is_dir():
            return folder
    raise UsageError(
        f"no images/ folder at or above {here}",
        "run from a layer-audit project (a folder holding images/), pass --project DIR, "
        "or start one with `layer-audit init`",
    )


def image_dir(root: Path, image: str) -> Path:
    return root / "images" / image


def locks_dir(root: Path, image: str) -> Path:
    """``locks/<image>/``: the base snapshot and one lock per pip layer, committed."""
    return root / "locks" / image


def build_dir(root: Path, image: str) -> Path:
    """``build/<image>/``: the rendered build context (git-ignored)."""
    return root / "build" / image


def reports_dir(root: Path, image: str, stage: str) -> Path:
    """``build/reports/<image>/<stage>/``: the audit trail extracted from a built image."""
    return root / "build" / "reports" / image / stage


def list_images(root: Path) -> list[str]:
    """Every recipe under ``images/``, sorted."""
    return sorted(p.parent.name for p in (root / "images").glob("*/image.toml"))
