"""``lock`` inside real base images: the image's own interpreter, and arm64 under emulation."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.lock.files import BaseRecord, parse_base, parse_lock
from tests.support.cli import run_lock
from tests.support.fixtures import BaseImageFactory, Wheelhouse
from tests.support.project import ProjectSpec, pip_recipe_toml, write_project

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def image_project(root: Path, index: str, image: str, platform: str, v1: str) -> Path:
    """A recipe on ``image`` with no base record yet: the run must record it first."""
    toml = pip_recipe_toml(["v1", "v2"], base=image, platform=platform, index_url=index)
    spec = ProjectSpec("t", toml, {"v1.in": v1, "v2.in": "alpha\n"})
    return write_project(root, spec)


def lock_in_image(
    root: Path, index: str, image: str, platform: str, monkeypatch: pytest.MonkeyPatch
) -> BaseRecord:
    """``lock t`` run in ``root`` on a new project on ``image``; the base record it wrote."""
    image_project(root, index, image, platform, "native\n")
    monkeypatch.chdir(root)
    assert run_lock("t") == 0
    return parse_base((root / "locks/t/base.json").read_bytes(), "base.json")


@pytest.fixture
def native_wheels(wheelhouse: Wheelhouse) -> Wheelhouse:
    """``native`` 2.0 ships only an aarch64 wheel; 1.0 is pure Python."""
    wheelhouse("alpha", "1.0")
    wheelhouse("native", "1.0")
    wheelhouse("native", "2.0", tag="py3-none-manylinux2014_aarch64")
    return wheelhouse


def pins(root: Path, slug: str) -> dict[str, str]:
    lock = parse_lock((root / f"locks/t/{slug}.txt").read_bytes(), slug)
    return {name: pin.version for name, pin in lock.pins.items()}


def test_lock_inside_the_bookworm_base_image(
    tmp_path: Path,
    native_wheels: Wheelhouse,
    local_index: str,
    base_image: BaseImageFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    image = base_image("bookworm", "amd64")
    record = lock_in_image(tmp_path, local_index, image, "linux/amd64", monkeypatch)
    environment = record.environments[0]
    assert environment.interpreter == "/opt/venv/bin/python"
    assert environment.python.startswith("3.11.")
    assert environment.markers["platform_machine"] == "x86_64"
    assert pins(tmp_path, "v1-01") == {"native": "1.0"}  # the aarch64 wheel does not fit here
    assert pins(tmp_path, "v2-01") == {"alpha": "1.0"}
    capsys.readouterr()
    assert run_lock("t", "--record-base") == 0  # re-recording an unchanged base changes nothing
    out = capsys.readouterr().out
    assert "base: no change" in out and "nothing to compile" in out
    assert run_lock("t", "--check") == 0


@pytest.mark.emulation
def test_an_arm64_lock_on_this_machine_has_arm64_markers(
    tmp_path: Path,
    native_wheels: Wheelhouse,
    local_index: str,
    base_image: BaseImageFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    image = base_image("bookworm", "arm64")
    record = lock_in_image(tmp_path, local_index, image, "linux/arm64", monkeypatch)
    assert record.environments[0].markers["platform_machine"] == "aarch64"
    assert pins(tmp_path, "v1-01") == {"native": "2.0"}  # only installable on aarch64
    (tmp_path / "images/t/requirements/v2.in").write_text("alpha>=1\n")
    assert run_lock("t", "--host") == 2  # this amd64 host cannot stand in for arm64
