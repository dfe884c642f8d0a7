"""Shared test options, tiers and parallel workers.

Tiers: ``pytest`` (``nox -s tests``) is the fast tier: tests marked ``slow`` (a real resolver,
a build, a browser, a wheel) are deselected. ``--slow`` brings them back; ``--docker`` runs the
full suite (Docker tests and slow ones: what CI runs). Tests against the real public index are
opt-in: ``--network`` (or ``AUDIT_TEST_NETWORK=1``; they download hundreds of megabytes).
``AUDIT_TEST_DOCKER=1`` is ``--docker``, ``AUDIT_TEST_SLOW=1`` is ``--slow``.

Parallel workers (pytest-xdist, ``-n N --dist loadgroup``, what the nox session passes): the
tests of one module that touch the Docker engine form one group (``docker:<module>``), so a
module's fixtures (a registry, a second engine, a built image) serve all its tests on one
worker; modules and every other test spread over the workers. Each worker names what it
creates after itself (``$AUDIT_TEST_REPOSITORY`` gets the worker's id as a suffix before any
test module reads it), and the base images are built once under a lock all workers share.
"""

from __future__ import annotations

import os

import pytest

REPOSITORY_ENV = "AUDIT_TEST_REPOSITORY"
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER:  # before tests.support.* read it at import time
    os.environ[REPOSITORY_ENV] = f"{os.environ.get(REPOSITORY_ENV, 'layer-audit-test')}-{_WORKER}"

pytest_plugins = ["tests.support.fixtures"]
DOCKER_FIXTURES = frozenset({"docker_client", "base_image"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--docker",
        action="store_true",
        default=bool(os.environ.get("AUDIT_TEST_DOCKER")),
        help="the full suite: tests that need a Docker daemon with BuildKit, and slow ones",
    )
    parser.addoption(
        "--slow",
        action="store_true",
        default=bool(os.environ.get("AUDIT_TEST_SLOW")),
        help="also run tests marked slow (real resolvers, builds, a browser) without Docker",
    )
    parser.addoption(
        "--network",
        action="store_true",
        default=bool(os.environ.get("AUDIT_TEST_NETWORK")),
        help="run tests marked network: real packages from the public index (large downloads)",
    )


def _needs_docker(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    return "docker" in item.keywords or bool(DOCKER_FIXTURES.intersection(fixtures))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    full = config.getoption("--docker") or config.getoption("--slow")
    slow = [] if full else [item for item in items if "slow" in item.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if "slow" not in item.keywords]
    no_docker = pytest.mark.skip(reason="needs Docker: run with --docker")
    no_network = pytest.mark.skip(reason="downloads from the public index: run with --network")
    for item in items:
        if _needs_docker(item):
            item.add_marker(pytest.mark.xdist_group(f"docker:{item.path.stem}"))
            if not config.getoption("--docker"):
                item.add_marker(no_docker)
        if "network" in item.keywords and not config.getoption("--network"):
            item.add_marker(no_network)
