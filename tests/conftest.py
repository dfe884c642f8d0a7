"""Shared test options. Docker tests are opt-in: ``pytest --docker`` or ``AUDIT_TEST_DOCKER=1``;
tests against the real public index are opt-in too: ``pytest --network`` or
``AUDIT_TEST_NETWORK=1`` (they download hundreds of megabytes)."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ["tests.support.fixtures"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--docker",
        action="store_true",
        default=bool(os.environ.get("AUDIT_TEST_DOCKER")),
        help="run tests that need a Docker daemon with BuildKit (and emulation, when present)",
    )
    parser.addoption(
        "--network",
        action="store_true",
        default=bool(os.environ.get("AUDIT_TEST_NETWORK")),
        help="run tests marked network: real packages from the public index (large downloads)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_docker = pytest.mark.skip(reason="needs Docker: run with --docker")
    no_network = pytest.mark.skip(reason="downloads from the public index: run with --network")
    for item in items:
        if "docker" in item.keywords and not config.getoption("--docker"):
            item.add_marker(no_docker)
        if "network" in item.keywords and not config.getoption("--network"):
            item.add_marker(no_network)
