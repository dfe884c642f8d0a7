"""Before layer 1: is the base image the daemon has the one ``locks/<image>/base.json`` recorded?

The decision is :func:`audit.lock.trust.base_identity_drift`; this module inspects the image
and, only when it drifted, snapshots the actual base (the audit-deps ``--image`` machinery:
no network, read-only, entrypoint overridden) so the refusal shows recorded -> actual.

Invariant: nothing here builds, tags or writes; a drifted base raises before any build starts.
"""

from __future__ import annotations

import dataclasses

from audit.docker import host as docker_host
from audit.history.image_audit import ImageTarget, snapshot_image
from audit.history.snapshot import Environment
from audit.host import console
from audit.lock.files import BaseRecord, base_changes
from audit.lock.trust import base_identity_drift, drift_failure
from audit.project.frontdoor import FrontDoor
from audit.recipe.model import Recipe


def verify_base(recipe: Recipe, record: BaseRecord | None, front: FrontDoor) -> None:
    """Raise "base drifted" (exit 1) when the local base is not the recorded one (for a base
    without Python, the prelude stage just built: :attr:`Recipe.recorded_ref`).

    No base record: nothing to verify against (the lock check before it already refused a
    build that needs one).
    """
    if record is None:
        return
    info = docker_host.image_info(recipe.recorded_ref)
    differences = base_identity_drift(record, info.id, info.repo_digests)
    if differences:
        environments = actual_environments(recipe)
        if _rebuilt_alike(recipe, record, environments):
            console.stderr.print(
                f"[yellow]note:[/] {recipe.recorded_ref} is image {info.id}, the record has "
                f"{record.image_id}; no digest pins it and its Python environments are the "
                "recorded ones (a local base built again): building"
            )
            return
        # the recorded id, so the diff holds distributions only: the id is in ``differences``
        actual = BaseRecord(record.image, record.image_id, None, environments)
        raise drift_failure(recipe, differences, base_changes(record, actual), front)


def _rebuilt_alike(
    recipe: Recipe, record: BaseRecord, environments: tuple[Environment, ...]
) -> bool:
    """A local base made again (the offline Debian base on another machine, a prelude built
    again): no repository digest recorded (nor pinned, but a prelude's pin is its FROM's), and
    every interpreter holds exactly the recorded distributions (names, versions, locations and
    file digests)."""
    if record.repo_digest or (recipe.base_digest and recipe.base_stage is None):
        return False
    return _distributions(record.environments) == _distributions(environments)


def _distributions(envs: tuple[Environment, ...]) -> list[tuple[str, object]]:
    return [
        (
            env.interpreter,
            sorted((d.name, d.version, d.location, d.digest) for d in env.distributions),
        )
        for env in envs
    ]


def actual_environments(recipe: Recipe) -> tuple[Environment, ...]:
    """The snapshot of every recipe interpreter in the base as it is now, in recipe order."""
    found = snapshot_image(ImageTarget(recipe.recorded_ref, recipe.interpreters))
    by_path = {item.interpreter: item.environment for item in found}
    return tuple(
        dataclasses.replace(by_path[path], interpreter=path)
        for path in recipe.interpreters
        if path in by_path
    )
