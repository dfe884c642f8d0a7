"""Audit existing images: snapshot every Python environment inside, apply the policy, diff two.

Containers run with no network, a read-only root file system and the entrypoint overridden;
the snapshot script is bind-mounted read-only. One container finds the interpreters (those the
caller names plus the usual places: system Pythons, /usr/local, /opt/*/bin, conda, venvs), one
more snapshots them all. Interpreters that are the same environment (``python3`` and
``python3.11``, ``venv/bin/python`` and ``venv/bin/python3``) are audited once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import PurePosixPath

from audit.docker import host as docker_host
from audit.docker.container import BindMount
from audit.errors import EnvironmentProblem, UsageError
from audit.history.snapshot import SCRIPT_PATH, Environment, parse_snapshot
from audit.history.system import System
from audit.host import console
from audit.policy.findings import WARNING, Finding
from audit.policy.model import Policy
from audit.policy.system_rules import evaluate_system
from audit.policy.verdict import check_state, evaluate, evaluate_shadowed
from audit.project.sources import Source
from audit.recipe.model import Recipe
from audit.recipe.parse import load_recipe
from audit.report.findings import Report, Section

MOUNT_POINT = "/layer-audit"
MARKER = "@@layer-audit"

# Where Pythons live in the images this tool meets: distro and /usr/local builds, venvs and
# conda trees under /opt, the root user's venvs, and the usual application folders.
USUAL_PLACES = (
    "/usr/bin/python3*",
    "/usr/local/bin/python3*",
    "/opt/*/bin/python",
    "/opt/*/bin/python3",
    "/opt/*/*/bin/python",
    "/opt/conda/bin/python",
    "/root/.venv/bin/python",
    "/root/venv/bin/python",
    "/venv/bin/python",
    "/app/.venv/bin/python",
    "/workspace/.venv/bin/python",
    "/usr/local/lib/*/bin/python",
)
# python, python3, python3.11; not python3-config or python3.11m-config.
_INTERPRETER_NAME = re.compile(r"python(3(\.\d+)?)?")

# Prints each named path and each match of the usual places that is an executable file; the
# shell expands the globs (unmatched ones stay literal and fail the test).
PROBE = (
    'for p in "$@" ' + " ".join(USUAL_PLACES) + "; do "
    'if [ -f "$p" ] && [ -x "$p" ]; then echo "$p"; fi; done'
)
SNAPSHOT = (
    'for p in "$@"; do echo "' + MARKER + ' $p"; '
    '"$p" ' + MOUNT_POINT + "/" + SCRIPT_PATH.name + ' || echo "' + MARKER + '-failed $p"; done'
)


@dataclass(frozen=True)
class ImageTarget:
    """An image reference and the interpreters named for it (besides the usual places)."""

    ref: str
    interpreters: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageEnvironment:
    """One environment found in an image, under the interpreter path that found it first."""

    interpreter: str
    environment: Environment


def audit_images(
    image: str,
    against: str | None,
    *,
    recipe: Recipe | None,
    interpreters: Sequence[str],
    today: date,
) -> Report:
    """audit-deps --image: ``image`` alone, or what it changed against ``against``.

    The policy and the interpreters to look at besides the usual places come from ``recipe``
    when one is named (:func:`load_named_recipe`).
    """
    named = (*(recipe.interpreters if recipe else ()), *interpreters)
    policy = recipe.policy if recipe else Policy()
    target = ImageTarget(image, named)
    if against:
        return compare_images(target, ImageTarget(against, named), policy, today=today)
    return audit_image(target, policy, today=today)


def load_named_recipe(source: Source, name: str) -> Recipe:
    """``images/NAME/image.toml`` at ``source`` (``images/NAME`` is accepted too)."""
    image = PurePosixPath(name).name if "/" in name else name
    return load_recipe(source, image)


def audit_image(target: ImageTarget, policy: Policy, *, today: date) -> Report:
    """Every environment in the image checked against the policy's state and shadowing rules."""
    snapshots = snapshot_image(target)
    sections = [
        Section(
            f"{target.ref} {found.interpreter}",
            tuple(_state_findings(target, found, policy, today)),
        )
        for found in snapshots
    ]
    system = _system_of(snapshots)
    if system is not None:
        where = f"{target.ref} {SYSTEM_TITLE}"
        found = evaluate_system(None, system, policy, where=where, today=today)
        sections.append(Section(where, tuple(found)))
    return Report(f"audit-deps --image {target.ref}", tuple(sections))


SYSTEM_TITLE = "below Python (OS packages, native libraries)"


def _system_of(snapshots: Sequence[ImageEnvironment]) -> System | None:
    """The image's OS packages and native libraries (every interpreter records the same)."""
    return next((s.environment.system for s in snapshots if s.environment.system), None)


