"""What the build trusts before layer 1, decided without running anything.

Three questions, each answered from data the caller read:

- :func:`base_record_mismatch`: does ``locks/<image>/base.json`` still describe the base the
  recipe asks for (``base``, ``base_digest``, ``platform``, ``interpreters``)? A record of
  another base makes the record and every lock stale. ``lock --check``, audit-deps and the gate
  all see it through :func:`audit.lock.plan.survey_locks`, the build through the same survey.
- :func:`stale_locks_failure`: are the locks the build installs all fresh? The lines say what
  ``lock --check`` says, word for word.
- :func:`base_identity_drift`: is the base image the daemon has now the one ``base.json``
  recorded (image id and repository digest)? The engine inspects the image, this decides;
  :func:`drift_failure` is the refusal, with the recorded -> actual snapshot diff.

And one answer after the fact: :func:`externally_managed_failure`, when pip refused a PEP 668
interpreter (``externally-managed-environment``), names the recipe setting that allows it.

Invariant: every function here is pure; errors are :mod:`audit.errors` classes carrying
the exit code of the contract (1 for stale or drifted inputs, 2 for a record that cannot be
checked), and none of them moves a tag or writes a file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from audit.errors import EXIT_BAD_INPUT, EXIT_VIOLATION, BuildFailed, LockError, SnapshotError
from audit.history.snapshot import environment_platform
from audit.lock.files import BaseRecord, base_relpath
from audit.policy.findings import INFO, Finding
from audit.project.frontdoor import FrontDoor
from audit.recipe.model import Recipe, Step


class LockState(Protocol):
    """What :class:`audit.lock.plan.LockState` holds (that module imports this one)."""

    @property
    def step(self) -> Step: ...
    @property
    def relpath(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str: ...


SNAPSHOT_SOURCE = "snapshot-file"
REPLICA_SOURCE = "replica"
REPLICA_LABEL = "io.layer-audit.replica"  # set on images ``base-image --replica`` makes
# on a replica: the pins no index carried (``name==version``, comma-separated), stand-ins whose
# metadata came from --metadata-from or is empty; ``lock --record-base`` copies them to base.json
REPLICA_STANDINS_LABEL = f"{REPLICA_LABEL}.standins"
SOURCE_NAMES = {
    None: "snapshot of the image",
    SNAPSHOT_SOURCE: "snapshot file taken elsewhere",
    REPLICA_SOURCE: "replica: metadata-only stand-ins, dry builds",
}


def base_source(labels: Mapping[str, str]) -> str | None:
    """The ``source`` a base record of an image with ``labels`` gets: ``"replica"`` for a
    replica, None (observed in the image itself) otherwise."""
    return REPLICA_SOURCE if labels.get(REPLICA_LABEL) == "true" else None


def source_name(source: str | None) -> str:
    """How reports name where a base record came from."""
    return SOURCE_NAMES.get(source, source or SOURCE_NAMES[None])


def replica_standins(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The stand-ins a replica's labels name (``name==version``, sorted); () when none."""
    text = labels.get(REPLICA_STANDINS_LABEL, "") if base_source(labels) else ""
    return tuple(sorted(pin for pin in text.split(",") if pin))


BASE_SOURCE_RULE = "base-source"


def source_finding(image: str, base_ref: str, record: BaseRecord | None) -> Finding | None:
    """The info every report shows for a base recorded elsewhere than in the image itself (a
    snapshot file, a replica with its stand-ins); None for a base snapshotted in the image."""
    if record is None or record.source is None:
        return None
    message = f"the base {base_ref} is recorded from a {describe_source(record)}"
    where = f"{image} base ({base_ref})"
    return Finding(BASE_SOURCE_RULE, INFO, "", None, None, message, where).located(image)


def describe_source(record: BaseRecord) -> str:
    """Where a base record came from, as every report says it: the route and, for a replica,
    the stand-ins for what no reachable index carries (``replica: …; stand-ins: vllm==…``)."""
    named = source_name(record.source)
    if not record.standins:
        return named
    return f"{named}; stand-ins (on no reachable index): {', '.join(record.standins)}"


EXTERNALLY_MANAGED = "externally-managed-environment"  # pip's error name (PEP 668)


def record_hint(image: str, front: FrontDoor) -> str:
    """The command that re-records a base record (and the one for a base that lives elsewhere)."""
    return (
        f"re-record it: {front.command('lock', image + ' --record-base')} (or, without the "
        "image here, --record-base --from-snapshot FILE: see the README), then "
        f"{front.command('lock', image)}"
    )


def digest_part(reference: str) -> str:
    """``repo@sha256:…`` or ``sha256:…`` -> ``sha256:…``."""
    return reference.rpartition("@")[2]


def recorded_platform(record: BaseRecord) -> str | None:
    """``linux/<arch>`` the record's environments were recorded on (each snapshot's own
    ``platform``, else its markers); None when they do not say (hand-made records) or differ."""
    platforms = {environment_platform(environment) for environment in record.environments}
    return platforms.pop() if len(platforms) == 1 and "" not in platforms else None


def platform_refusal(recipe: Recipe, record: BaseRecord, what: str) -> SnapshotError | None:
    """Exit 2 naming both platforms when ``record`` (``what``: where its snapshot came from)
    was taken on another platform than the recipe targets; None when they agree or the
    snapshot does not say. Checked before a record is written: nothing is replaced."""
    platform = recorded_platform(record)
    if platform is None or platform == recipe.platform:
        return None
    machines = sorted({env.markers.get("platform_machine", "?") for env in record.environments})
    return SnapshotError(
        f"{what} is a snapshot of {platform} (platform_machine {', '.join(machines)}), but "
        f"{recipe.source.as_posix()} targets {recipe.platform} (image.platform): its locks "
        "would pin wheels for the wrong machine",
        f"take the snapshot in the {recipe.platform} image (docker run --platform "
        f"{recipe.platform} …), or set platform under [image] to {platform} if that is the "
        "image's",
    )


