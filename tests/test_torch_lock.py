"""Opt-in (``--docker --network``): lock ``torch==2.13.0`` from the real index inside the
bookworm base image, the way the lock container must cope with a 500 MB+ CUDA stack: downloads
and build trees on disk, not in a small tmpfs, and the time it takes printed for the README."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.cli import run_lock
from tests.support.fixtures import BaseImageFactory
from tests.support.project import ProjectSpec, pip_recipe_toml, write_project

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]


def test_torch_locks_inside_the_base_image_from_the_real_index(
    tmp_path: Path,
    base_image: BaseImageFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    image = base_image("bookworm", "amd64")
    toml = pip_recipe_toml(["v1"], base=image, index_url="https://pypi.org/simple")
    write_project(tmp_path, ProjectSpec("t", toml, {"v1.in": "torch==2.13.0\n"}))
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    assert run_lock("t") == 0, capsys.readouterr().err[-3000:]
    seconds = time.monotonic() - started
    text = (tmp_path / "locks/t/v1-01.txt").read_text()
    assert "\ntorch==2.13.0 \\" in text
    print(f"\ntorch==2.13.0 locked inside {image} in {seconds:.0f} s")
