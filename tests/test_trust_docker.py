"""The build trusts nothing it can check, against real images (``pytest --docker``).

Bases are derived from the offline base (``layer-audit/base:bookworm-amd64``): three images
that differ only in the version of ``alpha`` in ``/opt/venv`` (so a base tag can be re-pointed
up or down), and one whose ``PATH`` leaves the venv out, so Debian's PEP 668-marked
``/usr/bin/python3`` is the interpreter. Every build refusal here must come before layer 1
(no build log), exit 1 with the right message, and move no tag. Every image is named under
``$AUDIT_TEST_REPOSITORY`` (``layer-audit-test`` by default) and removed afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.cli.main import main
from audit.docker import host as docker_host
from audit.history.snapshot import SCRIPT_PATH
from audit.lock.files import parse_base
from tests.support.cli import edit
from tests.support.docker_build import (
    CLIENT,
    TEST_REPOSITORY,
    Index,
    Project,
    base_record,
    images_of,
    make_project,
)
from tests.support.fixtures import BaseImageFactory
from tests.support.pkgindex import serve_index
from tests.support.wheels import make_wheel

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TRUST_BASE = f"{TEST_REPOSITORY}/trust-base"
CURRENT = f"{TRUST_BASE}:current-amd64"  # the tag recipes name; tests re-point it
PEP668_BASE = f"{TEST_REPOSITORY}/pep668-base:bookworm-amd64"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ONE_STAGE = '[[stage]]\nname = "v1"\n[[stage.layer]]\npip = "requirements/v1.in"\n'
VERSIONS = ("0.9", "1.0", "2.0")


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    wheels = tmp_path_factory.mktemp("wheels")
    for version in VERSIONS:
        make_wheel(wheels, "alpha", version)
    make_wheel(wheels, "beta", "1.0")
    with serve_index(wheels) as url:
        yield Index(url, wheels)


def derive(tag: str, folder: Path, dockerfile: str) -> str:
    """``docker build`` of ``dockerfile`` in ``folder`` (BuildKit, no network), tagged ``tag``."""
    (folder / "Dockerfile").write_text(dockerfile)
    subprocess.run(
        [CLIENT, "build", "--network", "none", "-q", "-t", tag, str(folder)],
        env=dict(os.environ, DOCKER_BUILDKIT="1"), check=True, capture_output=True, text=True,
    )  # fmt: skip
    return tag


@pytest.fixture(scope="module")
def alpha_bases(
    base_image: BaseImageFactory, index: Index, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """Version -> an image: the offline base with that ``alpha`` installed in /opt/venv."""
    offline = base_image("bookworm", "amd64")
    made = {}
    for version in VERSIONS:
        folder = tmp_path_factory.mktemp(f"alpha-{version}")
        (wheel,) = index.wheels.glob(f"alpha-{version}-*.whl")
        (folder / wheel.name).write_bytes(wheel.read_bytes())
        dockerfile = (
            f"FROM {offline}\nCOPY {wheel.name} /tmp/\n"
            f"RUN /opt/venv/bin/pip install -q --no-index --no-deps /tmp/{wheel.name} "
            f"&& rm /tmp/{wheel.name}\n"
        )
        made[version] = derive(f"{TRUST_BASE}:alpha-{version}-amd64", folder, dockerfile)
    yield made
    for tag in [*made.values(), CURRENT]:
        docker_host.remove_image(tag)


@pytest.fixture(scope="module")
def pep668_base(
    base_image: BaseImageFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The offline base without the venv on PATH: Debian's externally managed python3."""
    folder = tmp_path_factory.mktemp("pep668")
    yield derive(PEP668_BASE, folder, f"FROM {base_image()}\nENV PATH={SYSTEM_PATH}\n")
    docker_host.remove_image(PEP668_BASE)


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    repositories: list[str] = []
    yield repositories
    for repository in repositories:
        for tag in images_of(repository):
            docker_host.remove_image(tag)


def point(tag: str, image: str) -> None:
    """Re-point ``tag`` at ``image`` (what a re-pushed base tag does)."""
    repository, _, name = tag.rpartition(":")
    docker_host.daemon().images.get(image).tag(repository, name)


