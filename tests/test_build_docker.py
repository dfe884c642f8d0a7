"""``python -m audit build`` end to end against the real Docker daemon (``pytest --docker``).

One offline base image for every test (the ``base_image`` fixture), tiny wheels served on
127.0.0.1 (the build reaches them with ``--network host``, chosen automatically for a loopback
index), locks written directly in the lock format with the wheels' real hashes. Every image
a test makes is tagged under ``layer-audit-test/`` and removed afterwards.
"""

from __future__ import annotations

import hashlib
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

from audit.core.snapshot import SCRIPT_PATH, parse_snapshot
from audit.engines import docker_host
from audit.engines.docker_host import BindMount
from audit.plan.lock import RESOLVER, layer_inputs, pip_steps, read_base_digest
from audit.plan.lockfile import BaseRecord, lock_relpath, parse_lock, render_base, render_lock
from audit.plan.recipe_parse import load_recipe
from audit.plan.sources import DirectorySource
from tests.support.fixtures import BaseImageFactory
from tests.support.pkgindex import serve_index
from tests.support.wheels import make_wheel

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[1]
PYTHON = "/opt/venv/bin/python"
CLIENT = "/usr/bin/docker"
WHEELS = [
    ("alpha", "1.0", ()),
    ("alpha", "0.9", ()),
    ("nccl-like", "2.30.0", ()),
    ("nccl-like", "2.29.7", ()),
    ("flashy", "1.0", ("nccl-like==2.29.7",)),
    ("cutlass-dsl", "4.3.0", ()),
    ("cutlass-dsl", "4.4.0", ()),
    ("cutlass-dsl-libs-base", "4.3.0", ()),
]

# One prefix per checkout, so two suites on one Docker engine never share a tag.
TEST_REPOSITORY = os.environ.get("AUDIT_TEST_REPOSITORY", "layer-audit-test")


@dataclass(frozen=True)
class Index:
    url: str
    wheels: Path

    def sha256(self, name: str, version: str) -> str:
        (path,) = self.wheels.glob(f"{name.replace('-', '_')}-{version}-*.whl")
        return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    wheels = tmp_path_factory.mktemp("wheels")
    for name, version, requires in WHEELS:
        make_wheel(wheels, name, version, requires=requires)
    with serve_index(wheels) as url:
        yield Index(url, wheels)


def base_record(image: str, platform: str) -> str:
    """``base.json`` of ``image`` as ``nox -s lock --record-base`` would write it."""
    mount = BindMount(SCRIPT_PATH.parent, "/layer-audit-snapshot")
    out = docker_host.run_in_image(
        image, [PYTHON, "/layer-audit-snapshot/snapshot.py"], mounts=[mount], platform=platform
    )
    info = docker_host.image_info(image)
    record = BaseRecord(image, info.id, None, parse_snapshot(out.encode(), image))
    return render_base(record)


@dataclass
class Project:
    """A throwaway project checkout: templates, one recipe, its locks."""

    root: Path
    index: Index
    name: str

    @property
    def repository(self) -> str:
        return f"{TEST_REPOSITORY}/{self.name}"

    def build(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, LAYER_AUDIT_DOCKER=CLIENT, PYTHONPATH=str(REPO_ROOT))
        return subprocess.run(
            [sys.executable, "-m", "audit", "build", self.name, *args],
            cwd=self.root, env=env, capture_output=True, text=True, check=False, timeout=900,
        )  # fmt: skip

    def lock(self, slug: str, requirements: str, pins: list[tuple[str, str]]) -> None:
        """Write ``slug``'s lock of ``pins`` as ``lock`` would: fresh against the current inputs
        (the build refuses a stale one). Earlier layers' locks must be written first."""
        source = DirectorySource(self.root)
        recipe = load_recipe(source, self.name)
        (step,) = [s for s in recipe.steps() if s.slug == slug]
        assert step.layer.requirements.endswith(requirements)  # type: ignore[union-attr]
        body = "".join(
            f"{n}=={v} \\\n    --hash=sha256:{self.index.sha256(n, v)}\n" for n, v in pins
        )
        base = read_base_digest(source, recipe)
        assert base is not None
        earlier = {
            s.slug: parse_lock(source.read_bytes(lock_relpath(recipe, s)), s.slug).content_digest
            for s in pip_steps(recipe)[: [p.slug for p in pip_steps(recipe)].index(slug)]
        }
        inputs = layer_inputs(source, recipe, step, base[1], earlier)
        text = render_lock(self.name, step, RESOLVER, inputs.digests, body)
        (self.root / "locks" / self.name / f"{slug}.txt").write_text(text)


