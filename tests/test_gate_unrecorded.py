"""Images that were never recorded, on real git repositories: "not audited", shown and counted.

A recipe whose base was never recorded (the seed's glm53 recipes, a fresh ``init`` example) is
a warning in every format the gate writes, unless the pull request touches it or ``--strict``
is given; audit-deps over every image treats it alike, and naming it still fails. This
repository's own gate passes on its own HEAD, run as the shipped workflow runs it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from audit.cli import main as cli
from audit.errors import EXIT_OK, EXIT_VIOLATION
from tests.support import gate_project as shared
from tests.support.gate_project import findings, run_gate
from tests.support.gitrepo import commit_files, git
from tests.support.schemas import problems

REPO = Path(__file__).resolve().parents[1]
repo = shared.repo  # main: the recorded demo project; HEAD: branch pr
VENDOR = """\
[image]
base = "vendor/vllm:nightly-arm64-cu130"
platform = "linux/arm64"
cuda = "cu130"
interpreters = ["/usr/bin/python3"]
repository = "local/vendor"

[[stage]]
name = "v1"
  [[stage.layer]]
  pip = "requirements/v1.in"
"""


@pytest.fixture
def unrecorded(repo: Path) -> Path:
    """``repo`` with a second image, ``vendor``, on main: a recipe whose base was never recorded."""
    git(repo, "checkout", "-q", "main")
    files = {
        "images/vendor/image.toml": VENDOR.encode(),
        "images/vendor/requirements/v1.in": b"nvidia-nccl-cu13>=2.30\n",
    }
    commit_files(repo, files, "a vendor recipe, rendered, not recorded")
    git(repo, "checkout", "-q", "pr")
    git(repo, "reset", "-q", "--hard", "main")
    return repo


def upgrade_demo(repo: Path) -> None:
    lock = repo / "locks/demo/v1-01.txt"
    shared.propose(repo, shared.Project(pins={"v1": {"alpha": "2.1", "beta": "1.0"},
                                              "v2": {"gamma": "3.0"}}))  # fmt: skip
    assert lock.exists()


def test_an_untouched_unrecorded_image_is_a_counted_warning_in_every_format(
    unrecorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade_demo(unrecorded)
    code, markdown, report = run_gate(unrecorded, tmp_path)
    assert code == EXIT_OK
    [warning] = findings(report, "not-audited")
    assert warning["severity"] == "warning" and warning["image"] == "vendor"
    assert "rendered, not recorded" in str(warning["message"])
    assert "--record-base" in str(warning["hint"])
    assert report["not_audited"] == ["vendor"] and report["verdict"] == "pass"
    assert problems("report", report) == []  # the packaged report schema knows the key
    assert "**Not audited** (no base record: rendered, not recorded): `vendor`" in markdown
    assert "upgraded | `alpha`" in markdown  # the recorded image is still audited
    terminal = capsys.readouterr().out
    assert "not-audited" in terminal and "1 not audited: vendor" in terminal


def test_strict_makes_not_audited_fail(unrecorded: Path, tmp_path: Path) -> None:
    upgrade_demo(unrecorded)
    code, _, report = run_gate(unrecorded, tmp_path, "--strict")
    assert code == EXIT_VIOLATION
    [error] = findings(report, "not-audited")
    assert error["severity"] == "error" and "--strict" in str(error["message"])


@pytest.mark.parametrize(
    "edit", ["images/vendor/requirements/v1.in", "images/vendor/image.toml", "locks/vendor/x.txt"]
)
def test_a_pull_request_touching_an_unrecorded_image_fails_with_the_hint(
    unrecorded: Path, tmp_path: Path, edit: str
) -> None:
    path = unrecorded / edit
    old = path.read_bytes() if path.exists() else b""
    commit_files(unrecorded, {edit: old + b"# touched\n"}, "touch the vendor image")
    code, markdown, report = run_gate(unrecorded, tmp_path)
    assert code == EXIT_VIOLATION
    [error] = findings(report, "not-audited")
    assert error["severity"] == "error"
    assert "this pull request changes it" in str(error["message"])
    assert "nox -s lock -- vendor --record-base" not in str(error["hint"])  # no noxfile here
    assert "layer-audit lock vendor --record-base" in str(error["hint"])
    assert "❌ FAIL" in markdown


def test_audit_deps_over_every_image_warns_and_naming_one_fails(
    unrecorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(unrecorded)
    output = tmp_path / "all.json"
    assert cli.main(["audit-deps", "--format", "json", "--output", str(output)]) == EXIT_OK
    report: dict[str, Any] = json.loads(output.read_text())
    assert report["not_audited"] == ["vendor"]
    [warning] = findings(report, "not-audited")
    assert warning["severity"] == "warning"
    assert findings(report, "missing-lock") == []
    assert cli.main(["audit-deps", "--strict", "--format", "json"]) == EXIT_VIOLATION
    named = tmp_path / "named.json"
    argv = ["audit-deps", "vendor", "--format", "json", "--output", str(named)]
    assert cli.main(argv) == EXIT_VIOLATION
    [error] = findings(json.loads(named.read_text()), "not-audited")
    assert "named on the command line" in str(error["message"])


def test_a_lost_base_record_next_to_locks_is_not_called_never_recorded(
    unrecorded: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (unrecorded / "locks/demo/base.json").unlink()
    monkeypatch.chdir(unrecorded)
    output = tmp_path / "report.json"
    argv = ["audit-deps", "--format", "json", "--output", str(output)]
    assert cli.main(argv) == EXIT_VIOLATION
    report = json.loads(output.read_text())
    assert report["not_audited"] == ["vendor"]
    assert findings(report, "missing-lock")[0]["package"] == "locks/demo/base.json"


def workflow_gate_command() -> tuple[str, dict[str, str]]:
    """The gate step of this repository's workflow, as shipped: its run line and env."""
    text = (REPO / ".github/workflows/dependency-gate.yml").read_text(encoding="utf-8")
    jobs = yaml.safe_load(text)["jobs"]
    [step] = [s for s in jobs["gate"]["steps"] if "nox -s gate" in s.get("run", "")]
    return step["run"], dict(step.get("env", {}))


def test_this_repositorys_own_gate_passes_on_its_head(tmp_path: Path) -> None:
    """A clone of this checkout's HEAD, gated against itself by the workflow's own command
    (nox's session replaced by the command it runs)."""
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--no-local", str(REPO), str(clone))
    git(clone, "update-ref", "refs/remotes/origin/main", "HEAD")
    run, env = workflow_gate_command()
    script = run.replace(
        "nox -s gate --", f"{shlex.quote(sys.executable)} -P -m audit gate"
    )  # -P: this code, not the clone's
    assert "-P -m audit gate" in script
    assert set(env) == {"BASE_REF"}
    environment = {**os.environ, "BASE_REF": "refs/heads/main", "GITHUB_STEP_SUMMARY": ""}
    environment["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        ["bash", "-c", f"set -e\n{script}"], cwd=clone, env=environment,
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == EXIT_OK, done.stdout[-3000:] + done.stderr[-3000:]
    # every recipe of this repository is recorded (the seed's routes by their replicas)
    assert "not audited" not in done.stdout + done.stderr, done.stdout[-3000:]
