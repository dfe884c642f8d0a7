"""Snapshot every Python environment of an image by running the snapshot script in it.

The base record (``lock --record-base``) and the check before layer 1 take a base image's
snapshot this way, since it must equal what the script records in the build. Auditing an image
that exists is the layer walk's (:mod:`audit.gate.images`), which runs nothing.

Containers run with no network, a read-only root file system and the entrypoint overridden;
the snapshot script is bind-mounted read-only. One container finds the interpreters (those the
caller names plus the usual places: system Pythons, /usr/local, /opt/*/bin, conda, venvs), one
more snapshots them all. Interpreters that are the same environment (``python3`` and
``python3.11``, ``venv/bin/python`` and ``venv/bin/python3``) are audited once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from audit.docker import host as docker_host
from audit.docker.container import BindMount
from audit.errors import EnvironmentProblem, UsageError
from audit.history.snapshot import SCRIPT_PATH, Environment, parse_snapshot
from audit.host import console

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


def _run(ref: str, argv: list[str]) -> str:
    mount = BindMount(SCRIPT_PATH.parent, MOUNT_POINT, read_only=True)
    return docker_host.run_in_image(ref, argv, mounts=(mount,), network="none")
