"""Pytest fixtures shared by every test module (loaded from tests/conftest.py).

- ``wheelhouse``: a temporary directory plus a factory that writes tiny wheels into it.
- ``local_index``: that directory served as a PEP 503 index; yields its URL.
- ``docker_client``: a docker SDK client for the running daemon.
- ``base_image``: ``base_image(suite="bookworm", arch="amd64") -> tag``, an offline Debian
  base image built once per machine by :mod:`audit.base.make` and then reused.
- ``hermetic_session`` (automatic): the session's own caches and pip-tools wheels, below.

Hermetic by default: every session gets its own cache folder (``$XDG_CACHE_HOME`` and
``$LAYER_AUDIT_CACHE``, so ``lock``'s pip-tools environments and pip's caches start empty and
are shared with no other session), and ``lock`` installs pip-tools from a 127.0.0.1 index over
wheels made once (:mod:`tests.support.toolhouse`), never from the public index. The one thing
kept from the user's cache is the Debian root file systems the machine's base images are made
from (minutes of debootstrap, made once per machine like the images themselves).

Docker fixtures skip with the reason when tests run without ``--docker``; under ``--docker``
a daemon that does not answer (or missing emulation) is a failure, never a skip.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from audit.errors import AuditError
from audit.lock.resolvers.job import CACHE_ENV, TOOLS_INDEX_ENV
from tests.support import toolhouse
from tests.support.pkgindex import serve_index
from tests.support.wheels import make_wheel

ROOTFS = Path("layer-audit") / "rootfs"  # under a cache home: see audit.base.make


@dataclass(frozen=True)
class Wheelhouse:
    """A directory of wheels; call it (or ``add``) to write one more."""

    path: Path

    def add(
        self,
        name: str,
        version: str,
        *,
        requires: Sequence[str] = (),
        tag: str = "py3-none-any",
        files: Mapping[str, str | bytes] | None = None,
    ) -> Path:
        return make_wheel(self.path, name, version, requires=requires, tag=tag, files=files)

    __call__ = add


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Wheelhouse:
    return Wheelhouse(tmp_path / "wheelhouse")


@pytest.fixture
def local_index(wheelhouse: Wheelhouse) -> Iterator[str]:
    wheelhouse.path.mkdir(parents=True, exist_ok=True)
    with serve_index(wheelhouse.path) as url:
        yield url


def _user_cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def _keep_machine_rootfs(cache_home: Path, run_folder: Path) -> None:
    """Link the machine's Debian root file systems into the session's cache home; on a machine
    that has none yet, one folder every worker of this run shares (debootstrap takes minutes,
    an arm64 one under qemu much longer: a rootfs is made once per run, under its lock)."""
    machine = _user_cache_home() / ROOTFS
    target = machine if machine.is_dir() else run_folder / "rootfs"
    target.mkdir(parents=True, exist_ok=True)
    (cache_home / ROOTFS).parent.mkdir(parents=True, exist_ok=True)
    (cache_home / ROOTFS).symlink_to(target, target_is_directory=True)


@pytest.fixture(scope="session", autouse=True)
def hermetic_session(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[str]:
    """Private caches for the session, and pip-tools from a local index; yields its URL.

    Set in ``os.environ``, so ``python -m audit`` processes the tests start inherit it too.
    """
    cache_home = tmp_path_factory.mktemp("cache-home")
    _keep_machine_rootfs(cache_home, _run_folder(tmp_path_factory))
    wheels_cache = _wheels_cache(pytestconfig, tmp_path_factory)
    source = toolhouse.source_index()
    served = wheels_cache / toolhouse.folder_name()
    with (
        pytest.MonkeyPatch.context() as patch,
        serve_index(served, prepare=lambda: toolhouse.ensure_wheels(wheels_cache, source)) as url,
    ):
        patch.setenv("XDG_CACHE_HOME", str(cache_home))
        patch.setenv(CACHE_ENV, str(cache_home / "layer-audit" / "lock-tools"))
        patch.setenv(TOOLS_INDEX_ENV, url)
        yield url


def _wheels_cache(config: pytest.Config, factory: pytest.TempPathFactory) -> Path:
    """pytest's cache folder (kept between sessions), or a session folder without one."""
    cache = getattr(config, "cache", None)
    if cache is None:  # -p no:cacheprovider
        return factory.mktemp("tool-wheels")
    return Path(cache.mkdir("layer-audit-tool-wheels"))


