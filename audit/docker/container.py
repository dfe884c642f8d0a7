"""The Docker daemon through the docker SDK: connecting to it, and one throwaway container.

Every in-image step (a command in a base image, the snapshot script, pip-compile, reading a
built image's audit trail) goes through :class:`Container`: created on entry (never pulled: a
missing image is named, with how to make or load it), always removed on exit, whatever
happened in between. By default it runs with no network, a read-only root file system with a
small ``/tmp``, and the image's entrypoint overridden by ``argv``.

The docker SDK is imported inside the functions that talk to the daemon, so commands that
never do (a re-run of ``lock`` on unchanged inputs) do not pay for importing it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Any, TypedDict, Unpack

from audit.base.offline import make_command
from audit.docker import endpoint as docker_endpoint
from audit.errors import EnvironmentProblem
from audit.redact import redact

DAEMON_HINT = (
    "start dockerd (as root: dockerd --iptables=false &, then wait for /var/run/docker.sock), "
    "or point --docker-host / DOCKER_HOST at a running daemon"
)
SSH_HINT = (
    "the docker SDK reaches ssh:// engines only with paramiko (pip install 'docker[ssh]' "
    "where layer-audit is installed); or forward the socket: ssh -NL "
    "/tmp/engine.sock:/var/run/docker.sock USER@HOST & then --docker-host unix:///tmp/engine.sock"
)
EMULATION_HINT = "a foreign platform needs qemu registered with binfmt_misc (.ci/setup-machine)"
TMPFS = {"/tmp": "rw,exec,size=512m"}  # noqa: S108 (a path inside the container)


@dataclass(frozen=True)
class BindMount:
    """A host path mounted into a throwaway container (read-only unless said otherwise)."""

    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerResult:
    """What a finished throwaway container left: exit code, stdout and stderr."""

    exit_code: int
    stdout: str
    stderr: str


class ContainerSettings(TypedDict, total=False):
    """How a :class:`Container` runs; each key optional, its default in brackets.

    ``mounts`` bind mounts [none]; ``network`` a network mode [``"none"``]; ``platform``
    (e.g. ``linux/arm64``, emulated when foreign) [the image's]; ``environment`` [empty];
    ``user`` [the image's]; ``workdir`` [the image's]; ``labels`` (so a later run can find a
    container a killed run left) [none].
    """

    mounts: Sequence[BindMount]
    network: str
    platform: str | None
    environment: Mapping[str, str] | None
    user: str | None
    workdir: str | None
    labels: Mapping[str, str]


# ----------------------------------------------------------------------------- the daemon


def daemon() -> Any:
    """A docker SDK client for a daemon that answers; exit 3 with a hint when none does.

    The engine is :func:`audit.docker.endpoint.resolve`'s: ``--docker-host``,
    ``$DOCKER_HOST`` or the active docker context, the one the docker client programs get.
    """
    import docker
    import requests

    endpoint = docker_endpoint.resolve()
    where = redact(endpoint.host)
    try:
        client = docker.DockerClient(**sdk_arguments(docker_endpoint.sdk_environment()))
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        chosen = "" if endpoint.is_local_default else f" (chosen by {endpoint.source})"
        hint = SSH_HINT if "paramiko" in str(exc) else DAEMON_HINT
        raise EnvironmentProblem(
            f"the Docker daemon at {where} does not answer: {_no_answer(where, exc)}{chosen}",
            hint,
        ) from exc
    return client


def sdk_arguments(env: Mapping[str, str]) -> dict[str, Any]:
    """``docker.DockerClient``'s arguments for the chosen engine: ``base_url`` and TLS from
    ``env``; an ``ssh://`` engine goes through the ``ssh`` program, as the docker CLI does
    (no paramiko needed)."""
    import docker

    arguments: dict[str, Any] = docker.utils.kwargs_from_env(environment=dict(env))
    if str(arguments.get("base_url", "")).startswith("ssh://"):
        arguments["use_ssh_client"] = True
    return arguments


def _no_answer(where: str, exc: Exception) -> str:
    """Why the daemon did not answer, in words: the SDK's text nests three exceptions deep."""
    socket = where.removeprefix("unix://")
    if where.startswith("unix://") and not Path(socket).exists():
        return f"no socket at {socket}"
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def missing_image(ref: str) -> EnvironmentProblem:
    """The error for an image the local store lacks, with how to make or load it."""
    command = make_command(ref)
    if command:
        hint = f"make it offline from Debian packages: {command}"
    else:
        hint = (
            "pull or load it (docker pull / docker load), or make an offline base image with "
            "python -m audit base-image"
        )
    return EnvironmentProblem(f"image not found in the local Docker image store: {ref}", hint)


# ----------------------------------------------------------------------------- one container


class Container:
    """One throwaway container of ``ref`` running ``argv``: a context manager.

    Invariants: the container exists exactly between ``__enter__`` and ``__exit__`` (it is
    removed, forcibly, even when the body raised); creating it never pulls; every daemon error
    becomes an :class:`EnvironmentProblem` naming ``ref``. A container that is never started
    still serves :meth:`files` (reading a foreign-architecture image needs no emulation).
    """

    def __init__(
        self, ref: str, argv: Sequence[str] = ("true",), **settings: Unpack[ContainerSettings]
    ) -> None:
        self.ref = ref
        self.options: dict[str, Any] = {
            "entrypoint": [argv[0]],
            "command": list(argv[1:]),
            "mounts": _sdk_mounts(settings.get("mounts", ())),
            "network_mode": settings.get("network", "none"),
            "platform": settings.get("platform"),
            "read_only": True,
            "tmpfs": dict(TMPFS),
            "environment": dict(settings.get("environment") or {}),
            "user": settings.get("user") or "",
            "working_dir": settings.get("workdir"),
            "labels": dict(settings.get("labels") or {}),
            "detach": True,
        }
        self._handle: Any = None

    def __enter__(self) -> Container:
        self._handle = _create(self.ref, self.options)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        import docker

        handle, self._handle = self._handle, None
        try:
            handle.remove(force=True)
        except docker.errors.NotFound:
            pass  # already gone (removed by the daemon or by hand)
        except docker.errors.APIError as exc:
            if error is None:  # never hide the body's own error behind a cleanup failure
                raise EnvironmentProblem(
                    f"cannot remove a container of {self.ref}: {exc}",
                    "remove it by hand: docker ps -a",
                ) from exc

    @property
    def handle(self) -> Any:
        """The SDK's container object; only inside the ``with`` block."""
        if self._handle is None:
            raise RuntimeError("Container used outside its with block")
        return self._handle

    def run(self, timeout: float | None = None) -> ContainerResult:
        """Start, wait for the end (killing it after ``timeout`` seconds), collect the logs."""
        self.start()
        code = self.wait(timeout)
        stdout, stderr = self.logs()
        return ContainerResult(code, stdout, stderr)

    def start(self) -> None:
        import docker

        try:
            self.handle.start()
        except docker.errors.APIError as exc:
            raise EnvironmentProblem(
                f"cannot start a container from {self.ref}: {exc}", EMULATION_HINT
            ) from exc

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; past ``timeout`` the container is killed and the run fails (exit 3)."""
        import requests

        try:
            status: dict[str, Any] = self.handle.wait(timeout=timeout)
        except requests.exceptions.RequestException as exc:
            self.handle.kill()
            raise EnvironmentProblem(
                f"container from {self.ref} did not finish within {timeout}s", "raise the timeout"
            ) from exc
        return int(status.get("StatusCode", 1))

    def logs(self) -> tuple[str, str]:
        """(stdout, stderr) as text; undecodable bytes replaced."""
        out = self.handle.logs(stdout=True, stderr=False).decode(errors="replace")
        err = self.handle.logs(stdout=False, stderr=True).decode(errors="replace")
        return out, err

    def follow(self, on_line: Callable[[str], None]) -> None:
        """Hand each line the started container writes (stdout and stderr) to ``on_line`` as it
        comes, until the container ends; :meth:`logs` still has all of it afterwards."""
        pending = b""
        for chunk in self.handle.logs(stream=True, follow=True, stdout=True, stderr=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                on_line(line.decode(errors="replace"))
        if pending:
            on_line(pending.decode(errors="replace"))

    def files(self, path: str) -> dict[str, bytes]:
        """File name -> bytes of every regular file under ``path``; empty when it is absent."""
        import docker

        try:
            chunks, _ = self.handle.get_archive(path)
            data = b"".join(chunks)
        except docker.errors.NotFound:
            return {}
        except docker.errors.APIError as exc:
            raise EnvironmentProblem(
                f"cannot copy {path} out of a container of {self.ref}: {exc}",
                "check the Docker daemon: docker info",
            ) from exc
        return tar_files(data)


def tar_files(data: bytes) -> dict[str, bytes]:
    """File name (without folders) -> bytes of every regular file in a tar archive."""
    import io
    import tarfile

    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is not None:
                files[PurePosixPath(member.name).name] = handle.read()
    return files


def _sdk_mounts(mounts: Sequence[BindMount]) -> list[Any]:
    from docker.types import Mount

    return [
        Mount(m.target, str(Path(m.source).resolve()), type="bind", read_only=m.read_only)
        for m in mounts
    ]


def _create(ref: str, options: Mapping[str, Any]) -> Any:
    """Create, never pull: the SDK's ``containers.run`` would try a registry for a missing
    image, which on an offline machine fails with a bare HTTP 500 instead of naming the image."""
    import docker

    try:
        return daemon().containers.create(ref, **options)
    except docker.errors.ImageNotFound as exc:
        raise missing_image(ref) from exc
    except docker.errors.APIError as exc:
        raise EnvironmentProblem(
            f"cannot create a container from {ref}: {exc}", "check the Docker daemon: docker info"
        ) from exc
