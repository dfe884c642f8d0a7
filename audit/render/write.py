"""Writing a rendered build context: the plan of :mod:`audit.render.plan` made files.

Each file is written atomically and only when its bytes (or mode) changed, so a re-render
leaves the context byte-identical with unchanged mtimes; files a previous render wrote and this
one does not are removed (a manifest remembers them). The guard's folder ``_guard/`` is written
the same way, from :func:`audit.render.guard.guard_files`.
"""

from __future__ import annotations

import json
from pathlib import Path

from audit.host import atomic
from audit.project.paths import build_dir
from audit.project.sources import DirectorySource
from audit.recipe.model import Recipe
from audit.recipe.parse import load_recipe
from audit.render import packaging_copy
from audit.render.guard import FILE_MODE, GUARD_DIR, base_pythons, guard_files
from audit.render.plan import MANIFEST, ContextFile, RenderResult, plan_context, select_stages
from audit.render.stages import BuildArgs


def render_image(
    root: Path, image: str, *, stage: str | None = None, build_args: BuildArgs = ()
) -> RenderResult:
    """Load ``images/<image>/`` of the project at ``root`` and render it (see :func:`render`)."""
    recipe = load_recipe(DirectorySource(root), image)
    return render(root, recipe, stage=stage, build_args=build_args)


def render(
    root: Path, recipe: Recipe, *, stage: str | None = None, build_args: BuildArgs = ()
) -> RenderResult:
    """Render ``recipe`` (what building ``stage`` needs, when given) into ``build/<image>/``;
    ``build_args`` replace ``[args]`` defaults in the Dockerfile (``render --build-arg``)."""
    stages = select_stages(recipe, stage)
    plan = plan_context(root, recipe, stages, build_args)
    result = write_context(build_dir(root, recipe.name), plan)
    write_guard_context(root, recipe, result.context)
    return result


def write_context(context: Path, plan: dict[str, ContextFile]) -> RenderResult:
    """Write the planned files atomically, drop stale ones, then record what was written."""
    with atomic.exclusive(context.parent / f".{context.name}.lock"):
        changed = [context / rel for rel, item in plan.items() if _write(context / rel, item)]
        removed = _remove_stale(context, set(plan))
        atomic.write_text(context / MANIFEST, json.dumps(sorted(plan), indent=1) + "\n")
    return RenderResult(
        context=context,
        dockerfile=context / "Dockerfile",
        files=tuple(context / rel for rel in plan),
        changed=tuple(changed),
        removed=tuple(removed),
    )


def _write(path: Path, item: ContextFile) -> bool:
    written = atomic.write_bytes(path, item.data)
    if path.stat().st_mode & 0o777 != item.mode:
        path.chmod(item.mode)  # modes are part of BuildKit's cache key: keep them fixed
        written = True
    return written


def _previous_files(context: Path) -> set[str]:
    """What the last render wrote; an unreadable manifest means nothing is known to be stale."""
    try:
        previous = json.loads((context / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    return (
        {rel for rel in previous if isinstance(rel, str)} if isinstance(previous, list) else set()
    )


def _remove_stale(context: Path, keep: set[str]) -> list[Path]:
    removed = []
    for rel in sorted(_previous_files(context) - keep):
        path = context / rel
        inside = path.resolve().is_relative_to(context.resolve())
        if inside and path.is_file():
            path.unlink()
            removed.append(path)
            _remove_empty_parents(path.parent, context)
    return removed


def _remove_empty_parents(folder: Path, context: Path) -> None:
    while folder != context and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def write_guard_context(root: Path, recipe: Recipe, context: Path) -> Path:
    """Write ``<context>/_guard/`` (removing files no longer part of it); return the folder."""
    folder = context / GUARD_DIR
    copy = packaging_copy.copy_for(base_pythons(root, recipe))
    files = guard_files(root, recipe, copy)
    for relpath, data in files.items():
        atomic.write_bytes(folder / relpath, data)
        # mkstemp makes 0600 files: a RUN under a non-root USER could not read them.
        (folder / relpath).chmod(FILE_MODE)
    wanted = {folder / relpath for relpath in files}
    for path in sorted(folder.rglob("*"), reverse=True):
        if path.is_file() and path not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return folder
