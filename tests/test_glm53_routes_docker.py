"""The seed's routes, dry-built on their replicas (arm64 under qemu): real guard, no runnable tag.

For each GLM-5.3-Flash route, the replica of its committed day-0 list is made again here (with
the committed stand-ins' metadata), the route is recorded on it and locked (uv, the nightly from
its stand-in index on 127.0.0.1): the same pins as the committed locks. Then every stage builds
dry: each layer runs, the guard judges it (the nightly layer's overrides are shown with the
requirements they break), the patches find stand-ins and skip, every tag ends in ``-dry``, and
the build and its reports name the replica and its stand-ins.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.docker import host as docker_host
from audit.lock.files import parse_lock
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.docker_build import TEST_REPOSITORY, images_of
from tests.support.fixtures import BaseImageFactory
from tests.support.glm53 import ROOT, ROUTES, Route, copy_project, nightly_index

__all__ = ["nightly_index"]  # the fixture, from tests/support/glm53.py

pytestmark = [pytest.mark.docker, pytest.mark.emulation, pytest.mark.slow]


def audit(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LAYER_AUDIT_DOCKER="/usr/bin/docker", PYTHONPATH=str(ROOT))
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return subprocess.run([sys.executable, "-m", "audit", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=1800)  # fmt: skip


@pytest.fixture
def made(base_image: BaseImageFactory) -> Iterator[list[str]]:
    """Repositories and tags this test makes; removed after it."""
    base_image("bookworm", "arm64")
    names: list[str] = []
    yield names
    for name in names:
        for tag in images_of(name) if ":" not in name else [name]:
            docker_host.remove_image(tag)


def on_test_replica(root: Path, route: Route, replica: str) -> str:
    """The copy's recipe built FROM the test's replica and tagged in the test's repository."""
    toml = root / "images" / route.image / "image.toml"
    repository = f"{TEST_REPOSITORY}/{route.image}"
    text = toml.read_text()
    text = text.replace(f'base = "layer-audit/replica:{route.pins}-arm64"', f'base = "{replica}"')
    text = text.replace(f'repository = "local/{route.image}"', f'repository = "{repository}"')
    toml.write_text(text)
    return repository


def pins(root: Path, route: Route, slug: str) -> dict[str, str]:
    lock = parse_lock((root / f"locks/{route.image}/{slug}.txt").read_bytes(), slug)
    return {name: pin.version for name, pin in lock.pins.items()}


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_the_route_records_locks_and_dry_builds_on_its_replica(
    name: str, tmp_path: Path, made: list[str], nightly_index: str
) -> None:
    route = ROUTES[name]
    replica = f"{TEST_REPOSITORY}/replica:{route.pins}-arm64"
    made.append(replica)
    built = audit(ROOT, "base-image", "--replica", str(route.pin_list), "--arch", "arm64",
                  "--tag", replica, "--metadata-from", str(route.standins_file))  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    root = copy_project(tmp_path, route)
    repository = on_test_replica(root, route, replica)
    made.append(repository)
    locked = audit(root, "lock", route.image, "--record-base")
    assert locked.returncode == 0, locked.stderr[-3000:]
    for lock in sorted((ROOT / "locks" / route.image).glob("v*-01.txt")):
        slug = lock.stem  # this machine compiles the committed pins again
        assert pins(root, route, slug) == pins(ROOT, route, slug), slug

    # The replica is byte-reproducible, so on an engine that built this route before every
    # layer would come from the BuildKit cache and print nothing: run each layer again.
    done = audit(root, "build", route.image, "--no-cache")
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stderr
    assert "dry build:" in said and "stand-ins (on no reachable index): " in said
    assert all(standin in said for standin in route.standins)
    log = (root / "build" / "reports" / route.image / "build.log").read_text()
    assert "is a stand-in (dry build): nothing to patch" in log
    assert f"guard {route.nightly_stage}-01" in log and "5 warnings" in log  # the overrides
    stages = [stage.name for stage in load_recipe(DirectorySource(root), route.image).stages]
    tags = set(images_of(repository))
    assert tags == {f"{repository}:{stage}-arm64-cu130-dry" for stage in stages}  # no latest
    report = root / "build" / "reports" / route.image / route.nightly_stage / "report.md"
    text = report.read_text()
    assert "recorded from a replica" in text and "kept at 2.30.7 on purpose (override)" in text
