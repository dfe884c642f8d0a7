"""Opt-in: the real-stack example against the real index (``--network``) and Docker (``--docker``).

- ``lock`` (uv, on this machine) of the example plus a stage asking for ``torch==2.13.0`` exits
  1 naming ``nvidia-nccl-cu13 2.30.7 -> 2.29.7``, the base as its installer and torch 2.13.0 as
  the asker, and writes nothing (the fixture of the offline tests is that lock's body);
- the dry build of the example on its arm64 replica (qemu) tags ``…-dry`` only, moves no
  ``latest`` tag, and its patch layer skips itself on the stand-ins;
- the pip-tools backend locks a small extra layer of the example inside the replica under qemu
  with the same pins as uv (the differential pattern of the lock tests). Measured once on a
  loaded 2-core machine: pip-compile under emulation against the 199 stand-ins had not finished
  after 30 minutes (uv: 4 s); run it where time allows.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.docker import host as docker_host
from audit.lock.files import parse_lock
from tests.support.docker_build import images_of
from tests.support.real_stack import FIXTURE, IMAGE

ROOT = Path(__file__).resolve().parents[1]
REPLICA = "layer-audit/replica:vllm-0.33.0-arm64"


def project(tmp_path: Path) -> Path:
    for part in (f"images/{IMAGE}", f"locks/{IMAGE}", "templates"):
        shutil.copytree(ROOT / part, tmp_path / part)
    return tmp_path


def audit(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LAYER_AUDIT_DOCKER="/usr/bin/docker")
    return subprocess.run([sys.executable, "-m", "audit", *argv], cwd=root, env=env,
                          capture_output=True, text=True, check=False, timeout=3600)  # fmt: skip


@pytest.mark.network
def test_lock_refuses_torch_2_13_naming_the_nccl_downgrade_and_its_asker(tmp_path: Path) -> None:
    root = project(tmp_path)
    folder = root / "images" / IMAGE
    with (folder / "image.toml").open("a") as toml:
        toml.write((FIXTURE / "v3-stage.toml").read_text())
    shutil.copy(FIXTURE / "v3-torch.in", folder / "requirements" / "v3-torch.in")
    locked = audit(root, "lock", IMAGE)
    assert locked.returncode == 1, locked.stderr[-3000:]
    said = locked.stderr
    assert "v3 layer 1 (requirements/v3-torch.in)" in said
    assert (
        "downgraded: nvidia-nccl-cu13 2.30.7 -> 2.29.7 (installed by the base image): "
        "torch 2.13.0 requires nvidia-nccl-cu13==2.29.7" in said
    )
    assert not (root / "locks" / IMAGE / "v3-01.txt").exists()


@pytest.fixture
def dry_tags() -> Iterator[str]:
    repository = "layer-audit/vllm-arm64-cu13"
    before = images_of(repository)
    yield repository
    for tag in set(images_of(repository)) - set(before):
        docker_host.remove_image(tag)


@pytest.mark.docker
@pytest.mark.emulation
@pytest.mark.slow
def test_the_dry_build_of_the_example_tags_only_dry_references(
    tmp_path: Path, dry_tags: str
) -> None:
    if not docker_host.image_exists(REPLICA):
        made = audit(ROOT, "base-image", "--replica", f"images/{IMAGE}/replica/vllm-0.33.0.txt",
                     "--arch", "arm64")  # fmt: skip
        assert made.returncode == 0, made.stderr[-3000:]
        recorded = audit(project(tmp_path), "lock", IMAGE, "--record-base")
        assert recorded.returncode == 0, recorded.stderr[-3000:]
        root = tmp_path
    else:
        root = project(tmp_path)
    built = audit(root, "build", IMAGE, "--no-cache")  # the patch layer runs again
    assert built.returncode == 0, built.stderr[-3000:]
    log = (root / "build" / "reports" / IMAGE / "build.log").read_text()
    assert "dry build:" in built.stderr and "nothing to patch" in built.stderr + log
    tags = set(images_of(dry_tags))
    assert f"{dry_tags}:v2-arm64-cu130-dry" in tags and f"{dry_tags}:v1-arm64-cu130-dry" in tags
    assert not {t for t in tags if not t.endswith("-dry")}  # nothing runnable, no latest


@pytest.mark.docker
@pytest.mark.network
@pytest.mark.emulation
@pytest.mark.slow
def test_pip_tools_in_the_replica_pins_what_uv_pins(tmp_path: Path) -> None:
    assert docker_host.image_exists(REPLICA), "make the replica first (README)"
    pins: dict[str, set[tuple[str, str]]] = {}
    for backend in ("uv", "pip-tools"):
        root = project(tmp_path / backend)
        folder = root / "images" / IMAGE
        toml = folder / "image.toml"
        toml.write_text(toml.read_text().replace('resolver = "uv"', f'resolver = "{backend}"')
                        + '\n[[stage]]\nname = "v3"\n  [[stage.layer]]\n'
                        '  pip = "requirements/v3-extra.in"\n')  # fmt: skip
        (folder / "requirements" / "v3-extra.in").write_text("humanize==4.12.3\n")
        locked = audit(root, "lock", IMAGE)
        assert locked.returncode == 0, locked.stderr[-3000:]
        lock = parse_lock((root / "locks" / IMAGE / "v3-01.txt").read_bytes(), "v3-01")
        pins[backend] = {(name, pin.version) for name, pin in lock.pins.items()}
    assert pins["uv"] == pins["pip-tools"] and ("humanize", "4.12.3") in pins["uv"]