def make_project(
    tmp_path: Path, index: Index, name: str, toml: str, base: str, base_json: str
) -> Project:
    shutil.copytree(REPO_ROOT / "templates", tmp_path / "templates")
    folder = tmp_path / "images" / name
    (folder / "requirements").mkdir(parents=True)
    header = (
        f'[image]\nbase = "{base}"\nplatform = "linux/{base.rsplit("-", 1)[1]}"\n'
        f'cuda = "cpu"\ninterpreters = ["{PYTHON}"]\n'
        f'repository = "{TEST_REPOSITORY}/{name}"\nindex_url = "{index.url}"\n\n'
    )
    (folder / "image.toml").write_text(header + toml)
    for stage in ("v1", "v2"):
        (folder / "requirements" / f"{stage}.in").write_text("# test\nalpha\n")
    (tmp_path / "locks" / name).mkdir(parents=True)
    (tmp_path / "locks" / name / "base.json").write_text(base_json)
    return Project(tmp_path, index, name)


def two_stages(v2_layer: str, *, smoke: str = "", policy: str = "") -> str:
    smoke_line = f"smoke = {json.dumps(smoke)}\n" if smoke else ""
    return (
        f'[[stage]]\nname = "v1"\n{smoke_line}'
        '[[stage.layer]]\npip = "requirements/v1.in"\n\n'
        f'[[stage]]\nname = "v2"\n[[stage.layer]]\n{v2_layer}\n\n{policy}'
    )


def images_of(repository: str) -> dict[str, str]:
    """tag -> image id of every local image of ``repository``."""
    daemon = docker_host.daemon()
    found = {}
    for image in daemon.images.list(name=repository):
        for tag in image.tags:
            if tag.startswith(f"{repository}:"):  # the image may carry other names too
                found[tag] = image.id
    return found


@pytest.fixture(scope="module")
def amd64(base_image: BaseImageFactory) -> tuple[str, str]:
    image = base_image("bookworm", "amd64")
    return image, base_record(image, "linux/amd64")


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    repositories: list[str] = []
    yield repositories
    daemon = docker_host.daemon()
    for repository in repositories:
        for tag in images_of(repository):
            daemon.images.remove(tag)  # untags only while the image has other names


def test_nccl_downgrade_fails_at_its_layer_and_moves_no_tag(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    project = make_project(
        tmp_path, index, "nccl", two_stages('pip = "requirements/v2.in"'), *amd64
    )
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("nccl-like", "2.30.0")])
    project.lock("v2-01", "v2.in", [("flashy", "1.0"), ("nccl-like", "2.29.7")])
    daemon = docker_host.daemon()
    daemon.images.get(amd64[0]).tag(project.repository, "v2-amd64-cpu")  # a tag from before
    before = images_of(project.repository)

    done = project.build()

    assert done.returncode == 1, done.stderr[-3000:]
    assert "nccl-like" in done.stderr and "2.30.0 -> 2.29.7" in done.stderr
    assert "v2 layer 1" in done.stderr and "downgraded" in done.stderr
    assert "[[policy.waiver]]" in done.stderr
    assert images_of(project.repository) == before  # nothing tagged, nothing moved
    assert (tmp_path / "build" / "reports" / "nccl" / "build.log").is_file()


def test_lockstep_skew_fails(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    policy = '[policy.lockstep]\ncutlass = ["cutlass-dsl", "cutlass-dsl-libs-*"]\n'
    toml = two_stages('pip = "requirements/v2.in"', policy=policy)
    project = make_project(tmp_path, index, "skew", toml, *amd64)
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("cutlass-dsl", "4.3.0"), ("cutlass-dsl-libs-base", "4.3.0")])
    project.lock("v2-01", "v2.in", [("cutlass-dsl", "4.4.0")])

    done = project.build()

    assert done.returncode == 1, done.stderr[-3000:]
    assert "lockstep" in done.stderr and "cutlass-dsl-libs-base 4.3.0" in done.stderr
    assert images_of(project.repository) == {}


def test_a_shell_layer_that_downgrades_by_hand_fails(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    command = (
        f"PIP_CONFIG_FILE=/dev/null {PYTHON} -m pip install -q --no-deps "
        f"--index-url {index.url} alpha==0.9"
    )
    project = make_project(
        tmp_path, index, "byhand", two_stages(f"run = {json.dumps(command)}"), *amd64
    )
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])

    done = project.build()

    assert done.returncode == 1, done.stderr[-3000:]
    assert "alpha" in done.stderr and "1.0 -> 0.9" in done.stderr
    assert "v2 layer 1 (run)" in done.stderr


