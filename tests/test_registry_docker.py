"""Past one machine, with real parts (``pytest --docker``): a registry and a second engine.

Debian's Distribution registry on 127.0.0.1 (:mod:`tests.support.registry`) stands for "our
registry", a second ``dockerd`` with its own data root, TCP socket and bridge stands for
"the other machine". Checked here: ``build --push`` pushes every tag with its digest, a
registry that is down is exit 3 naming the local-only tags and a rerun pushes them; a base
named by a registry reference is pulled (printed; by digest when pinned) by ``lock
--record-base`` and by ``build``, and a re-pushed base tag is caught before layer 1; a build
on the second engine (``--docker-host``) is pushed, pulled on the first and audited there; and
the second engine's pushed inline cache makes the first engine's build of the same recipe
report its pip layers as cached.

Every name carries ``$AUDIT_TEST_REPOSITORY`` (``layer-audit-test`` by default); every image
made on the main engine is removed afterwards; the second engine and the registry's storage
are removed whole.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from audit.docker import host as docker_host
from audit.docker.host import BindMount
from audit.history.snapshot import SCRIPT_PATH, parse_snapshot
from audit.lock.files import BaseRecord, render_base
from tests.support.docker_build import (
    CLIENT,
    PYTHON,
    REPO_ROOT,
    TEST_REPOSITORY,
    Index,
    Project,
    images_of,
)
from tests.support.fixtures import BaseImageFactory
from tests.support.pkgindex import serve_index
from tests.support.registry import (
    TAG,
    Registry,
    SecondEngine,
    main_bridge_present,
    second_engine,
    serve_registry,
)
from tests.support.wheels import make_wheel

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RUN_STAGE = '[[stage]]\nname = "v1"\n[[stage.layer]]\nrun = "echo built > /etc/built"\n'
PIP_STAGES = (
    '[[stage]]\nname = "v1"\n[[stage.layer]]\npip = "requirements/v1.in"\n\n'
    '[[stage]]\nname = "v2"\n[[stage.layer]]\npip = "requirements/v2.in"\n'
)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    wheels = tmp_path_factory.mktemp(f"{TAG}-wheels")
    for name, version in (("alpha", "1.0"), ("alpha", "0.9"), ("nccl-like", "2.30.0")):
        make_wheel(wheels, name, version)
    with serve_index(wheels) as url:
        yield Index(url, wheels)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, docker_client: Any) -> Iterator[Registry]:
    if shutil.which("docker-registry") is None:
        pytest.fail("--docker given but docker-registry is missing: bash .ci/setup-machine")
    with serve_registry(tmp_path_factory.mktemp(f"{TAG}-registry")) as running:
        yield running


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, docker_client: Any) -> Iterator[SecondEngine]:
    assert main_bridge_present()
    with second_engine(tmp_path_factory.mktemp(f"{TAG}-engine")) as running:
        yield running
    assert main_bridge_present(), "the second engine must leave the main engine's docker0"
    assert docker_host.daemon().ping()


def docker(*args: str, host: str | None = None) -> str:
    """The 20.10 client against the main engine (or ``host``); its stdout."""
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    env.pop("DOCKER_HOST", None)
    if host:
        env["DOCKER_HOST"] = host
    done = subprocess.run([CLIENT, *args], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def push(local: str, ref: str) -> str:
    """Tag ``local`` as ``ref`` on the main engine, push it, and return its manifest digest."""
    docker("tag", local, ref)
    out = docker("push", ref)
    return out.rsplit("digest: ", 1)[1].split()[0]


def forget(*refs: str) -> None:
    """Remove these names (tags or ``repo@digest``) from the main engine; images stay when
    other names hold them."""
    for ref in refs:
        subprocess.run([CLIENT, "rmi", ref], capture_output=True, check=False)


def base_json(local: str, base: str, digest: str | None) -> str:
    """``base.json`` of ``base`` (pinned to ``digest``), snapshotted from the local ``local``."""
    mount = BindMount(SCRIPT_PATH.parent, "/layer-audit-snapshot")
    out = docker_host.run_in_image(
        local, [PYTHON, "/layer-audit-snapshot/snapshot.py"], mounts=[mount]
    )
    info = docker_host.image_info(local)
    return render_base(BaseRecord(base, info.id, digest, parse_snapshot(out.encode(), local)))


@dataclass
class Checkout:
    """A project folder with any number of recipes: ``write`` one, ``run`` a command."""

    root: Path
    index: Index

    def write(self, name: str, base: str, repository: str, body: str, digest: str = "") -> Project:
        folder = self.root / "images" / name
        (folder / "requirements").mkdir(parents=True, exist_ok=True)
        pin = f'base_digest = "{digest}"\n' if digest else ""
        (folder / "image.toml").write_text(
            f'[image]\nbase = "{base}"\n{pin}platform = "linux/amd64"\ncuda = "cpu"\n'
            f'interpreters = ["{PYTHON}"]\nrepository = "{repository}"\n'
            f'index_url = "{self.index.url}"\n\n{body}'
        )
        for stage, wanted in (("v1", "alpha"), ("v2", "nccl-like")):
            (folder / "requirements" / f"{stage}.in").write_text(f"{wanted}\n")
        (self.root / "locks" / name).mkdir(parents=True, exist_ok=True)
        return Project(self.root, self.index, name)

    def run(self, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """``python -m audit ARGV`` here, on the main engine unless ``extra`` (variables of the
        environment) says otherwise."""
        env = dict(os.environ, LAYER_AUDIT_DOCKER=CLIENT, PYTHONPATH=str(REPO_ROOT))
        env.pop("DOCKER_HOST", None)
        env.update(extra)
        return subprocess.run(
            [sys.executable, "-m", "audit", *argv],
            cwd=self.root, env=env, capture_output=True, text=True, check=False, timeout=900,
        )  # fmt: skip


@pytest.fixture
def checkout(tmp_path: Path, index: Index) -> Checkout:
    shutil.copytree(REPO_ROOT / "templates", tmp_path / "templates")
    return Checkout(tmp_path, index)


def names_of(repository: str) -> list[str]:
    """Every name of ``repository`` on the main engine: tags and ``repo@digest`` references
    (a pull by digest leaves only the latter)."""
    found = list(images_of(repository))
    # the engine's one list call (the SDK's images.list() inspects each image afterwards, and
    # another test worker may remove one in between: ImageNotFound)
    for summary in docker_host.daemon().api.images():
        digests = summary.get("RepoDigests") or []
        found += [ref for ref in digests if ref.partition("@")[0] == repository]
    return found


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    repositories: list[str] = []
    yield repositories
    for repository in repositories:
        forget(*names_of(repository))
    for repository in repositories:
        assert names_of(repository) == [], f"left behind: {names_of(repository)}"


def flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines


# ----------------------------------------------------------------------------- push


def test_push_with_the_registry_down_names_local_only_tags_and_a_rerun_pushes_them(
    checkout: Checkout, registry: Registry, base_image: BaseImageFactory, cleanup: list[str]
) -> None:
    offline = base_image()
    repository = f"{registry.host}/{TEST_REPOSITORY}/pushed"
    cleanup.append(repository)
    project = checkout.write("pushed", offline, repository, RUN_STAGE)
    (checkout.root / "locks/pushed/base.json").write_text(base_json(offline, offline, None))
    tags = {f"{repository}:v1-amd64-cpu", f"{repository}:latest-amd64-cpu"}
    report = checkout.root / "build/reports/pushed/push.json"

    registry.stop()
    try:
        down = project.build("--push")
    finally:
        registry.start()

    assert down.returncode == 3, down.stderr[-3000:]
    said = flat(down.stderr)
    assert "Traceback" not in down.stderr and "local only, not in the registry" in said
    assert all(tag in said for tag in tags) and "--push again" in said
    assert set(images_of(repository)) == tags  # every local tag moved: the build passed
    assert not any(item["pushed"] for item in json.loads(report.read_text())["tags"])
    assert registry.tags(f"{TEST_REPOSITORY}/pushed") == []

    again = project.build("--push")

    assert again.returncode == 0, again.stderr[-3000:]
    assert registry.tags(f"{TEST_REPOSITORY}/pushed") == ["latest-amd64-cpu", "v1-amd64-cpu"]
    digest = registry.digest(f"{TEST_REPOSITORY}/pushed", "v1-amd64-cpu")
    assert f"pushed {repository}:v1-amd64-cpu {digest}" in flat(again.stdout)
    written = {item["tag"]: item for item in json.loads(report.read_text())["tags"]}
    assert written[f"{repository}:v1-amd64-cpu"] == {
        "tag": f"{repository}:v1-amd64-cpu",
        "digest": digest,
        "pushed": True,
    }


# bcrypt of PASSWORD (what `htpasswd -B` writes), so the test needs no bcrypt library
USER, PASSWORD = "ci", "s3cret-pw"
HTPASSWD = f"{USER}:$2b$05$abcdefghijklmnopqrstuuzSvhclVSvY9ufOheOOhcPviTPFJlqIC\n"


def test_a_refused_login_is_exit_3_and_after_docker_login_the_rerun_pushes(
    checkout: Checkout,
    base_image: BaseImageFactory,
    cleanup: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    offline = base_image()
    config = tmp_path_factory.mktemp(f"{TAG}-docker-config")  # logins never touch ~/.docker
    with serve_registry(tmp_path_factory.mktemp(f"{TAG}-auth-registry"), HTPASSWD) as locked:
        repository = f"{locked.host}/{TEST_REPOSITORY}/authed"
        cleanup.append(repository)
        checkout.write("authed", offline, repository, RUN_STAGE)
        (checkout.root / "locks/authed/base.json").write_text(base_json(offline, offline, None))

        refused = checkout.run("build", "authed", "--push", DOCKER_CONFIG=str(config))

        assert refused.returncode == 3, refused.stderr[-3000:]
        said = flat(refused.stderr)
        assert "local only, not in the registry" in said and f"{repository}:v1-amd64-cpu" in said
        assert "docker login" in said and "Traceback" not in said
        env = dict(os.environ, DOCKER_CONFIG=str(config))
        login = [CLIENT, "login", "-u", USER, "--password-stdin", locked.host]
        subprocess.run(login, input=PASSWORD, env=env, check=True, capture_output=True, text=True)

        again = checkout.run("build", "authed", "--push", DOCKER_CONFIG=str(config))

        assert again.returncode == 0, again.stderr[-3000:]
        assert f"pushed {repository}:latest-amd64-cpu sha256:" in flat(again.stdout)
        for text in (refused.stdout, refused.stderr, again.stdout, again.stderr):
            assert PASSWORD not in text
        log = (checkout.root / "build/reports/authed/build.log").read_text()
        assert PASSWORD not in log


# ----------------------------------------------------------------------------- bases


def test_a_registry_base_is_pulled_by_digest_recorded_and_a_repushed_tag_is_caught(
    checkout: Checkout,
    registry: Registry,
    base_image: BaseImageFactory,
    cleanup: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    offline = base_image()
    upstream = f"{registry.host}/{TEST_REPOSITORY}/vllm-openai"
    base = f"{upstream}:glm53-amd64"
    cleanup += [upstream, f"{registry.host}/{TEST_REPOSITORY}/pinned"]
    cleanup.append(f"{registry.host}/{TEST_REPOSITORY}/floating")
    first = push(offline, base)
    forget(base, f"{upstream}@{first}")
    floating = checkout.write(
        "floating", base, f"{registry.host}/{TEST_REPOSITORY}/floating", RUN_STAGE
    )

    recorded = checkout.run("lock", "floating", "--record-base")

    assert recorded.returncode == 0, recorded.stderr[-3000:]
    assert f"pulling {base}" in flat(recorded.stderr)
    record = json.loads((checkout.root / "locks/floating/base.json").read_text())
    assert record["repo_digest"] == f"{upstream}@{first}"

    # the tag is re-pushed with other contents: alpha 0.9 in /opt/venv
    folder = tmp_path_factory.mktemp(f"{TAG}-repushed")
    (wheel,) = checkout.index.wheels.glob("alpha-0.9-*.whl")
    shutil.copy(wheel, folder / wheel.name)
    (folder / "Dockerfile").write_text(
        f"FROM {offline}\nCOPY {wheel.name} /tmp/\n"
        f"RUN {PYTHON} -m pip install -q --no-index --no-deps /tmp/{wheel.name}\n"
    )
    docker("build", "--network", "none", "-q", "-t", base, str(folder))
    second = push(base, base)
    assert second != first
    forget(base, f"{upstream}@{first}", f"{upstream}@{second}")

    pinned = checkout.write(
        "pinned", base, f"{registry.host}/{TEST_REPOSITORY}/pinned", RUN_STAGE, digest=first
    )
    locked = checkout.run("lock", "pinned", "--record-base")
    assert locked.returncode == 0, locked.stderr[-3000:]
    assert f"pulling {base}@{first}" in flat(locked.stderr)  # the pin holds after the re-push
    assert docker_host.image_info(f"{base}@{first}").id == docker_host.image_info(offline).id
    built = pinned.build()
    assert built.returncode == 0, built.stderr[-3000:]

    refused = floating.build()  # its tag is not here: pulled, and it is not the recorded one

    assert refused.returncode == 1, refused.stderr[-3000:]
    said = flat(refused.stderr)
    assert f"pulling {base}" in said and "base drifted" in said
    assert f"repository digest {first} recorded" in said and "alpha" in said
    assert "no layer was built" in said
    assert not (checkout.root / "build/reports/floating/build.log").exists()
    assert images_of(f"{registry.host}/{TEST_REPOSITORY}/floating") == {}


# ----------------------------------------------------------------------------- two engines


def test_build_on_a_second_engine_push_pull_and_audit_here_then_reuse_its_cache(
    checkout: Checkout,
    registry: Registry,
    engine: SecondEngine,
    base_image: BaseImageFactory,
    cleanup: list[str],
) -> None:
    offline = base_image()
    base = f"{registry.host}/{TEST_REPOSITORY}/base:bookworm-amd64"
    repository = f"{registry.host}/{TEST_REPOSITORY}/remote"
    cleanup += [repository, base.rpartition(":")[0]]
    digest = push(offline, base)
    project = checkout.write("remote", base, repository, PIP_STAGES, digest=digest)
    base_record = base_json(offline, base, digest)
    (checkout.root / "locks/remote/base.json").write_text(base_record)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])
    project.lock("v2-01", "v2.in", [("nccl-like", "2.30.0")])
    cache = f"{repository}:buildcache"

    there = checkout.run(
        "build", "remote", "--docker-host", engine.host, "--push", "--cache-to", cache
    )

    assert there.returncode == 0, there.stderr[-3000:]
    assert f"pulling {base}@{digest}" in flat(there.stderr)
    assert f"engine at {engine.host}" in flat(there.stderr)
    assert registry.tags(f"{TEST_REPOSITORY}/remote") == [
        "buildcache", "latest-amd64-cpu", "v1-amd64-cpu", "v2-amd64-cpu",
    ]  # fmt: skip
    assert f"{repository}:v2-amd64-cpu" in docker(
        "images", "--format", "{{.Repository}}:{{.Tag}}", host=engine.host
    )
    assert images_of(repository) == {}  # built there, not here
    reports = checkout.root / "build/reports/remote"
    assert json.loads((reports / "v2/report.json").read_text())["verdict"] == "pass"
    assert (reports / "v2/sbom.cdx.json").is_file() and (reports / "push.json").is_file()

    ref = f"{repository}:v2-amd64-cpu"
    # the same engine chosen by $DOCKER_HOST, and by a docker context the CLI wrote
    assert checkout.run("audit-deps", "--image", ref, DOCKER_HOST=engine.host).returncode == 0
    config = checkout.root / "docker-config"
    created = ["context", "create", f"{TAG}-second", "--docker", f"host={engine.host}"]
    docker("--config", str(config), *created)
    by_context = checkout.run(
        "audit-deps", "--image", ref, DOCKER_CONFIG=str(config), DOCKER_CONTEXT=f"{TAG}-second"
    )
    assert by_context.returncode == 0, by_context.stderr[-3000:]
    docker("pull", ref)
    audited = checkout.run("audit-deps", "--image", ref, "--format", "json")
    assert audited.returncode == 0, audited.stderr[-3000:]
    assert json.loads(audited.stdout)["verdict"] == "pass"
    against = checkout.run(
        "audit-deps", "--image", ref, "--against", f"{base}@{digest}", "--format", "json"
    )
    assert against.returncode == 0, against.stderr[-3000:]
    found = json.loads(against.stdout)["sections"]
    added = {(f["rule"], f["package"], f["after"]) for s in found for f in s["findings"]}
    assert {("added", "alpha", "1.0"), ("added", "nccl-like", "2.30.0")} <= added
    for tag in list(images_of(repository)):
        forget(tag)

    here = checkout.run("build", "remote", "--cache-from", cache)

    assert here.returncode == 0, here.stderr[-3000:]
    said = here.stderr
    assert "cached: v1 layer 1 (requirements/v1.in)" in said, said[-3000:]
    assert "cached: v2 layer 1 (requirements/v2.in)" in said, said[-3000:]