def compare_images(
    target: ImageTarget, against: ImageTarget, policy: Policy, *, today: date
) -> Report:
    """What ``target`` changed against ``against``, per interpreter, with the policy applied."""
    new_snapshots, old_snapshots = snapshot_image(target), snapshot_image(against)
    after = {found.interpreter: found.environment for found in new_snapshots}
    before = {found.interpreter: found.environment for found in old_snapshots}
    title = f"{against.ref} -> {target.ref}"
    sections = [
        compare_section(title, path, before.get(path), after.get(path), policy=policy, today=today)
        for path in _union(before, after)
    ]
    old_system, new_system = _system_of(old_snapshots), _system_of(new_snapshots)
    if new_system is not None:
        where = f"{title} {SYSTEM_TITLE}"
        found = evaluate_system(old_system, new_system, policy, where=where, today=today)
        sections.append(Section(where, tuple(found)))
    return Report(f"audit-deps --image {target.ref} --against {against.ref}", tuple(sections))


def snapshot_image(target: ImageTarget) -> list[ImageEnvironment]:
    """Snapshot every interpreter found in the image, one environment each."""
    interpreters = discover_interpreters(target)
    if not interpreters:
        raise EnvironmentProblem(
            f"{target.ref}: no Python interpreter found in the usual places",
            "name one with --interpreter PATH",
        )
    output = _run(target.ref, ["sh", "-c", SNAPSHOT, "sh", *interpreters])
    return unique_environments(parse_snapshots(output, target))


def discover_interpreters(target: ImageTarget) -> list[str]:
    """Named interpreters first, then executables in the usual places (one probe container)."""
    found = _run(target.ref, ["sh", "-c", PROBE, "sh", *target.interpreters]).splitlines()
    missing = [path for path in target.interpreters if path not in found]
    if missing:
        raise UsageError(
            f"{target.ref}: no executable {', '.join(missing)} in the image",
            "check --interpreter (or the recipe's interpreters) against the image",
        )
    return select_interpreters(target.interpreters, found)


def select_interpreters(named: Sequence[str], found: Sequence[str]) -> list[str]:
    """Named interpreters (all, even if the probe missed them) then found Pythons, no repeats."""
    chosen = list(dict.fromkeys(named))
    for path in found:
        name = PurePosixPath(path).name
        if _INTERPRETER_NAME.fullmatch(name) and path not in chosen:
            chosen.append(path)
    return chosen


def parse_snapshots(output: str, target: ImageTarget) -> list[ImageEnvironment]:
    """Split the snapshot container's output into one snapshot per interpreter and parse each."""
    found: list[ImageEnvironment] = []
    for interpreter, body, ok in _chunks(output):
        if not ok:
            _interpreter_failed(target, interpreter)
            continue
        where = f"{target.ref}:{interpreter}"
        for environment in parse_snapshot(body.encode(), where):
            found.append(ImageEnvironment(interpreter, environment))
    return found


def unique_environments(found: Sequence[ImageEnvironment]) -> list[ImageEnvironment]:
    """Drop interpreters that see exactly the environment an earlier one saw."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    unique: list[ImageEnvironment] = []
    for item in found:
        key = (item.environment.python, item.environment.paths)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def _chunks(output: str) -> list[tuple[str, str, bool]]:
    chunks: list[tuple[str, str, bool]] = []
    for line in output.splitlines(keepends=True):
        if line.startswith(MARKER + "-failed "):
            chunks[-1] = (chunks[-1][0], "", False)
        elif line.startswith(MARKER + " "):
            chunks.append((line[len(MARKER) + 1 :].rstrip("\n"), "", True))
        elif chunks:
            interpreter, body, ok = chunks[-1]
            chunks[-1] = (interpreter, body + line, ok)
    return chunks


def _interpreter_failed(target: ImageTarget, interpreter: str) -> None:
    if interpreter in target.interpreters:
        raise EnvironmentProblem(
            f"{target.ref}: the snapshot script failed under {interpreter}",
            "check the path; the script needs Python 3.9 or newer",
        )
    console.stderr.print(f"skipped {interpreter}: not a Python 3.9+ the snapshot script runs on")


def _state_findings(
    target: ImageTarget, found: ImageEnvironment, policy: Policy, today: date
) -> list[Finding]:
    where = f"{target.ref} {found.interpreter}"
    environment = found.environment
    findings = check_state(environment.winners(), policy, where=where, markers=environment.markers)
    return findings + evaluate_shadowed(None, environment, policy, where=where, today=today)


def compare_section(
    title: str,
    path: str,
    before: Environment | None,
    after: Environment | None,
    *,
    policy: Policy,
    today: date,
) -> Section:
    """One interpreter's changes from the old image to the new one: the changes of the winning
    copies, new state violations, and copies the new image shadows that the old did not."""
    where = f"{title} {path}"
    if before is None or after is None:
        missing = "the new image" if after is None else "the old image"
        message = f"{path} is not a Python environment in {missing}"
        return Section(where, (Finding("interpreter", WARNING, path, None, None, message, where),))
    findings = evaluate(before.winners(), after.winners(), policy, where=where, today=today)
    findings += evaluate_shadowed(before, after, policy, where=where, today=today)
    return Section(where, tuple(findings))


def _union(before: Mapping[str, Environment], after: Mapping[str, Environment]) -> list[str]:
    return list(dict.fromkeys([*after, *before]))


def _run(ref: str, argv: list[str]) -> str:
    mount = BindMount(SCRIPT_PATH.parent, MOUNT_POINT, read_only=True)
    return docker_host.run_in_image(ref, argv, mounts=(mount,), network="none")
