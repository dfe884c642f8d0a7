"""The Docker host: which docker client builds, and the daemon behind it (via the docker SDK).

Builds go through a docker *client* program (``audit.host.process.run``), because BuildKit
secrets, cache mounts and ``--platform`` live there; everything else (is the daemon up,
inspect, run a throwaway container) goes through the docker SDK; the connection and the one
:class:`audit.docker.container.Container` live in :mod:`audit.docker.container`.

Engine choice: one per command, for the client programs (``DOCKER_HOST`` in
:func:`client_env`) and the SDK alike: ``--docker-host``, ``$DOCKER_HOST`` or the active docker
context (:mod:`audit.docker.endpoint`).

Client choice: ``--docker PATH`` or ``$LAYER_AUDIT_DOCKER`` when given, else the first of
``docker`` on PATH and ``/usr/bin/docker`` that has a working ``buildx`` plugin, else the first
older than 23 (those still build with BuildKit under ``DOCKER_BUILDKIT=1``; from 23 on, a
client without buildx refuses BuildKit builds).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Unpack

from packaging.version import InvalidVersion, Version

from audit.build.plan import DockerClient
from audit.docker import endpoint as docker_endpoint
from audit.docker.container import (
    BindMount,
    Container,
    ContainerResult,
    ContainerSettings,
    daemon,
)
from audit.docker.container import missing_image as _missing_image
from audit.errors import CommandFailed, EnvironmentProblem
from audit.host import process

__all__ = [  # BindMount, ContainerResult and daemon live in audit.docker.container
    "DOCKER_ENV",
    "INSTALL_HINT",
    "BindMount",
    "ContainerOptions",
    "ContainerResult",
    "ImageInfo",
    "client_env",
    "daemon",
    "detect_client",
    "image_exists",
    "image_info",
    "remove_image",
    "run_in_image",
    "run_in_image_result",
]

DOCKER_ENV = "LAYER_AUDIT_DOCKER"
CANDIDATES = ("docker", "/usr/bin/docker")
LAST_CLIENT_WITHOUT_BUILDX = 22
INSTALL_HINT = (
    "install the buildx plugin (apt-get install docker-buildx, or docker-buildx-plugin), or a "
    "docker client older than 23 (apt-get install docker.io on Debian 12 gives 20.10 at "
    f"/usr/bin/docker), then pass --docker PATH or set {DOCKER_ENV}"
)


@dataclass(frozen=True)
class ImageInfo:
    """What the daemon knows about one local image."""

    id: str
    repo_digests: tuple[str, ...]
    architecture: str
    os: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Probe:
    path: str
    version: str
    has_buildx: bool


# ----------------------------------------------------------------------------- client choice


def _locate(programs: Sequence[str]) -> list[str]:
    """Absolute paths of the programs that exist, each real file once."""
    found: dict[str, str] = {}
    for program in programs:
        try:
            path = process.find_program(program)
        except CommandFailed:
            continue
        found.setdefault(os.path.realpath(path), path)
    return list(found.values())


def _probe(path: str) -> _Probe:
    """Ask one docker program for its version and whether ``buildx`` works."""
    # The client prints its own version even when the daemon is down (exit code 1 then).
    shown = process.run([path, "version", "--format", "{{.Client.Version}}"], check=False)
    buildx = process.run([path, "buildx", "version"], check=False)
    return _Probe(path, shown.stdout.strip(), buildx.returncode == 0)


def _major(version: str) -> int | None:
    try:
        return Version(version).major
    except InvalidVersion:
        return None


def _legacy_client(probe: _Probe) -> DockerClient | None:
    """A client without buildx that still builds with BuildKit (``DOCKER_BUILDKIT=1``)."""
    major = _major(probe.version)
    if major is not None and major <= LAST_CLIENT_WITHOUT_BUILDX:
        return DockerClient(probe.path, "buildkit-env", probe.version)
    return None


def _candidates(preferred: str | None) -> list[str]:
    chosen = preferred or os.environ.get(DOCKER_ENV)
    return [chosen] if chosen else list(CANDIDATES)


def _refusal(probes: Sequence[_Probe], tried: Sequence[str]) -> EnvironmentProblem:
    if not probes:
        return EnvironmentProblem(
            f"no docker client found (tried: {', '.join(tried)})", INSTALL_HINT
        )
    seen = "; ".join(f"{p.path} {p.version or '(version unknown)'} without buildx" for p in probes)
    return EnvironmentProblem(f"no docker client can run BuildKit builds: {seen}", INSTALL_HINT)


def detect_client(preferred: str | None = None) -> DockerClient:
    """The docker client to build with; :class:`EnvironmentProblem` (exit 3) when none fits."""
    tried = _candidates(preferred)
    probes: list[_Probe] = []
    for path in _locate(tried):  # the first with buildx wins: probe no further
        probe = _probe(path)
        if probe.has_buildx:
            return DockerClient(probe.path, "buildx", probe.version)
        probes.append(probe)
    for probe in probes:
        if client := _legacy_client(probe):
            return client
    raise _refusal(probes, tried)


def client_env(client: DockerClient, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment to run ``client`` with (``base`` defaults to this process's).

    ``DOCKER_HOST`` names the engine every SDK call uses too (``--docker-host``,
    ``$DOCKER_HOST`` or the active context: :mod:`audit.docker.endpoint`).
    """
    env = docker_endpoint.client_environment(os.environ if base is None else base)
    env["DOCKER_BUILDKIT"] = "1"
    env.setdefault("BUILDKIT_PROGRESS", "plain")
    return env


