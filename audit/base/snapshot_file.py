"""A base record from a snapshot taken elsewhere: ``lock --record-base --from-snapshot FILE``.

FILE is what the stdlib snapshot script (``audit/inimage/snapshot.py``) printed on the machine
that has the base image, one sealed document per interpreter, one per line::

    docker run --rm -i --network none --entrypoint /usr/bin/python3 IMAGE - < snapshot.py

Invariant: the record holds exactly the recipe's interpreters, in recipe order, each as the
file's sealed snapshot saw it (the same environments ``--record-base`` takes in the image), so
the two ways of recording one image give the same snapshot digest; a snapshot of another
platform than the recipe's is refused (exit 2, naming both). Pure: bytes in, record out.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from audit.errors import UsageError
from audit.history.snapshot import Environment, parse_snapshot
from audit.lock.files import BaseRecord
from audit.lock.trust import SNAPSHOT_SOURCE, digest_part, platform_refusal
from audit.recipe.model import Recipe

IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
REPO_DIGEST = re.compile(r"(?:[^@\s]+@)?sha256:[0-9a-f]{64}")
INSPECT = "docker image inspect --format '{{.Id}} {{.RepoDigests}}' IMAGE"


def parse_documents(data: bytes, where: str) -> tuple[Environment, ...]:
    """Every environment of every sealed snapshot document in ``data`` (one per line)."""
    lines = [line for line in data.split(b"\n") if line.strip()]
    if not lines:
        raise UsageError(f"{where}: empty", "take the snapshot with the command in the README")
    found: list[Environment] = []
    for number, line in enumerate(lines, start=1):
        found += parse_snapshot(line, f"{where}: document {number}")
    return tuple(found)


def match_interpreters(
    recipe: Recipe, environments: Sequence[Environment], where: str
) -> tuple[Environment, ...]:
    """The recipe's interpreters in order, each from the document that names it.

    A lone document stands for a lone recipe interpreter whatever path it ran as (``python3``
    on the PATH may be ``/opt/venv/bin/python3`` for a recipe naming ``/opt/venv/bin/python``).
    """
    by_path = one_per_interpreter(environments, where)
    if len(environments) == 1 and len(recipe.interpreters) == 1:
        by_path = {recipe.interpreters[0]: environments[0]}
    missing = [path for path in recipe.interpreters if path not in by_path]
    if missing:
        raise UsageError(
            f"{where}: no snapshot of {', '.join(missing)} (found: {', '.join(by_path)})",
            "take one per recipe interpreter with --entrypoint set to its path (README)",
        )
    return tuple(
        dataclasses.replace(by_path[path], interpreter=path) for path in recipe.interpreters
    )


def one_per_interpreter(environments: Sequence[Environment], where: str) -> dict[str, Environment]:
    """Interpreter path -> its environment; the same snapshot twice counts once.

    Two different snapshots of one path (a bookworm and a bullseye document in one file) are
    refused: recording either would put one image's packages under the other's identity.
    """
    found: dict[str, Environment] = {}
    for environment in environments:
        earlier = found.setdefault(environment.interpreter, environment)
        if earlier != environment:
            raise UsageError(
                f"{where}: two different snapshots of {environment.interpreter}: "
                f"{_summary(earlier)} and {_summary(environment)}",
                "keep one document per interpreter, taken in the image the recipe names",
            )
    return found


def _summary(environment: Environment) -> str:
    """``Python 3.11.2 with 12 distributions``: enough to tell two snapshots apart."""
    count = len(environment.distributions)
    return f"Python {environment.python} with {count} distribution{'s' * (count != 1)}"


def checked_identity(
    recipe: Recipe, image_id: str | None, repo_digest: str | None
) -> tuple[str, str | None]:
    """(image id or "", repository digest or None) as the user gave them, checked.

    The recipe's ``base_digest`` stands in for a missing ``--repo-digest`` (as ``--record-base``
    records it) and must agree with a given one; one of the two identities is required, or the
    build could not verify the image against the record.
    """
    if image_id is not None and not IMAGE_ID.fullmatch(image_id):
        raise UsageError(
            f"--image-id {image_id!r}: not sha256:<64 hex>", f"copy it from: {INSPECT}"
        )
    if repo_digest is not None and not REPO_DIGEST.fullmatch(repo_digest):
        raise UsageError(
            f"--repo-digest {repo_digest!r}: not [repository@]sha256:<64 hex>",
            f"copy it from: {INSPECT}",
        )
    pinned = recipe.base_digest
    if pinned and repo_digest and digest_part(repo_digest) != pinned:
        raise UsageError(
            f"--repo-digest {repo_digest}: {recipe.source.as_posix()} pins {pinned}",
            "snapshot the image the recipe pins, or change base_digest",
        )
    digest = repo_digest or pinned
    if image_id is None and digest is None:
        raise UsageError(
            "--from-snapshot needs the image's identity: --image-id and/or --repo-digest",
            f"on the machine that has the image: {INSPECT}",
        )
    return image_id or "", digest


def record_from_snapshot(
    recipe: Recipe,
    data: bytes,
    where: str,
    image_id: str | None,
    repo_digest: str | None,
) -> BaseRecord:
    """The base record ``--record-base`` would write, from a snapshot file and given identity."""
    identity, digest = checked_identity(recipe, image_id, repo_digest)
    environments = match_interpreters(recipe, parse_documents(data, where), where)
    record = BaseRecord(recipe.base, identity, digest, environments, SNAPSHOT_SOURCE)
    refusal = platform_refusal(recipe, record, f"--from-snapshot {where}")
    if refusal is not None:
        raise refusal
    return record
