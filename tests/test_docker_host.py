"""Docker client detection (pure, with a patched ``commands.run``) and the daemon (real)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from audit.build.plan import DockerClient, build_command
from audit.docker import host as docker_host
from audit.docker.host import BindMount
from audit.errors import EXIT_ENVIRONMENT, CommandFailed, EnvironmentProblem
from audit.host import process as commands
from audit.host.process import Completed
from tests.support.fixtures import Wheelhouse


def fake_clients(
    monkeypatch: pytest.MonkeyPatch, clients: Mapping[str, tuple[str, bool]], on_path: str
) -> list[list[str]]:
    """Stand-in docker programs: ``docker`` resolves to ``on_path``; returns the calls made."""
    calls: list[list[str]] = []

    def find_program(name: str, hint: str = "") -> str:
        path = on_path if name == "docker" else name
        if path not in clients:
            raise CommandFailed(f"program not found: {name}")
        return path

    def run(args: Sequence[str | Path], **_: Any) -> Completed:
        argv = [str(a) for a in args]
        calls.append(argv)
        version, buildx = clients[argv[0]]
        if argv[1] == "buildx":
            return Completed(tuple(argv), 0 if buildx else 1, "", "not a docker command")
        return Completed(tuple(argv), 1, version + "\n", "Cannot connect to the Docker daemon")

    monkeypatch.setattr(commands, "find_program", find_program)
    monkeypatch.setattr(commands, "run", run)
    monkeypatch.delenv(docker_host.DOCKER_ENV, raising=False)
    return calls


def test_chooses_old_client_with_buildkit_env_over_newer_without_buildx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clients = {"/usr/local/bin/docker": ("28.2.2", False), "/usr/bin/docker": ("20.10.24", False)}
    fake_clients(monkeypatch, clients, on_path="/usr/local/bin/docker")
    assert docker_host.detect_client() == DockerClient(
        "/usr/bin/docker", "buildkit-env", "20.10.24"
    )


def test_prefers_a_client_with_buildx(monkeypatch: pytest.MonkeyPatch) -> None:
    clients = {"/usr/local/bin/docker": ("20.10.5", False), "/usr/bin/docker": ("28.2.2", True)}
    fake_clients(monkeypatch, clients, on_path="/usr/local/bin/docker")
    assert docker_host.detect_client() == DockerClient("/usr/bin/docker", "buildx", "28.2.2")


def test_stops_probing_at_the_first_client_with_buildx(monkeypatch: pytest.MonkeyPatch) -> None:
    clients = {"/usr/local/bin/docker": ("28.2.2", True), "/usr/bin/docker": ("20.10.24", True)}
    calls = fake_clients(monkeypatch, clients, on_path="/usr/local/bin/docker")
    assert docker_host.detect_client().path == "/usr/local/bin/docker"
    assert {c[0] for c in calls} == {"/usr/local/bin/docker"}


def test_refuses_new_client_without_buildx(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_clients(monkeypatch, {"/opt/docker28": ("28.2.2", False)}, on_path="/nowhere")
    with pytest.raises(EnvironmentProblem) as caught:
        docker_host.detect_client("/opt/docker28")
    assert caught.value.exit_code == EXIT_ENVIRONMENT
    assert "/opt/docker28 28.2.2 without buildx" in caught.value.message
    assert "buildx" in caught.value.hint


def test_preferred_client_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_clients(monkeypatch, {"/opt/d20": ("20.10.1", False)}, on_path="/nowhere")
    monkeypatch.setenv(docker_host.DOCKER_ENV, "/opt/d20")
    assert docker_host.detect_client().path == "/opt/d20"
    assert {c[0] for c in calls} == {"/opt/d20"}


def test_no_client_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_clients(monkeypatch, {}, on_path="/nowhere")
    with pytest.raises(EnvironmentProblem, match="no docker client found"):
        docker_host.detect_client()


def test_same_program_twice_is_probed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_clients(monkeypatch, {"/usr/bin/docker": ("20.10.2", False)}, "/usr/bin/docker")
    docker_host.detect_client()
    assert sum(c[1:] == ["buildx", "version"] for c in calls) == 1


def test_build_command_and_env() -> None:
    buildx = DockerClient("/x/docker", "buildx", "28.0.0")
    legacy = DockerClient("/usr/bin/docker", "buildkit-env", "20.10.24")
    assert build_command(buildx) == ["/x/docker", "buildx", "build", "--load"]
    assert build_command(legacy) == ["/usr/bin/docker", "build"]
    env = docker_host.client_env(legacy, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "DOCKER_BUILDKIT": "1", "BUILDKIT_PROGRESS": "plain"}


def test_missing_daemon_exits_3_with_hint_through_cli(tmp_path: Path) -> None:
    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent.sock", XDG_CACHE_HOME=str(tmp_path))
    argv = [sys.executable, "-m", "audit", "base-image", "--suite", "bookworm"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == EXIT_ENVIRONMENT, done.stderr
    assert "unix:///nonexistent.sock does not answer" in done.stderr
    assert "start dockerd" in done.stderr
    assert "Traceback" not in done.stderr


def test_daemon_error_names_docker_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    with pytest.raises(EnvironmentProblem, match="start dockerd"):
        docker_host.daemon()


# ----------------------------------------------------------------------------- real Docker


@pytest.mark.docker
def test_detects_usr_bin_docker_on_this_machine() -> None:
    client = docker_host.detect_client()
    if not Path("/usr/local/bin/docker").exists():
        pytest.skip("this is not the reference machine (no 28.x client at /usr/local/bin)")
    assert (client.path, client.mode) == ("/usr/bin/docker", "buildkit-env")


@pytest.mark.docker
def test_image_info_and_exists(base_image: Any) -> None:
    tag = base_image()
    info = docker_host.image_info(tag)
    assert info.id.startswith("sha256:")
    assert (info.os, info.architecture) == ("linux", "amd64")
    assert info.labels["io.layer-audit.base.suite"] == "bookworm"
    assert docker_host.image_exists(tag)
    assert not docker_host.image_exists("layer-audit/no-such-image:never")
    with pytest.raises(EnvironmentProblem, match="no-such-image"):
        docker_host.image_info("layer-audit/no-such-image:never")


@pytest.mark.docker
def test_run_in_a_missing_image_names_it_instead_of_pulling() -> None:
    with pytest.raises(EnvironmentProblem) as caught:
        docker_host.run_in_image("layer-audit/base:never-amd64", ["/bin/true"])
    assert "not found in the local Docker image store" in caught.value.message
    assert "base-image --suite never --arch amd64" in caught.value.hint


MARK = "layer-audit.test-run"  # a label this test's containers carry: the engine is shared


def _mark(tmp_path: Path) -> dict[str, str]:
    return {MARK: str(tmp_path)}


def _containers_of(client: Any, mark: dict[str, str]) -> list[Any]:
    """Every container, running or not, carrying ``mark`` (others' are none of this test's)."""
    ((key, value),) = mark.items()
    return list(client.api.containers(all=True, filters={"label": f"{key}={value}"}))


@pytest.mark.docker
def test_run_in_image_read_only_with_mounts(
    base_image: Any, docker_client: Any, tmp_path: Path
) -> None:
    tag, mark = base_image(), _mark(tmp_path)
    (tmp_path / "hello.txt").write_text("from the host\n")
    mount = BindMount(tmp_path, "/work")
    argv = ["/bin/cat", "/work/hello.txt"]
    out = docker_host.run_in_image(tag, argv, mounts=[mount], labels=mark)
    assert out == "from the host\n"
    denied = docker_host.run_in_image_result(tag, ["/bin/touch", "/etc/x"], labels=mark)
    assert denied.exit_code != 0
    assert "Read-only file system" in denied.stderr
    assert not _containers_of(docker_client, mark)  # every run removed its container


@pytest.mark.docker
def test_run_in_image_failure_carries_stderr(
    base_image: Any, docker_client: Any, tmp_path: Path
) -> None:
    tag, mark = base_image(), _mark(tmp_path)
    script = "import sys; sys.stderr.write('boom at the end'); sys.exit(4)"
    with pytest.raises(CommandFailed) as caught:
        docker_host.run_in_image(tag, ["/opt/venv/bin/python", "-c", script], labels=mark)
    assert caught.value.returncode == 4
    assert caught.value.exit_code == EXIT_ENVIRONMENT
    assert "boom at the end" in caught.value.output
    assert not _containers_of(docker_client, mark)


@pytest.mark.docker
def test_local_index_reachable_only_with_host_network(
    base_image: Any, wheelhouse: Wheelhouse, local_index: str
) -> None:
    wheelhouse.add("tiny-pkg", "1.0")
    fetch = f"import urllib.request as u; print(u.urlopen('{local_index}tiny-pkg/').read())"
    argv = ["/opt/venv/bin/python", "-c", fetch]
    out = docker_host.run_in_image(base_image(), argv, network="host")
    assert "tiny_pkg-1.0-py3-none-any.whl#sha256=" in out
    isolated = docker_host.run_in_image_result(base_image(), argv)
    assert isolated.exit_code != 0