def _require_docker(config: pytest.Config) -> None:
    if not config.getoption("--docker"):
        pytest.skip("needs Docker: run pytest with --docker (or AUDIT_TEST_DOCKER=1)")


def _environment_failure(error: AuditError) -> None:
    """Under --docker a broken environment fails the test: a skip would hide it in CI."""
    pytest.fail(f"--docker given but the environment is not ready: {error}", pytrace=False)


@pytest.fixture(scope="session")
def docker_client(pytestconfig: pytest.Config) -> Any:
    _require_docker(pytestconfig)
    from audit.docker import host as docker_host

    try:
        return docker_host.daemon()
    except AuditError as error:
        _environment_failure(error)
        raise  # unreachable: pytest.fail raises


BaseImageFactory = Callable[..., str]


@pytest.fixture(scope="session")
def base_image(
    pytestconfig: pytest.Config, docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> BaseImageFactory:
    from audit.base import make as baseimage

    built: dict[tuple[str, str], str] = {}
    locks = _run_folder(tmp_path_factory)

    def factory(suite: str = "bookworm", arch: str = "amd64") -> str:
        if (suite, arch) not in built:
            with (locks / f"base-{suite}-{arch}.lock").open("w") as guard:
                fcntl.flock(guard, fcntl.LOCK_EX)  # parallel workers build each image once
                try:
                    built[suite, arch] = baseimage.ensure_base_image(suite, arch)
                except AuditError as error:
                    _environment_failure(error)
        return built[suite, arch]

    return factory


def _run_folder(factory: pytest.TempPathFactory) -> Path:
    """A folder every worker of this test run shares (the parent of each worker's temp
    folder under pytest-xdist; the session's own temp folder without it)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


REPO_ROOT = Path(__file__).resolve().parents[2]


def copy_demo(tmp_path: Path) -> Path:
    """A copy of the committed demo recipe, its locks and the templates folder, under tmp."""
    root = tmp_path / "project"
    for folder in ("images/demo", "locks/demo", "templates"):
        shutil.copytree(REPO_ROOT / folder, root / folder, ignore=shutil.ignore_patterns(".lock"))
    return root


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The committed demo (recipe, fresh locks, base record, templates) as the working dir."""
    root = copy_demo(tmp_path)
    monkeypatch.chdir(root)
    return root


NO_DAEMON = "unix:///nonexistent/layer-audit-test.sock"  # DOCKER_HOST where no engine answers


@pytest.fixture
def no_docker_daemon(monkeypatch: pytest.MonkeyPatch) -> str:
    """``DOCKER_HOST`` pointed where no engine answers: a command that reaches for Docker
    fails at once, naming the socket; the value is returned."""
    monkeypatch.setenv("DOCKER_HOST", NO_DAEMON)
    return NO_DAEMON


@pytest.fixture(autouse=True)
def plain_tables_as_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every table any test has drawn without rich (:mod:`audit.gate.plain_table`, a console
    without colour) is checked against rich's own drawing of it: the faster path never
    changes what a user reads."""
    from audit.gate import plain_table
    from tests.support.plain_check import rich_text

    drawn = plain_table.plain_text

    def checked(grid: plain_table.Grid, width: int, soft_wrap: bool) -> str | None:
        text = drawn(grid, width, soft_wrap)
        assert text is None or text == rich_text(grid, width, soft_wrap), grid
        return text

    monkeypatch.setattr(plain_table, "plain_text", checked)
