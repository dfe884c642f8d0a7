"""``layer-audit init`` then ``lock`` and ``build`` in an empty git repository (real Docker).

The scaffold's example recipe is used as a user would: its requirement pointed at a tiny wheel
served on 127.0.0.1 (no network needed), its repository under this checkout's test prefix, and
its shipped base record re-recorded from this engine's base image before the build.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.docker import host as docker_host
from tests.support.docker_build import CLIENT, REPO_ROOT, TEST_REPOSITORY, images_of
from tests.support.fixtures import BaseImageFactory
from tests.support.gitrepo import git
from tests.support.pkgindex import serve_index
from tests.support.wheels import make_wheel

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def audit(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LAYER_AUDIT_DOCKER=CLIENT, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "audit", *argv],
        cwd=root, env=env, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip


@pytest.fixture
def index_url(tmp_path: Path) -> Iterator[str]:
    """A package index on 127.0.0.1 serving one tiny wheel, alpha 1.0."""
    make_wheel(tmp_path / "wheels", "alpha", "1.0")
    with serve_index(tmp_path / "wheels") as url:
        yield url


@pytest.fixture
def repository() -> Iterator[str]:
    name = f"{TEST_REPOSITORY}/init-example"
    yield name
    daemon = docker_host.daemon()
    for tag in images_of(name):
        daemon.images.remove(tag)


def test_init_then_lock_and_build(
    tmp_path: Path, index_url: str, base_image: BaseImageFactory, repository: str
) -> None:
    base_image("bookworm", "amd64")
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    assert audit(root, "init").returncode == 0
    recipe = root / "images/example/image.toml"
    text = recipe.read_text().replace(
        'repository = "local/example"', f'repository = "{repository}"'
    )
    recipe.write_text(text.replace("[[stage]]", f'index_url = "{index_url}"\n\n[[stage]]', 1))
    requirements = root / "images/example/requirements/v1.in"
    requirements.write_text(requirements.read_text().replace("requests>=2.31", "alpha>=1.0"))

    # the example comes recorded from layer-audit's own build of the base: re-record it from
    # this engine's image first, as the recipe's comment says (else the build: "base drifted")
    locked = audit(root, "lock", "example", "--record-base")
    assert locked.returncode == 0, locked.stdout + locked.stderr
    built = audit(root, "build", "example")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert f"{repository}:v1-amd64-cpu" in images_of(repository)
    assert audit(root, "init").returncode == 0  # still idempotent after a build
    assert "alpha" in (root / "locks/example/v1-01.txt").read_text()
