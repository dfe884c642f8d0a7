"""Facts a build's labels record, gathered from the checkout: git, digests, the base record.

Invariants: nothing here returns a secret (remotes pass :func:`public_source_url`); the same
commit and the same ``SOURCE_DATE_EPOCH`` give the same :class:`Provenance`, so two builds of
one commit carry identical labels; a checkout that is not a git repository gives empty
``source`` and ``revision`` rather than an error.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from audit.project.gitsource import head_commit, is_dirty, public_remote
from audit.build.plan import Provenance, created_time
from audit.lock.files import base_relpath, read_base
from audit.recipe.model import Recipe
from audit.project.sources import DirectorySource

TEMPLATES = "templates"


def tree_digest(folder: Path) -> str:
    """sha256 over every regular file's relative path and bytes, in sorted order.

    A symbolic link counts by where it points (never followed: a link to ``/dev/zero`` or a
    file outside the project is not read); FIFOs, devices and sockets are left out.
    """
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            content = b"link:" + str(path.readlink()).encode()
        elif stat.S_ISREG(path.lstat().st_mode):
            content = path.read_bytes()
        else:
            continue
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(content).digest())
    return f"sha256:{digest.hexdigest()}"


def built_paths(recipe: Recipe) -> tuple[str, ...]:
    """The project paths a build of ``recipe`` reads: its folder, its locks, the templates."""
    return (recipe.directory.as_posix(), f"locks/{recipe.name}", TEMPLATES)


def _base_facts(root: Path, recipe: Recipe) -> tuple[str, str]:
    """(image id, manifest digest) from ``locks/<image>/base.json``; empty when unrecorded."""
    source = DirectorySource(root)
    relpath = base_relpath(recipe)
    if not source.exists(relpath):
        return "", ""
    record = read_base(source, relpath)
    digest = (record.repo_digest or "").rpartition("@")[2]
    return record.image_id, digest


def gather(
    root: Path,
    recipe: Recipe,
    *,
    environ: Mapping[str, str] | None = None,
    now: _dt.datetime | None = None,
) -> Provenance:
    """The provenance of building ``recipe`` from the checkout at ``root`` now."""
    revision = head_commit(root)
    base_id, base_digest = _base_facts(root, recipe)
    return Provenance(
        source=public_remote(root),
        revision=revision,
        created=created_time(os.environ if environ is None else environ, now or _now()),
        recipe_digest=tree_digest(root / recipe.directory),
        locks_digest=tree_digest(root / "locks" / recipe.name),
        dirty=bool(revision) and is_dirty(root, built_paths(recipe)),
        base_image_id=base_id,
        base_digest=base_digest,
    )


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)
