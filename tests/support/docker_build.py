"""Docker build tests' shared parts: a served index of tiny wheels, a project on disk with fresh
locks, the test repository's images, module fixtures for the amd64 base and cleanup."""

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

import pytest

from audit.docker import host as docker_host
from audit.docker.host import BindMount
from audit.history.snapshot import SCRIPT_PATH, parse_snapshot
from audit.lock.files import BaseRecord, lock_relpath, parse_lock, render_base, render_lock
from audit.lock.plan import RESOLVER, after_inputs, layer_inputs, pip_steps, read_base_digest
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.fixtures import BaseImageFactory
from tests.support.pkgindex import serve_index
from tests.support.wheels import make_wheel

REPO_ROOT = Path(__file__).resolve().parents[2]
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
        earlier, _ = after_inputs(
            {
                s.slug: parse_lock(source.read_bytes(lock_relpath(recipe, s)), s.slug)
                for s in pip_steps(recipe)[: [p.slug for p in pip_steps(recipe)].index(slug)]
            }
        )
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
    for image in daemon.api.images(name=repository):  # one list call, no inspect per image
        for tag in image.get("RepoTags") or ():
            if tag.startswith(f"{repository}:"):  # the image may carry other names too
                found[tag] = image["Id"]
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
