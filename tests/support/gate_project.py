"""A two-commit project for gate tests: main holds a small recipe with fresh locks, the pull-request
branch proposes another project; run the gate command and read its findings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import pytest

from audit.cli import main as cli
from audit.errors import EXIT_BAD_INPUT
from audit.host import process as commands
from tests.support.gitrepo import commit_files, git
from tests.support.project import ProjectSpec, system_base
from tests.support.project import write_project as write_project_files

TODAY = date(2025, 6, 1)
RECIPE = """\
[image]
base = "example/base:1"
platform = "linux/amd64"
cuda = "cpu"
interpreters = ["/usr/bin/python3"]
repository = "local/demo"

[[stage]]
name = "v1"
  [[stage.layer]]
  pip = "requirements/v1.in"

[[stage]]
name = "v2"
  [[stage.layer]]
  run = "true"
  [[stage.layer]]
  pip = "requirements/v2.in"
"""


WAIVER = """
[[policy.waiver]]
package = "alpha"
from = "2.0"
to = "1.0"
reason = "2.0 miscompiles our kernels"
"""


@dataclass
class Project:
    """One commit's worth of project: base packages and each pip layer's pins."""

    base: dict[str, str] = field(default_factory=lambda: {"pip": "24.0", "six": "1.16.0"})
    pins: dict[str, dict[str, str]] = field(
        default_factory=lambda: {
            "v1": {"alpha": "2.0", "beta": "1.0"},
            "v2": {"gamma": "3.0"},
        }
    )
    policy: str = ""
    image_id: str = "sha256:" + "1" * 64


def write_project(root: Path, project: Project, image: str = "demo") -> None:
    """Recipe, requirements, base.json and fresh locks, through the lock module's own writers."""
    base = system_base(project.base, image_id=project.image_id)
    write_project_files(
        root, ProjectSpec.locked(image, RECIPE + project.policy, base, project.pins)
    )


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository whose main branch holds the default project; HEAD is branch ``pr``."""
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write_project(root, Project())
    commit_files(root, {}, "main")
    git(root, "checkout", "-q", "-b", "pr")
    return root


def propose(repo: Path, project: Project) -> None:
    """Commit ``project`` on the pull-request branch."""
    write_project(repo, project)
    commit_files(repo, {}, "pull request")


def run_gate(repo: Path, tmp_path: Path, *extra: str) -> tuple[int, str, dict[str, object]]:
    markdown, report = tmp_path / "gate.md", tmp_path / "gate.json"
    argv = ["gate", "--base", "main", "--repo", str(repo), "--markdown", str(markdown)]
    code = cli.main([*argv, "--json", str(report), *extra])
    if code == EXIT_BAD_INPUT:
        return code, "", {}
    return code, markdown.read_text(), json.loads(report.read_text())


def findings(report: dict[str, object], rule: str) -> list[dict[str, object]]:
    sections = report["sections"]
    assert isinstance(sections, list)
    return [f for s in sections for f in s["findings"] if f["rule"] == rule]
