"""``export --format pylock``: write each stage's ``pylock.<stage>.toml`` (PEP 751).

Every stage asked for is checked first (fresh locks, a known stage), then each locked package's
files are looked up on its index (the layer's extra index first, then the primary; one request
per project and index), the document is rendered, read back and validated by
``packaging.pylock`` where the installed ``packaging`` has it (26 and later), and written
atomically. Nothing is written unless every stage could be exported.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from audit.errors import LockError
from audit.host import atomic
from audit.index.files import project_files
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from audit.report.pylock import (
    ExportedFile,
    Locked,
    StageExport,
    matching_files,
    pylock_document,
    render_toml,
    stage_export,
)

Listings = dict[tuple[str, str], list[ExportedFile]]


@dataclass(frozen=True)
class Exported:
    """One written file: its stage, path, package counts and whether packaging validated it."""

    stage: str
    path: Path
    locked: int
    from_base: int
    validated_by: str | None  # "packaging 26.0", or None when packaging has no PEP 751 reader


def export_pylock(root: Path, image: str, stage: str | None, output: Path) -> list[Exported]:
    """Write ``output/pylock.<stage>.toml`` for ``stage`` (or every stage of ``image``)."""
    source = DirectorySource(root)
    recipe = load_recipe(source, image)
    names = [stage] if stage else [s.name for s in recipe.stages]
    exports = [stage_export(source, recipe, name) for name in names]  # all checked first
    listings: Listings = {}
    texts = [(export, _render(export, listings)) for export in exports]
    written = []
    for export, text in texts:
        path = output / f"pylock.{export.stage}.toml"
        validated = validate(text, path)
        atomic.write_text(path, text)
        written.append(
            Exported(export.stage, path, len(export.locked), len(export.from_base), validated)
        )
    return written


def _render(export: StageExport, listings: Listings) -> str:
    files: dict[str, Sequence[ExportedFile]] = {}
    index_of: dict[str, str] = {}
    for pin in export.locked:
        files[pin.name], index_of[pin.name] = _find(pin, listings)
    return render_toml(pylock_document(export, files, index_of))


def _find(pin: Locked, listings: Listings) -> tuple[list[ExportedFile], str]:
    """The files of ``pin`` on the first of its indexes that lists one the lock allows."""
    for index in pin.indexes:
        key = (index, pin.name)
        if key not in listings:
            listings[key] = project_files(index, pin.name)
        matched = matching_files(pin, listings[key])
        if matched:
            return matched, index
    raise LockError(
        f"{pin.lock}: {pin.name}=={pin.version}: no file on the layer's indexes has a hash the "
        "lock lists (removed from the index, or locked against another one)",
        f"recompile the lock: nox -s lock -- {pin.lock.split('/')[1]}",
    )


def validate(text: str, path: Path) -> str | None:
    """Read ``text`` back as TOML and, where ``packaging.pylock`` exists, as PEP 751; return
    which packaging validated it (None: this packaging has no PEP 751 reader)."""
    data = tomllib.loads(text)
    try:
        import packaging
        from packaging.pylock import Pylock  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    Pylock.from_dict(data)  # a failure is a bug of this exporter: let it show
    return f"packaging {packaging.__version__}"
