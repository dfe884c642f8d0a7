"""The gate compares what the base records below Python: a pull request whose new base image
downgrades a Debian package fails with it in the base-image section (real git repositories)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from audit.errors import EXIT_OK, EXIT_VIOLATION
from audit.history.system import OsPackage, System
from tests.support.gate_project import RECIPE, Project, repo, run_gate  # noqa: F401  (repo: a fixture)
from tests.support.gitrepo import commit_files
from tests.support.project import ProjectSpec, system_base
from tests.support.project import write_project as write_project_files


def _propose(root: Path, project: Project, packages: dict[str, str]) -> None:
    base = system_base(project.base, image_id=project.image_id)
    found = tuple(OsPackage(n, v, "amd64", n) for n, v in packages.items())
    env = dataclasses.replace(base.environments[0], system=System("dpkg", "", found))
    base = dataclasses.replace(base, environments=(env,))
    write_project_files(root, ProjectSpec.locked("demo", RECIPE, base, project.pins))
    commit_files(root, {}, "pull request")


def test_a_new_base_that_downgrades_a_debian_package_fails_the_gate(
    repo: Path,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    _propose(repo, Project(), {"libssl3": "3.0.17-1~deb12u2"})
    code, _, _ = run_gate(repo, tmp_path)  # a base recorded without packages: nothing to compare
    assert code == EXIT_OK
    _propose(repo, Project(image_id="sha256:" + "2" * 64), {"libssl3": "3.0.11-1~deb12u2"})
    code, markdown, report = run_gate(repo, tmp_path, "--base", "HEAD~1")
    assert code == EXIT_VIOLATION
    sections = report["sections"]
    assert isinstance(sections, list)
    [base] = [s for s in sections if s["title"] == "demo: base image"]
    found = {(f["rule"], f["package"]) for f in base["findings"]}
    assert ("downgraded", "deb:libssl3") in found
    assert "deb:libssl3" in markdown
