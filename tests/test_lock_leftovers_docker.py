"""``lock`` against real faults: a base without ensurepip, and a run killed with SIGKILL.

Both replay what users met: CUDA bases ship Python without ``python3-venv`` (pip-tools cannot
run inside them), and a ``lock`` killed mid-compile (CI timeout, Ctrl-\\, OOM killer) must leave
nothing that ``git status`` or the next run shows.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.docker.run_label import LABEL
from audit.project.scaffold import gitignore_after
from tests.support.cli import run_lock
from tests.support.fixtures import BaseImageFactory, Wheelhouse
from tests.support.project import ProjectSpec, pip_recipe_toml, write_project

pytestmark = [pytest.mark.docker, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_ensurepip_image(base_image: BaseImageFactory, docker_client: Any) -> Iterator[str]:
    """The bookworm base with ensurepip removed, as CUDA images ship their Python."""
    owner = os.environ.get("AUDIT_TEST_REPOSITORY", "layer-audit-test")
    tag = f"{owner}/no-ensurepip:test"
    dockerfile = f"FROM {base_image('bookworm', 'amd64')}\nRUN rm -rf /usr/lib/python3*/ensurepip\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    yield tag
    docker_client.images.remove(tag, force=True)


def project(root: Path, index: str, image: str) -> Path:
    toml = pip_recipe_toml(["v1", "v2"], base=image, index_url=index)
    return write_project(root, ProjectSpec("t", toml, {"v1.in": "alpha\n", "v2.in": "beta\n"}))


@pytest.fixture
def wheels(wheelhouse: Wheelhouse) -> Wheelhouse:
    wheelhouse("alpha", "1.0")
    wheelhouse("alpha", "2.0")
    wheelhouse("beta", "1.0", requires=["alpha"])
    return wheelhouse


def test_a_base_without_ensurepip_is_bad_input_naming_the_fix(
    tmp_path: Path,
    wheels: Wheelhouse,
    local_index: str,
    no_ensurepip_image: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(project(tmp_path / "p", local_index, no_ensurepip_image))
    assert run_lock("t") == 2
    err = capsys.readouterr().err
    assert "venv/ensurepip" in err
    assert 'resolver = "uv"' in err
    assert "python3-venv" in err
    assert "network" not in err


def our_containers(client: Any, pid: int) -> list[Any]:
    # the engine's one list call: the SDK's containers.list() inspects each container after,
    # and a container another run removes in between fails the call with NotFound
    boxes = client.api.containers(all=True, filters={"label": LABEL})
    return [
        box for box in boxes if str((box.get("Labels") or {}).get(LABEL, "")).endswith(f":{pid}")
    ]


def git(root: Path, *argv: str) -> str:
    done = subprocess.run(["git", *argv], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout


def committed_project(root: Path, index: str, image: str) -> Path:
    """A project as ``init`` leaves it (its .gitignore entries), locked once and committed."""
    project(root, index, image)
    (root / ".gitignore").write_bytes(gitignore_after(None) or b"")
    git(root, "init", "-q")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "add", "-A")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "recipe")
    return root


def start_lock(root: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-m", "audit", "lock", "t"], cwd=root, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def wait_for_container(client: Any, pid: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not our_containers(client, pid):
        assert time.monotonic() < deadline, "the lock run started no labelled container"
        time.sleep(0.05)


def test_sigkill_leaves_nothing_git_or_the_next_run_shows(
    tmp_path: Path,
    wheels: Wheelhouse,
    local_index: str,
    base_image: BaseImageFactory,
    docker_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = committed_project(tmp_path / "p", local_index, base_image("bookworm", "amd64"))
    monkeypatch.chdir(root)
    assert subprocess.run([sys.executable, "-m", "audit", "lock", "t"], cwd=root,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), check=False,
                          capture_output=True).returncode == 0  # fmt: skip
    git(root, "add", "-A")
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "locks")
    (root / "images/t/requirements/v1.in").write_text("alpha<2\n")  # v1 and v2 recompile
    git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "edit")
    run = start_lock(root)
    wait_for_container(docker_client, run.pid)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    left = our_containers(docker_client, run.pid)
    assert left, "the killed run left no container: the test did not kill mid-compile"
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    assert run_lock("t") == 0  # the next run removes what the killed one left, then locks
    assert our_containers(docker_client, run.pid) == []
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob(f"layer-audit-lock-{run.pid}-*"))
    status = git(root, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert status and all(line.startswith(" M locks/t/") for line in status), status