# ----------------------------------------------------------------------------- local images


def image_exists(ref: str) -> bool:
    """True when the local image store has ``ref`` (a tag, digest or id)."""
    import docker

    try:
        daemon().images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def image_info(ref: str) -> ImageInfo:
    """Inspect a local image; exit 3 naming the image when it is missing."""
    import docker

    try:
        attrs = daemon().images.get(ref).attrs
    except docker.errors.ImageNotFound as exc:
        raise _missing_image(ref) from exc
    config = attrs.get("Config") or {}
    return ImageInfo(
        id=attrs["Id"],
        repo_digests=tuple(attrs.get("RepoDigests") or ()),
        architecture=attrs.get("Architecture", ""),
        os=attrs.get("Os", ""),
        labels=dict(config.get("Labels") or {}),
    )


def remove_image(ref: str) -> None:
    """Remove a local image tag (and its layers when nothing else uses them); absent is fine."""
    import docker

    try:
        daemon().images.remove(ref, force=True, noprune=False)
    except docker.errors.ImageNotFound:
        return


# ----------------------------------------------------------------------------- throwaway runs


class ContainerOptions(ContainerSettings, total=False):
    """The keyword options of :func:`run_in_image_result`: a container's settings (see
    :class:`audit.docker.container.ContainerSettings` for them and their defaults) and
    ``timeout``, seconds before the container is killed [no limit]."""

    timeout: float | None


def run_in_image_result(
    ref: str,
    argv: Sequence[str],
    *,
    timeout: float | None = None,
    **settings: Unpack[ContainerSettings],
) -> ContainerResult:
    """Run ``argv`` in a throwaway :class:`Container` of ``ref``; it is always removed.

    No network unless ``network`` says otherwise, a read-only root with a small ``/tmp``, the
    entrypoint overridden. For callers that interpret a failure themselves (a resolver's
    conflict message); :func:`run_in_image` is the usual entry point.
    """
    with Container(ref, argv, **settings) as container:
        return container.run(timeout)


def run_in_image(ref: str, argv: Sequence[str], **options: Unpack[ContainerOptions]) -> str:
    """Run ``argv`` in a throwaway container of ``ref`` and return its stdout.

    Takes :func:`run_in_image_result`'s options; a non-zero exit raises
    :class:`CommandFailed` (exit 3) carrying the stderr tail.
    """
    result = run_in_image_result(ref, argv, **options)
    if result.exit_code != 0:
        raise CommandFailed(
            f"{ref}: {' '.join(argv)} exited with code {result.exit_code}",
            "read the container's output below",
            returncode=result.exit_code,
            output=(result.stderr or result.stdout)[-process.OUTPUT_TAIL :],
        )
    return result.stdout
