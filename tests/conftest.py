"""Shared test options. Docker tests are opt-in: ``pytest --docker`` or ``AUDIT_TEST_DOCKER=1``."""

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--docker"):
        return
    skip = pytest.mark.skip(reason="needs Docker: run with --docker")
    for item in items:
        if "docker" in item.keywords:
            item.add_marker(skip)
