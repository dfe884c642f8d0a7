"""The layer walk on real images: a serving-style Dockerfile built unchanged with BuildKit, walked
from the engine, a ``docker save`` file and a real registry; the walk against the in-image
snapshot; an arm64 image walked on this host with no container run."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from audit.docker import host as docker_host
from audit.docker.host import BindMount
from audit.errors import AuditError, EnvironmentProblem
from audit.history.model import History, LayerState
from audit.history.snapshot import SCRIPT_PATH, parse_snapshot
from audit.history.walk.run import WalkContext, WalkResult, walk
from audit.lock.plan import UV_VERSION
from audit.policy.judge import judge_history
from audit.policy.model import Policy
from tests.support.fixtures import BaseImageFactory
from tests.support.pkgindex import serve_index
from tests.support.registry import serve_registry
from tests.support.walk_build import (
    ARM_DOCKERFILE,
    LATE_LAYER,
    REPOSITORY,
    build,
    docker,
    serving_context,
    wheels,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TODAY = datetime.date(2026, 12, 1)


@dataclass(frozen=True)
class Built:
    tag: str
    uv: bool


def _uv_reachable(tools_url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{tools_url}uv/", timeout=120) as reply:
            return f"uv-{UV_VERSION}-" in reply.read().decode()
    except OSError:
        return False


@pytest.fixture(scope="module")
def serving(
    base_image: BaseImageFactory, hermetic_session: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Built]:
    """The serving image, built once for the module; removed after."""
    base = base_image("bookworm", "amd64")
    tag = f"{REPOSITORY}-walk/serving:1"
    uv = _uv_reachable(hermetic_session)
    context = serving_context(tmp_path_factory.mktemp("serving"))
    with serve_index(wheels(tmp_path_factory.mktemp("wheels"))) as index:
        args = {"BASE": base, "INDEX_URL": index}
        if uv:
            args |= {"TOOLS_URL": hermetic_session, "UV_VERSION": UV_VERSION}
        build(context, tag, args)
    yield Built(tag, uv)
    docker("rmi", tag)


def states_of(history: History) -> tuple[LayerState, ...]:
    return history.states


def walk_from(spec: str, cache: Path, **options: Any) -> WalkResult:
    return walk(spec, WalkContext(cache_root=cache, **options))


def test_the_walk_names_the_late_layer_that_downgraded(serving: Built, tmp_path: Path) -> None:
    result = walk_from(serving.tag, tmp_path / "cache")
    verdicts = judge_history(result.history, Policy(), today=TODAY)
    failing = [(v.ref, f) for v in verdicts for f in v.findings if f.fails]
    assert [(f.rule, f.package, f.before, f.after) for _, f in failing] == [
        ("downgraded", "nccl-like", "2.30.0", "2.29.7")
    ]
    ref = failing[0][0]
    assert LATE_LAYER in ref.instruction and ref.digest == result.image.diff_ids[-1]
    last = result.history.states[-1]
    envs = {env.interpreter: env for env in last.environments}
    venv = {d.name: d for d in envs["/opt/venv/bin/python"].distributions}
    assert venv["nccl-like"].version == "2.29.7" and venv["flashy"].version == "1.0"
    system = {d.name: d for d in envs["/usr/bin/python3.11"].distributions}
    assert system["beta"].installer == ("uv" if serving.uv else "pip")
    assert system["beta"].location == "/usr/local/lib/python3.11/dist-packages"
    assert last.system is not None and "deb:ml-tools" in last.system.keyed()
    assert ("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64") in result.image.env
    assert result.image.platform == "linux/amd64" and result.image.tags == (serving.tag,)
    assert len(result.history.states) == len(result.image.diff_ids) + 1 + sum(
        1 for s in result.history.states if s.ref.empty and s.ref.index >= 0
    )


def test_engine_docker_save_and_registry_give_one_history(serving: Built, tmp_path: Path) -> None:
    engine = walk_from(serving.tag, tmp_path / "engine-cache")
    saved = tmp_path / "serving.tar"
    docker("save", "-o", str(saved), serving.tag)
    archive = walk_from(f"docker-archive:{saved}", tmp_path / "archive-cache")
    with serve_registry(tmp_path / "registry") as registry:
        pushed = f"{registry.host}/{REPOSITORY}-walk/serving:1"
        docker("tag", serving.tag, pushed)
        try:
            docker("push", pushed)
            remote = walk_from(f"registry:{pushed}", tmp_path / "registry-cache")
            digest = registry.digest(f"{REPOSITORY}-walk/serving", "1")
        finally:
            docker("rmi", pushed)
    assert states_of(engine.history) == states_of(archive.history) == states_of(remote.history)
    assert engine.image.id == archive.image.id == remote.image.id
    assert remote.image.manifest_digest == digest


def test_a_second_engine_walk_exports_nothing(serving: Built, tmp_path: Path) -> None:
    first = walk_from(serving.tag, tmp_path / "cache")
    second = walk_from(serving.tag, tmp_path / "cache")
    assert first.image.exported and first.image.bytes_read > 0
    assert not second.image.exported and second.image.bytes_read == 0
    assert all(layer.cached for layer in second.image.layers)
    assert second.history == first.history


def test_the_walk_agrees_with_the_in_image_snapshot(serving: Built, tmp_path: Path) -> None:
    last = walk_from(serving.tag, tmp_path / "cache").history.states[-1]
    mount = BindMount(SCRIPT_PATH.parent, "/layer-audit-snapshot")
    for env in last.environments:
        out = docker_host.run_in_image(
            serving.tag, [env.interpreter, "/layer-audit-snapshot/snapshot.py"], mounts=[mount]
        )
        (inside,) = parse_snapshot(out.encode(), serving.tag)
        assert inside.distributions == env.distributions, env.interpreter
        assert inside.paths == env.paths and inside.python == env.python, env.interpreter
        assert inside.libc == env.libc and inside.platform == env.platform == "linux/amd64"
        assert inside.system is not None and last.system is not None
        assert inside.system.packages == last.system.packages
        assert inside.system.distro == last.system.distro


def test_a_missing_image_is_exit_3_with_a_hint(docker_client: Any, tmp_path: Path) -> None:
    with pytest.raises(AuditError) as caught:
        walk_from(f"{REPOSITORY}-walk/absent:0", tmp_path / "cache")
    assert isinstance(caught.value, EnvironmentProblem) and caught.value.exit_code == 3
    assert "not found in the local Docker image store" in caught.value.message
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.json"))


class NoContainers:
    """A docker client that fails the test if anything asks it for a container."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        assert name not in ("containers", "create_container"), "the walk ran a container"
        return getattr(self._client, name)


