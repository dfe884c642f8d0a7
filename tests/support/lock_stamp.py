"""A project whose locks are fresh by hand (no test compiles) and the lock command run as a process
that lists what it imported: for the stamp's fast path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit.history.snapshot import Distribution
from tests.support.project import (
    ProjectSpec,
    base_record,
    pip_recipe_toml,
    write_project,
)

REPO = Path(__file__).resolve().parents[2]
RECIPE = pip_recipe_toml(["v1", "v2"], index_url="https://pypi.example.org/simple")
BODY = "alpha==1.0 \\\n    --hash=sha256:aa\n"
STAMP = "build/.layer-audit/lock-state/t.stamp"


# Modules a stamp hit must not import: the parsers, the plan and everything heavier (argparse
# it does import: the lock command's own parser reads the command line, one grammar for both).
HEAVY = {"packaging", "tomllib", "rich", "audit.cli.main", "audit.recipe.parse"}
HEAVY |= {"dataclasses", "typing", "json", "audit.lock.workflow"}
HEAVY |= {"audit.lock.plan", "audit.lock.files", "audit.recipe.requirements_in"}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    requirements = {"v1.in": "alpha\n-c common.txt\n", "common.txt": "alpha<3\n", "v2.in": "beta\n"}
    base = base_record(Distribution("pip", "25.2"))
    locks = dict.fromkeys(["v1", "v2"], BODY)
    root = write_project(tmp_path / "project", ProjectSpec("t", RECIPE, requirements, base, locks))
    monkeypatch.chdir(root)
    return root


def spawn(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m audit ARGV`` as a user runs it, listing what it imported on stderr."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "audit", *argv],
        cwd=root, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip


def imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if "|" in line}
