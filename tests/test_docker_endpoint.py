"""Which engine every Docker call talks to (``audit.docker.endpoint``), and the registry
helpers that need no registry: contexts resolved from files as the docker CLI does, the
push's digest and failure, the build plan's cache and multi-platform argv."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from audit.build.plan import INLINE_CACHE_ARG, BuildOptions, build_command
from audit.cli.main import main
from audit.docker import endpoint as docker_endpoint
from audit.docker import host as docker_host
from audit.docker import registry
from audit.errors import (
    EXIT_BAD_INPUT,
    EXIT_ENVIRONMENT,
    CommandFailed,
    EnvironmentProblem,
    UsageError,
)
from audit.host import process as commands
from audit.host.process import Completed
from tests.support.build_plan import BUILDX, LEGACY, plan

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in ("DOCKER_HOST", "DOCKER_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))
    yield
    docker_endpoint.use_host(None)


def write_context(folder: Path, name: str, host: str | None) -> None:
    """A context as ``docker context create NAME --docker host=HOST`` stores it."""
    meta = folder / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest()
    meta.mkdir(parents=True)
    endpoints = {"docker": {"Host": host, "SkipTLSVerify": False}} if host else {}
    (meta / "meta.json").write_text(json.dumps({"Name": name, "Endpoints": endpoints}))


def config_folder(tmp_path: Path, current: str | None = None) -> Path:
    folder = tmp_path / "docker-config"
    folder.mkdir(exist_ok=True)
    if current is not None:
        (folder / "config.json").write_text(json.dumps({"currentContext": current}))
    return folder


def test_default_is_the_local_socket(tmp_path: Path) -> None:
    config_folder(tmp_path)
    assert docker_endpoint.resolve() == docker_endpoint.Endpoint(
        docker_endpoint.LOCAL_SOCKET, "default"
    )
    assert "DOCKER_HOST" not in docker_endpoint.client_environment({"PATH": "/bin"})


def test_the_current_context_of_config_json_names_the_engine(tmp_path: Path) -> None:
    folder = config_folder(tmp_path, current="spark-2")
    write_context(folder, "spark-2", "tcp://10.0.0.2:2375")
    found = docker_endpoint.resolve()
    assert (found.host, found.source) == ("tcp://10.0.0.2:2375", "docker context spark-2")
    env = docker_endpoint.client_environment({"DOCKER_CONTEXT": "", "PATH": "/bin"})
    assert env == {"DOCKER_HOST": "tcp://10.0.0.2:2375", "PATH": "/bin"}


def test_docker_context_variable_beats_config_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = config_folder(tmp_path, current="spark-2")
    write_context(folder, "spark-2", "tcp://10.0.0.2:2375")
    write_context(folder, "ci", "ssh://ci@builder")
    monkeypatch.setenv("DOCKER_CONTEXT", "ci")
    assert docker_endpoint.resolve().host == "ssh://ci@builder"
    monkeypatch.setenv("DOCKER_CONTEXT", "default")
    assert docker_endpoint.resolve().is_local_default


def test_docker_host_beats_contexts_and_the_option_beats_docker_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = config_folder(tmp_path, current="spark-2")
    write_context(folder, "spark-2", "tcp://10.0.0.2:2375")
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2400")
    assert docker_endpoint.resolve().source == "$DOCKER_HOST"
    docker_endpoint.use_host("tcp://127.0.0.1:2500")
    assert docker_endpoint.resolve() == docker_endpoint.Endpoint(
        "tcp://127.0.0.1:2500", "--docker-host"
    )
    env = docker_host.client_env(LEGACY, {"DOCKER_HOST": "tcp://127.0.0.1:2400"})
    assert env["DOCKER_HOST"] == "tcp://127.0.0.1:2500" and env["DOCKER_BUILDKIT"] == "1"
    assert docker_endpoint.sdk_environment()["DOCKER_HOST"] == "tcp://127.0.0.1:2500"


def test_a_missing_context_or_one_without_docker_is_bad_input(tmp_path: Path) -> None:
    folder = config_folder(tmp_path, current="gone")
    with pytest.raises(UsageError, match="docker context 'gone': not found"):
        docker_endpoint.resolve()
    write_context(folder, "gone", None)
    with pytest.raises(UsageError, match="no docker endpoint"):
        docker_endpoint.resolve()


def test_a_host_without_a_scheme_is_refused() -> None:
    with pytest.raises(UsageError, match="not a Docker engine URL"):
        docker_endpoint.use_host("10.0.0.5:2375")


def test_docker_host_option_reaches_the_daemon_before_or_after_the_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "images").mkdir()
    monkeypatch.chdir(tmp_path)
    for argv in (
        ["--docker-host", "tcp://127.0.0.1:9", "audit-deps", "--image", "x:1"],
        ["audit-deps", "--image", "x:1", "--docker-host", "tcp://127.0.0.1:9"],
    ):
        assert main(argv) == EXIT_ENVIRONMENT
        err = " ".join(capsys.readouterr().err.split())
        assert "tcp://127.0.0.1:9 does not answer" in err and "--docker-host" in err
        assert "Traceback" not in err
    assert main(["audit-deps", "--image", "x:1", "--docker-host", "bogus"]) == EXIT_BAD_INPUT
    assert docker_endpoint.resolve().is_local_default  # cleared after the command


# ----------------------------------------------------------------------------- registry


def test_the_pushed_digest_is_read_from_docker_push() -> None:
    out = f"The push refers to repository [r/x]\nv1: digest: {DIGEST} size: 1234\n"
    assert registry.pushed_digest(out) == DIGEST
    assert registry.pushed_digest("nothing") == ""


def test_the_repository_digest_of_the_recipes_own_repository_is_recorded() -> None:
    found = ("mirror.example/x@sha256:1", "127.0.0.1:5000/team/vllm@sha256:2")
    assert registry.repository_digest("127.0.0.1:5000/team/vllm:tag", found) == found[1]
    assert registry.repository_digest("other:1", found) == found[0]
    assert registry.repository_digest("other:1", ()) is None


def fake_push(monkeypatch: pytest.MonkeyPatch, refused: str) -> list[str]:
    pushed: list[str] = []

    def run(args: Sequence[str | Path], **_: Any) -> Completed:
        ref = str(args[-1])
        if ref == refused:
            raise CommandFailed("push failed", output="connection refused")
        pushed.append(ref)
        return Completed(tuple(map(str, args)), 0, f"t: digest: {DIGEST} size: 1\n", "")

    monkeypatch.setattr(commands, "run", run)
    return pushed


def test_a_refused_push_names_what_is_local_only_and_what_was_pushed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pushed = fake_push(monkeypatch, refused="r/x:v2")
    with pytest.raises(registry.PushFailed) as caught:
        registry.push_tags(LEGACY, ["r/x:v1", "r/x:v2", "r/x:latest"])
    failure = caught.value
    assert failure.exit_code == EXIT_ENVIRONMENT and pushed == ["r/x:v1"]
    assert "local only, not in the registry:\n  r/x:v2\n  r/x:latest" in failure.message
    assert "pushed before the failure:\n  r/x:v1" in failure.message
    assert "--push again" in failure.hint
    report = registry.write_push_report(tmp_path, failure.results)
    tags = json.loads(report.read_text())["tags"]
    assert [(t["tag"], t["pushed"], t["digest"]) for t in tags] == [
        ("r/x:v1", True, DIGEST), ("r/x:v2", False, ""), ("r/x:latest", False, ""),
    ]  # fmt: skip


def test_a_push_failure_never_shows_a_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_push(monkeypatch, refused="r/x:v1")
    docker_endpoint.use_host("tcp://ci-token:s3cr3t@builder:2376")
    with pytest.raises(registry.PushFailed) as caught:
        registry.push_tags(LEGACY, ["r/x:v1"])
    assert "s3cr3t" not in str(caught.value) and "builder:2376" in caught.value.message


# ----------------------------------------------------------------------------- the plan


def flag_values(argv: Sequence[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_cache_from_and_cache_to_use_the_inline_cache() -> None:
    options = BuildOptions(image="spark", cache_from=("r/x:cache", "r/y:cache"), cache_to="r/x:c")
    built = plan(options)
    for build in built.builds:
        assert flag_values(build.argv, "--cache-from") == ["r/x:cache", "r/y:cache"]
        assert f"{INLINE_CACHE_ARG}=1" in flag_values(build.argv, "--build-arg")
    assert built.cache_to == "r/x:c"
    plain = plan(BuildOptions(image="spark")).builds[0].argv
    assert "--cache-from" not in plain and f"{INLINE_CACHE_ARG}=1" not in plain


def test_a_multi_platform_push_is_one_buildx_build_per_stage_pushing_its_final_tags() -> None:
    options = BuildOptions(
        image="spark",
        platform="linux/amd64,linux/arm64",
        push=True,
        builder="spark-pair",
        cache_to="local/spark:buildcache",
    )
    built = plan(options, client=BUILDX)
    assert built.multi_platform and built.arch == "amd64-arm64"
    target = built.builds[0].argv
    assert list(target[:6]) == [*build_command(BUILDX, push=True), "--builder", "spark-pair"]
    assert "--load" not in target
    assert flag_values(target, "--platform") == ["linux/amd64,linux/arm64"]
    assert flag_values(target, "-t") == [
        "local/spark:v3-amd64-arm64-cu130", "local/spark:latest-amd64-arm64-cu130",
        "local/spark:buildcache",
    ]  # fmt: skip
    assert flag_values(built.builds[1].argv, "-t") == ["local/spark:v1-amd64-arm64-cu130"]


def test_a_multi_platform_build_needs_buildx_and_push() -> None:
    both = "linux/amd64,linux/arm64"
    with pytest.raises(UsageError, match="needs buildx"):
        plan(BuildOptions(image="spark", platform=both, push=True), client=LEGACY)
    with pytest.raises(UsageError, match="cannot be loaded locally"):
        plan(BuildOptions(image="spark", platform=both), client=BUILDX)
    with pytest.raises(UsageError, match="expected os/arch"):
        plan(BuildOptions(image="spark", platform="linux/amd64,arm64", push=True), client=BUILDX)


def test_a_context_made_by_the_docker_cli_resolves_to_its_endpoint(tmp_path: Path) -> None:
    """The real client writes the context (no daemon needed); we read it back as it does."""
    import shutil
    import subprocess

    client = shutil.which("docker") or "/usr/bin/docker"
    if not Path(client).exists():
        pytest.skip("no docker client on this machine")
    folder = config_folder(tmp_path)
    env = {"DOCKER_CONFIG": str(folder), "PATH": "/usr/bin:/bin"}
    for argv in (
        ["context", "create", "spark-two", "--docker", "host=tcp://127.0.0.1:23750"],
        ["context", "use", "spark-two"],
    ):
        subprocess.run([client, *argv], env=env, check=True, capture_output=True)
    assert docker_endpoint.resolve() == docker_endpoint.Endpoint(
        "tcp://127.0.0.1:23750", "docker context spark-two"
    )


def test_a_missing_base_is_pulled_said_so_and_an_offline_base_never_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[list[str]] = []

    def run(args: Sequence[str | Path], **_: Any) -> Completed:
        ran.append([str(a) for a in args])
        return Completed(tuple(ran[-1]), 0, "", "")

    monkeypatch.setattr(commands, "run", run)
    monkeypatch.setattr(docker_host, "image_exists", lambda ref: ref == "here:1")
    docker_endpoint.use_host("tcp://127.0.0.1:2400")
    pinned = f"127.0.0.1:5000/team/vllm-openai:glm53@{DIGEST}"
    assert registry.ensure_image(pinned, "the base of glm53", LEGACY)
    assert ran == [[LEGACY.path, "pull", pinned]]
    err = " ".join(capsys.readouterr().err.split())
    assert f"pulling {pinned} (the base of glm53; the engine at tcp://127.0.0.1:2400" in err
    assert not registry.ensure_image("here:1", "present", LEGACY) and len(ran) == 1

    def missing(ref: str) -> None:
        raise docker_host._missing_image(ref)  # type: ignore[attr-defined]

    monkeypatch.setattr(docker_host, "image_info", missing)
    with pytest.raises(EnvironmentProblem, match="python -m audit base-image"):
        registry.ensure_image("layer-audit/base:trixie-arm64", "the base", LEGACY)
    assert len(ran) == 1


def test_a_refused_pull_is_exit_3_naming_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(args: Sequence[str | Path], **_: Any) -> Completed:
        raise CommandFailed("pull failed", output="manifest unknown")

    monkeypatch.setattr(commands, "run", run)
    monkeypatch.setattr(docker_host, "image_exists", lambda ref: False)
    with pytest.raises(EnvironmentProblem) as caught:
        registry.ensure_image("reg.example/x:1", "the base", LEGACY)
    assert caught.value.exit_code == EXIT_ENVIRONMENT
    assert "cannot pull reg.example/x:1 into the engine at unix:///var/run/docker.sock" in str(
        caught.value
    )


def test_the_sdk_reaches_an_ssh_engine_through_the_ssh_program() -> None:
    from audit.docker.container import sdk_arguments

    assert sdk_arguments({"DOCKER_HOST": "ssh://admin@spark-2"}) == {
        "base_url": "ssh://admin@spark-2",
        "use_ssh_client": True,
    }
    assert sdk_arguments({"DOCKER_HOST": "tcp://127.0.0.1:2375"}) == {
        "base_url": "tcp://127.0.0.1:2375"
    }