@pytest.mark.emulation
def test_an_arm64_image_walked_here_with_no_container(
    base_image: BaseImageFactory, docker_client: Any, tmp_path: Path
) -> None:
    if not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists():
        pytest.skip("building an arm64 image needs qemu-aarch64 in binfmt_misc")
    base = base_image("bookworm", "arm64")
    context = tmp_path / "arm"
    wheels(context / "wheels")
    (context / "Dockerfile").write_text(ARM_DOCKERFILE)
    tag = f"{REPOSITORY}-walk/arm:1"
    build(context, tag, {"BASE": base}, platform="linux/arm64")
    try:
        guarded = WalkContext(
            cache_root=tmp_path / "cache", docker=lambda: NoContainers(docker_host.daemon())
        )
        result = walk(tag, guarded)
    finally:
        docker("rmi", tag)
    assert result.image.platform == "linux/arm64"
    envs = {env.interpreter: env for env in result.history.states[-1].environments}
    venv = envs["/opt/venv/bin/python"]
    assert venv.markers["platform_machine"] == "aarch64"
    assert ("alpha", "1.0") in [(d.name, d.version) for d in venv.distributions]
    assert result.history.states[-1].system is not None
    packages = result.history.states[-1].system.packages
    assert {p.architecture for p in packages} <= {"arm64", "all"}