def test_a_clean_recipe_builds_tags_labels_and_extracts_its_trail_without_leaking_the_ca(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    toml = two_stages('run = "echo built > /etc/built"', smoke=f"{PYTHON} -c 'import alpha'")
    project = make_project(tmp_path, index, "clean", toml, *amd64)
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])
    marker = "LAYER-AUDIT-TEST-CA-7f3a9c"
    bundle = tmp_path / "corp-ca.pem"
    bundle.write_text(f"-----BEGIN CERTIFICATE-----\n{marker}\n-----END CERTIFICATE-----\n")

    done = project.build("--ca-bundle", str(bundle), "--format", "json")

    assert done.returncode == 0, done.stderr[-3000:]
    tags = images_of(project.repository)
    repo = project.repository
    assert set(tags) == {f"{repo}:v1-amd64-cpu", f"{repo}:v2-amd64-cpu", f"{repo}:latest-amd64-cpu"}
    assert tags[f"{repo}:v2-amd64-cpu"] == tags[f"{repo}:latest-amd64-cpu"]
    printed = json.loads(done.stdout)  # stdout holds the JSON alone; progress went to stderr
    assert printed["schema"] == "layer-audit.build/1" and printed["pushed"] == []
    built = {entry["stage"]: entry for entry in printed["stages"]}
    assert set(built["v2"]["tags"]) == {f"{repo}:v2-amd64-cpu", f"{repo}:latest-amd64-cpu"}
    assert built["v1"]["image_id"] == tags[f"{repo}:v1-amd64-cpu"]
    assert built["v2"]["image_id"] == tags[f"{repo}:v2-amd64-cpu"]
    assert {r["stage"]: r["verdict"] for r in printed["reports"]} == {"v1": "pass", "v2": "pass"}
    assert printed["log"] == "build/reports/clean/build.log"
    labels = docker_host.image_info(f"{repo}:v2-amd64-cpu").labels
    assert labels["io.layer-audit.stage"] == "v2"
    assert labels["org.opencontainers.image.created"]
    assert labels["io.layer-audit.recipe.digest"].startswith("sha256:")
    reports = tmp_path / "build" / "reports" / "clean" / "v2"
    report: dict[str, Any] = json.loads((reports / "report.json").read_text())
    assert report["verdict"] == "pass"
    assert (reports / "trail" / "v1-01.snapshot.json").is_file()
    assert (reports / "trail" / "v2-01.findings.json").is_file()
    assert "alpha" in (reports / "report.md").read_text()
    for ref in (f"{repo}:v1-amd64-cpu", f"{repo}:v2-amd64-cpu"):
        history = subprocess.run(
            [CLIENT, "history", "--no-trunc", ref], capture_output=True, text=True, check=True
        ).stdout
        inspect = subprocess.run(
            [CLIENT, "inspect", ref], capture_output=True, text=True, check=True
        ).stdout
        for text in (history, inspect):
            assert marker not in text and str(bundle) not in text
            assert "PIP_CERT=/run" not in text.replace("export PIP_CERT=/run", "")
    assert marker not in json.dumps(report)


def build_alpha_on(
    tmp_path: Path, index: Index, image: str, name: str, cleanup: list[str]
) -> Project:
    """Project ``name``: one pip stage (alpha 1.0) on ``image``, locked and built successfully."""
    base_json = base_record(image, f"linux/{image.rsplit('-', 1)[1]}")
    toml = '[[stage]]\nname = "v1"\n[[stage.layer]]\npip = "requirements/v1.in"\n'
    project = make_project(tmp_path, index, name, toml, image, base_json)
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])
    done = project.build()
    assert done.returncode == 0, done.stderr[-3000:]
    return project


@pytest.mark.emulation
def test_an_arm64_build_under_emulation_is_tagged_arm64(
    tmp_path: Path, index: Index, base_image: BaseImageFactory, cleanup: list[str]
) -> None:
    project = build_alpha_on(tmp_path, index, base_image("bookworm", "arm64"), "arm", cleanup)

    ref = f"{project.repository}:v1-arm64-cpu"
    assert set(images_of(project.repository)) == {ref, f"{project.repository}:latest-arm64-cpu"}
    assert docker_host.image_info(ref).architecture == "arm64"


def pyc_files(ref: str) -> set[str]:
    """Every ``.pyc`` in the image outside the packages a layer installs on purpose."""
    argv = ["find", "/", "-xdev", "-name", "*.pyc", "-not", "-path", "*/site-packages/*"]
    return set(docker_host.run_in_image(ref, argv).split())


def test_the_guard_runs_under_python_39_and_writes_no_bytecode(
    tmp_path: Path, index: Index, base_image: BaseImageFactory, cleanup: list[str]
) -> None:
    image = base_image("bullseye", "amd64")
    project = build_alpha_on(tmp_path, index, image, "oldpython", cleanup)

    base_json = json.loads((tmp_path / "locks/oldpython/base.json").read_text())
    assert base_json["snapshot"]["environments"][0]["python"].startswith("3.9.")
    ref = f"{project.repository}:v1-amd64-cpu"
    trail = tmp_path / "build" / "reports" / "oldpython" / "v1" / "trail"
    findings = json.loads((trail / "v1-01.findings.json").read_text())
    assert [(f["rule"], f["package"]) for f in findings["findings"]] == [("added", "alpha")]
    assert pyc_files(ref) == pyc_files(image)
    assert not list((tmp_path / "build" / "oldpython" / "_guard").rglob("__pycache__"))