def base_record_mismatch(recipe: Recipe, record: BaseRecord, front: FrontDoor) -> str | None:
    """Why ``record`` no longer describes the recipe's base, or None while it does.

    Checked: the image reference (``base``), the digest pin (``base_digest``, when the recipe
    has one), the platform (from the snapshot's markers: old records stay readable) and the
    interpreters, in recipe order. The reason ends with what to run.
    """
    problems = _mismatches(recipe, record)
    if not problems:
        return None
    found = "; ".join(problems)
    command = front.command("lock", f"{recipe.name} --record-base")
    return f"{base_relpath(recipe)} is stale: {found} ({command})"


def _mismatches(recipe: Recipe, record: BaseRecord) -> list[str]:
    problems = []
    if record.image != recipe.recorded_base:
        problems.append(
            f"it records base {record.image}, the recipe asks for {recipe.recorded_base}"
        )
    pinned = recipe.base_digest if recipe.base_stage is None else None  # a prelude's is its FROM's
    if pinned and digest_part(record.repo_digest or "") != pinned:
        recorded = digest_part(record.repo_digest) if record.repo_digest else "no digest"
        problems.append(f"it records {recorded}, the recipe pins {pinned}")
    platform = recorded_platform(record)
    if platform is not None and platform != recipe.platform:
        problems.append(f"it was recorded on {platform}, the recipe targets {recipe.platform}")
    interpreters = tuple(environment.interpreter for environment in record.environments)
    if interpreters != recipe.interpreters:
        problems.append(
            f"it records interpreters {', '.join(interpreters) or 'none'}, the recipe names "
            f"{', '.join(recipe.interpreters)}"
        )
    return problems


def check_line(state: LockState) -> str:
    """One stale or missing lock as ``lock --check`` prints it."""
    return f"{state.status}: {state.relpath} ({state.step.label}): {state.reason}"


def stale_locks_failure(
    recipe: Recipe, states: Sequence[LockState], front: FrontDoor
) -> BuildFailed | None:
    """The build's refusal when a lock it would install is stale or missing (exit 1)."""
    bad = [state for state in states if state.status != "fresh"]
    if not bad:
        return None
    lines = "\n".join(f"  {check_line(state)}" for state in bad)
    stale_base = any(f"{base_relpath(recipe)} is stale" in state.reason for state in bad)
    command = front.command("lock", recipe.name + (" --record-base" if stale_base else ""))
    return BuildFailed(
        f"{recipe.name}: {len(bad)} of {len(states)} locks are not fresh; the build would not "
        f"install what the recipe asks for:\n{lines}",
        f"{'re-record the base and re-lock' if stale_base else 'compile them'}: {command} "
        "(lock --check says the same); no layer was built and no tag was moved",
        exit_code=EXIT_VIOLATION,
    )


def base_identity_drift(
    record: BaseRecord, image_id: str, repo_digests: Sequence[str]
) -> list[str]:
    """How the image the daemon has differs from the record: [] when it is the recorded one.

    The image id must match when recorded; a recorded repository digest must be among the
    image's. A record with neither cannot vouch for any image: :class:`LockError` (exit 2).
    """
    if not record.image_id and not record.repo_digest:
        raise LockError(
            f"base record of {record.image}: names neither an image id nor a repository digest",
            "record it again with --image-id or --repo-digest (see the README)",
        )
    found = []
    if record.image_id and record.image_id != image_id:
        found.append(f"image id {record.image_id} recorded, {image_id} now")
    digests = {digest_part(reference) for reference in repo_digests}
    if record.repo_digest and digest_part(record.repo_digest) not in digests:
        now = ", ".join(sorted(digests)) or "none"
        found.append(f"repository digest {digest_part(record.repo_digest)} recorded, {now} now")
    return found


def drift_failure(
    recipe: Recipe, differences: Sequence[str], changes: Sequence[str], front: FrontDoor
) -> BuildFailed:
    """ "base drifted" (exit 1): what differs, the recorded -> actual snapshot diff, the fix."""
    recorded = base_relpath(recipe)
    lines = [
        f"{recipe.name}: base drifted: {recipe.recorded_ref} is not the image {recorded} recorded"
    ]
    lines += [f"  {difference}" for difference in differences]
    lines.append("  recorded -> actual:")
    lines += [f"    {change}" for change in changes] or ["    (same distributions)"]
    return BuildFailed(
        "\n".join(lines),
        "if the new base is intended, re-record it and re-lock: "
        f"{front.command('lock', recipe.name + ' --record-base')}; else point the tag back "
        "(a base_digest pin keeps it); no layer was built and no tag was moved",
        exit_code=EXIT_VIOLATION,
    )


def externally_managed_failure(recipe: Recipe, stage: str) -> BuildFailed:
    """pip refused an externally managed interpreter (PEP 668): bad input (exit 2), and the fix."""
    return BuildFailed(
        f"{recipe.name} {stage}: {recipe.interpreters[0]} in {recipe.base_ref} is externally "
        "managed (PEP 668): pip refuses to install into it (externally-managed-environment)",
        f"set break_system_packages = true under [image] in {recipe.source.as_posix()} (pip "
        "layers then install with PIP_BREAK_SYSTEM_PACKAGES=1), or name a virtual "
        "environment's Python in interpreters; no tag was moved",
        exit_code=EXIT_BAD_INPUT,
    )
