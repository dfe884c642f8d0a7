"""Pytest fixtures shared by every test module (loaded from tests/conftest.py).

- ``wheelhouse``: a temporary directory plus a factory that writes tiny wheels into it.
- ``local_index``: that directory served as a PEP 503 index; yields its URL.
- ``docker_client``: a docker SDK client for the running daemon.
- ``base_image``: ``base_image(suite="bookworm", arch="amd64") -> tag``, an offline Debian
  base image built once per machine by :mod:`audit.engines.baseimage` and then reused.

Docker fixtures skip with the reason when tests run without ``--docker``; under ``--docker``
a daemon that does not answer (or missing emulation) is a failure, never a skip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from audit.core.errors import AuditError
from tests.support.pkgindex import serve_index
from tests.support.wheels import make_wheel


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
        files: Mapping[str, str] | None = None,
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


def _require_docker(config: pytest.Config) -> None:
    if not config.getoption("--docker"):
        pytest.skip("needs Docker: run pytest with --docker (or AUDIT_TEST_DOCKER=1)")


def _environment_failure(error: AuditError) -> None:
    """Under --docker a broken environment fails the test: a skip would hide it in CI."""
    pytest.fail(f"--docker given but the environment is not ready: {error}", pytrace=False)


@pytest.fixture(scope="session")
def docker_client(pytestconfig: pytest.Config) -> Any:
    _require_docker(pytestconfig)
    from audit.engines import docker_host

    try:
        return docker_host.daemon()
    except AuditError as error:
        _environment_failure(error)
        raise  # unreachable: pytest.fail raises


BaseImageFactory = Callable[..., str]


@pytest.fixture(scope="session")
def base_image(pytestconfig: pytest.Config, docker_client: Any) -> BaseImageFactory:
    from audit.engines import baseimage

    built: dict[tuple[str, str], str] = {}

    def factory(suite: str = "bookworm", arch: str = "amd64") -> str:
        if (suite, arch) not in built:
            try:
                built[suite, arch] = baseimage.ensure_base_image(suite, arch)
            except AuditError as error:
                _environment_failure(error)
        return built[suite, arch]

    return factory
