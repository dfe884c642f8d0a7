"""The Docker host: which docker client builds, and the daemon behind it (via the docker SDK).

Builds go through a docker *client* program (``audit.engines.process.run``), because BuildKit
secrets, cache mounts and ``--platform`` live there; everything else (is the daemon up,
inspect, run a throwaway container) goes through the docker SDK.

Client choice: ``--docker PATH`` or ``$LAYER_AUDIT_DOCKER`` when given, else the first of
``docker`` on PATH and ``/usr/bin/docker`` that has a working ``buildx`` plugin, else the first
older than 23 (those still build with BuildKit under ``DOCKER_BUILDKIT=1``; from 23 on, a
client without buildx refuses BuildKit builds).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

from packaging.version import InvalidVersion, Version

from audit.core.errors import CommandFailed, EnvironmentProblem
from audit.engines import process as commands
from audit.plan.base_image import make_command
from audit.plan.build import DockerClient

DOCKER_ENV = "LAYER_AUDIT_DOCKER"
CANDIDATES = ("docker", "/usr/bin/docker")
LAST_CLIENT_WITHOUT_BUILDX = 22
INSTALL_HINT = (
    "install the buildx plugin (apt-get install docker-buildx, or docker-buildx-plugin), or a "
    "docker client older than 23 (apt-get install docker.io on Debian 12 gives 20.10 at "
    f"/usr/bin/docker), then pass --docker PATH or set {DOCKER_ENV}"
)
DAEMON_HINT = (
    "start dockerd (as root: dockerd --iptables=false &, then wait for /var/run/docker.sock), "
    "or point DOCKER_HOST at a running daemon"
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
class BindMount:
    """A host path mounted into a throwaway container (read-only unless said otherwise)."""

    source: Path
    target: str
    read_only: bool = True


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
            path = commands.find_program(program)
        except CommandFailed:
            continue
        found.setdefault(os.path.realpath(path), path)
    return list(found.values())


def _probe(path: str) -> _Probe:
    """Ask one docker program for its version and whether ``buildx`` works."""
    # The client prints its own version even when the daemon is down (exit code 1 then).
    shown = commands.run([path, "version", "--format", "{{.Client.Version}}"], check=False)
    buildx = commands.run([path, "buildx", "version"], check=False)
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


def add_client_option(parser: argparse.ArgumentParser) -> None:
    """The ``--docker PATH`` option of every command that runs a docker client."""
    parser.add_argument(
        "--docker",
        metavar="PATH",
        help=f"the docker client program, a path or a name (default: ${DOCKER_ENV}, else detected)",
    )


def client_env(client: DockerClient, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment to run ``client`` with (``base`` defaults to this process's)."""
    env = dict(os.environ if base is None else base)
    env["DOCKER_BUILDKIT"] = "1"
    env.setdefault("BUILDKIT_PROGRESS", "plain")
    return env


# ----------------------------------------------------------------------------- the daemon


def daemon() -> Any:
    """A docker SDK client for a daemon that answers; exit 3 with a hint when none does."""
    import docker
    import requests

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env()
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise EnvironmentProblem(
            f"the Docker daemon at {where} does not answer: {_no_answer(where, exc)}", DAEMON_HINT
        ) from exc
    return client


def _no_answer(where: str, exc: Exception) -> str:
    """Why the daemon did not answer, in words: the SDK's text nests three exceptions deep."""
    socket = where.removeprefix("unix://")
    if where.startswith("unix://") and not Path(socket).exists():
        return f"no socket at {socket}"
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def image_exists(ref: str) -> bool:
    """True when the local image store has ``ref`` (a tag, digest or id)."""
    import docker

    try:
        daemon().images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def _missing_image(ref: str) -> EnvironmentProblem:
    command = make_command(ref)
    if command:
        hint = f"make it offline from Debian packages: {command}"
    else:
        hint = (
            "pull or load it (docker pull / docker load), or make an offline base image with "
            "python -m audit base-image"
        )
    return EnvironmentProblem(f"image not found in the local Docker image store: {ref}", hint)


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


@dataclass(frozen=True)
class ContainerResult:
    """What a finished throwaway container left: exit code, stdout and stderr."""

    exit_code: int
    stdout: str
    stderr: str


def _mounts(mounts: Sequence[BindMount]) -> list[Any]:
    from docker.types import Mount

    return [
        Mount(m.target, str(Path(m.source).resolve()), type="bind", read_only=m.read_only)
        for m in mounts
    ]


def _run_options(
    argv: Sequence[str], mounts: Sequence[BindMount], network: str, platform: str | None
) -> dict[str, Any]:
    """Entrypoint overridden, read-only root (a small /tmp), no network unless asked for."""
    return {
        "entrypoint": [argv[0]],
        "command": list(argv[1:]),
        "mounts": _mounts(mounts),
        "network_mode": network,
        "platform": platform,
        "read_only": True,
        "tmpfs": {"/tmp": "rw,exec,size=512m"},  # noqa: S108 (a path inside the container)
        "detach": True,
    }


def _wait(container: Any, timeout: float | None, ref: str) -> int:
    import requests

    try:
        status: dict[str, Any] = container.wait(timeout=timeout)
    except requests.exceptions.RequestException as exc:
        container.kill()
        raise EnvironmentProblem(
            f"container from {ref} did not finish within {timeout}s", "raise the timeout"
        ) from exc
    return int(status.get("StatusCode", 1))


def run_in_image_result(
    ref: str,
    argv: Sequence[str],
    *,
    mounts: Sequence[BindMount] = (),
    network: str = "none",
    platform: str | None = None,
    environment: Mapping[str, str] | None = None,
    user: str | None = None,
    workdir: str | None = None,
    timeout: float | None = None,
) -> ContainerResult:
    """Run ``argv`` in a throwaway container of ``ref``; the container is always removed.

    For callers that interpret a failure themselves (a resolver's conflict message);
    :func:`run_in_image` is the usual entry point.
    """
    options = _run_options(argv, mounts, network, platform)
    options |= {"environment": dict(environment or {}), "user": user or "", "working_dir": workdir}
    container = _create(ref, options)
    try:
        _start(container, ref)
        code = _wait(container, timeout, ref)
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        err = container.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    return ContainerResult(code, out, err)


def _create(ref: str, options: Mapping[str, Any]) -> Any:
    """Create, never pull: the SDK's ``containers.run`` would try a registry for a missing
    image, which on an offline machine fails with a bare HTTP 500 instead of naming the image."""
    import docker

    try:
        return daemon().containers.create(ref, **options)
    except docker.errors.ImageNotFound as exc:
        raise _missing_image(ref) from exc
    except docker.errors.APIError as exc:
        raise EnvironmentProblem(
            f"cannot create a container from {ref}: {exc}", "check the Docker daemon: docker info"
        ) from exc


def _start(container: Any, ref: str) -> None:
    import docker

    try:
        container.start()
    except docker.errors.APIError as exc:
        raise EnvironmentProblem(
            f"cannot start a container from {ref}: {exc}",
            "a foreign platform needs qemu registered with binfmt_misc (.ci/setup-machine)",
        ) from exc


class ContainerOptions(TypedDict, total=False):
    """The keyword options of :func:`run_in_image_result` (see its defaults there)."""

    mounts: Sequence[BindMount]
    network: str
    platform: str | None
    environment: Mapping[str, str] | None
    user: str | None
    workdir: str | None
    timeout: float | None


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
            output=(result.stderr or result.stdout)[-4000:],
        )
    return result.stdout
