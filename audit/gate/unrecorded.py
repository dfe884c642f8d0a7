"""Images that were never recorded: rendered, not audited.

A recipe whose base image was never recorded (no ``locks/<image>/base.json`` and no lock under
``locks/<image>/``) cannot be predicted: its environments are unknown, so nothing it changes can
be judged. The gate and audit-deps over every image report such an image as **not audited**
(rule ``not-audited``): a warning, shown and counted, that does not fail the run; it fails (an
error, exit 1) where the user asked about that image (named on audit-deps' command line, or
touched by the pull request the gate judges), and everywhere under ``--strict``.

A recipe with locks but no base record is not "never recorded": its record was lost, and the
usual missing-base errors apply. Pure given a :class:`Source`.
"""

from __future__ import annotations

from audit.errors import AuditError
from audit.lock.files import base_relpath
from audit.policy.findings import ERROR, WARNING, Finding
from audit.project.frontdoor import FrontDoor
from audit.project.sources import Source
from audit.recipe.model import Recipe
from audit.report.findings import NOT_AUDITED

STATUS = "rendered, not recorded"


def never_recorded(source: Source, recipe: Recipe) -> bool:
    """True when ``recipe`` has neither a base record nor any lock at ``source``."""
    folder = f"locks/{recipe.name}"
    if source.exists(base_relpath(recipe)):
        return False
    return not any(name.endswith(".txt") for name in source.listdir(folder))


def record_hint(recipe: Recipe, front: FrontDoor) -> str:
    """How to record the base (with the image, or from a snapshot taken where it lives)."""
    lock = front.command("lock", f"{recipe.name} --record-base")
    return (
        f"record the base and commit locks/{recipe.name}/: on a machine that has "
        f"{recipe.base_ref}: {lock}; elsewhere: {lock} --from-snapshot FILE --image-id ID "
        "(README, 'A base that lives elsewhere')"
    )


def not_audited(recipe: Recipe, *, fails: bool, why: str = "", front: FrontDoor) -> Finding:
    """The finding for an image that was never recorded; ``why`` says why it fails, if it does."""
    message = (
        f"not audited: no base record ({STATUS}): {base_relpath(recipe)} does not exist, so "
        f"nothing {recipe.name} installs can be predicted or judged"
    )
    return Finding(
        rule=NOT_AUDITED,
        severity=ERROR if fails else WARNING,
        package="",
        before=None,
        after=None,
        message=f"{message}{f' ({why})' if why else ''}",
        where=recipe.name,
        hint=record_hint(recipe, front),
    ).located(recipe.name)


def folder_files(source: Source, folder: str) -> dict[str, bytes | str]:
    """Every file below ``folder`` at ``source`` and its bytes (or, for a file that cannot be
    read, why): what makes two refs' copies of an image's folders the same."""
    files: dict[str, bytes | str] = {}
    for name in source.listdir(folder):
        path = f"{folder}/{name}"
        inside = folder_files(source, path)
        if inside:
            files.update(inside)
            continue
        try:
            files[path] = source.read_bytes(path)
        except (OSError, AuditError) as exc:  # an empty folder, a link: compared by the reason
            files[path] = type(exc).__name__
    return files


def touched(base: Source, head: Source, image: str) -> bool:
    """Whether the pull request changes anything under ``images/<image>/`` or
    ``locks/<image>/`` (its recipe, requirements, files, base record or locks)."""
    return any(
        folder_files(base, folder) != folder_files(head, folder)
        for folder in (f"images/{image}", f"locks/{image}")
    )