def refused_before_layer_1(project: Project, tags_before: dict[str, str]) -> str:
    """Build; it must exit 1, build nothing (the last build's log stays as it was) and move no
    tag. Returns stderr."""
    log = project.root / "build" / "reports" / project.name / "build.log"
    before = log.read_bytes()
    done = project.build()
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "no tag was moved" in done.stderr
    assert log.read_bytes() == before
    assert images_of(project.repository) == tags_before
    return " ".join(done.stderr.split())  # rich wraps long lines


def built_project(
    tmp_path: Path, index: Index, name: str, base: str, cleanup: list[str]
) -> tuple[Project, dict[str, str]]:
    """A one-stage project on ``base`` (recorded now), locked fresh, built and tagged."""
    project = make_project(tmp_path, index, name, ONE_STAGE, base, base_record(base, "linux/amd64"))
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])
    done = project.build()
    assert done.returncode == 0, done.stderr[-3000:]
    tags = images_of(project.repository)
    assert set(tags) == {
        f"{project.repository}:v1-amd64-cpu",
        f"{project.repository}:latest-amd64-cpu",
    }
    return project, tags


# ----------------------------------------------------------------------------- stale inputs


def test_an_edited_requirements_file_without_a_new_lock_stops_the_build(
    tmp_path: Path, index: Index, base_image: BaseImageFactory, cleanup: list[str]
) -> None:
    project, tags = built_project(tmp_path, index, "edited", base_image(), cleanup)
    edit(project.root, "images/edited/requirements/v1.in", "alpha", "alpha\nbeta")

    err = refused_before_layer_1(project, tags)
    assert "1 of 1 locks are not fresh" in err
    assert (
        "stale: locks/edited/v1-01.txt (v1 layer 1 (requirements/v1.in)): inputs changed: " in err
    )
    assert "requirements/v1.in" in err and "layer-audit lock edited" in err


def test_a_platform_switch_stops_the_build(
    tmp_path: Path, index: Index, base_image: BaseImageFactory, cleanup: list[str]
) -> None:
    project, tags = built_project(tmp_path, index, "platform", base_image(), cleanup)
    edit(project.root, "images/platform/image.toml", "linux/amd64", "linux/arm64")

    err = refused_before_layer_1(project, tags)
    assert "stale: locks/platform/v1-01.txt" in err
    assert "recorded on linux/amd64, the recipe targets linux/arm64" in err
    assert "re-record the base and re-lock: layer-audit lock platform --record-base" in err


def test_a_changed_base_stops_the_build(
    tmp_path: Path, index: Index, base_image: BaseImageFactory, cleanup: list[str]
) -> None:
    project, tags = built_project(tmp_path, index, "rebased", base_image(), cleanup)
    other = base_image("bullseye", "amd64")
    edit(project.root, "images/rebased/image.toml", base_image(), other)

    err = refused_before_layer_1(project, tags)
    assert "stale: locks/rebased/v1-01.txt" in err
    assert f"records base {base_image()}, the recipe asks for {other}" in err


# ----------------------------------------------------------------------------- drifted base


@pytest.mark.parametrize(("now", "change"), [("2.0", "1.0 -> 2.0"), ("0.9", "1.0 -> 0.9")])
def test_a_re_pointed_base_tag_stops_the_build_as_base_drifted(
    tmp_path: Path,
    index: Index,
    alpha_bases: dict[str, str],
    cleanup: list[str],
    now: str,
    change: str,
) -> None:
    point(CURRENT, alpha_bases["1.0"])
    project, tags = built_project(tmp_path, index, f"drift{now[0]}", CURRENT, cleanup)
    recorded = parse_base((project.root / f"locks/{project.name}/base.json").read_bytes(), "b")
    point(CURRENT, alpha_bases[now])

    err = refused_before_layer_1(project, tags)
    actual = docker_host.image_info(CURRENT).id
    assert f"{project.name}: base drifted: {CURRENT}" in err
    assert f"image id {recorded.image_id} recorded, {actual} now" in err
    counts = "/opt/venv/bin/python: 0 added, 0 removed, 1 changed"  # then each package
    assert f"recorded -> actual: {counts}" in err
    assert f"distributions) /opt/venv/bin/python: alpha {change}" in err
    assert f"layer-audit lock {project.name} --record-base" in err
    assert 'add "alpha' not in err  # not blamed on layer 1


# ----------------------------------------------------------------------------- --from-snapshot

TWO_PYTHONS = '["/opt/venv/bin/python", "/usr/bin/python3"]'


def test_from_snapshot_reproduces_what_record_base_takes_in_the_image(
    tmp_path: Path,
    index: Index,
    base_image: BaseImageFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    image = base_image()
    toml = '[[stage]]\nname = "v1"\n[[stage.layer]]\nrun = "true"\n'
    project = make_project(tmp_path, index, "elsewhere", toml, image, "")
    edit(project.root, "images/elsewhere/image.toml", '["/opt/venv/bin/python"]', TWO_PYTHONS)
    base_json = project.root / "locks/elsewhere/base.json"
    base_json.unlink()
    monkeypatch.chdir(project.root)
    assert main(["lock", "elsewhere", "--record-base"]) == 0
    in_image = json.loads(base_json.read_text())

    # the README's command, one document per interpreter, on "the machine that has the image"
    script = SCRIPT_PATH.as_posix()
    command = (
        f"for py in /opt/venv/bin/python /usr/bin/python3; do {CLIENT} run --rm -i --network none"
        f' --entrypoint "$py" {image} - < {script}; done > base-snapshot.json'
    )
    subprocess.run(["sh", "-c", command], cwd=project.root, check=True)
    base_json.unlink()  # as on a machine that never had a record
    image_id = docker_host.image_info(image).id
    argv = ["lock", "elsewhere", "--record-base", "--from-snapshot", "base-snapshot.json"]
    assert main([*argv, "--image-id", image_id]) == 0
    from_file = json.loads(base_json.read_text())

    assert from_file["snapshot"] == in_image["snapshot"]  # same environments, same digest
    assert from_file["snapshot"]["digest"] == in_image["snapshot"]["digest"]
    assert from_file["image_id"] == in_image["image_id"] == image_id
    assert from_file["source"] == "snapshot-file" and "source" not in in_image
    capsys.readouterr()
    assert main(["lock", "elsewhere", "--check"]) == 0


# ----------------------------------------------------------------------------- PEP 668


def test_a_pep668_base_needs_break_system_packages_in_lock_and_build(
    tmp_path: Path,
    index: Index,
    pep668_base: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cleanup: list[str],
) -> None:
    project = make_project(tmp_path, index, "system", ONE_STAGE, pep668_base, "")
    cleanup.append(project.repository)
    toml = f"images/{project.name}/image.toml"
    edit(project.root, toml, '["/opt/venv/bin/python"]', '["/usr/bin/python3"]')
    (project.root / "locks/system/base.json").unlink()
    monkeypatch.chdir(project.root)

    # lock without the setting: refused when the base is recorded, naming the setting
    assert main(["lock", "system"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "/usr/bin/python3" in err and "externally managed (PEP 668)" in err
    assert "break_system_packages = true" in err
    assert not (project.root / "locks/system/base.json").exists()

    # with it: lock (in the image, with Debian's python3) and build both succeed
    edit(project.root, toml, "cuda = ", "break_system_packages = true\ncuda = ")
    assert main(["lock", "system"]) == 0
    done = project.build()
    assert done.returncode == 0, done.stderr[-3000:]
    tags = images_of(project.repository)
    ref = f"{project.repository}:v1-amd64-cpu"
    where = docker_host.run_in_image(
        ref, ["/usr/bin/python3", "-c", "import alpha; print(alpha.__file__)"]
    )
    assert "/usr/local/lib/python3" in where  # pip's system-wide target, beside Debian's

    # without it, the build stops at pip's refusal: exit 2 naming the setting, no tag moved
    edit(project.root, toml, "break_system_packages = true\n", "")
    done = project.build("--no-cache")
    assert done.returncode == 2, done.stderr[-3000:]
    err = " ".join(done.stderr.split())
    assert "externally managed (PEP 668)" in err and "break_system_packages = true" in err
    assert "Traceback" not in err and images_of(project.repository) == tags
