"""The terminal gate folds routine rows; Markdown and JSON keep every row.

A fleet-wide bump gives thousands of plain upgrades: the terminal shows per stage only what a
reviewer must read (errors, warnings, lockstep blocks), the routine info rows as a count in the
stage's title, and of the change matrix only the alarming rows. Built from a real git
repository, gated in-process like ``python -m audit gate``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.cli import main as cli
from audit.errors import EXIT_OK
from audit.host import process as commands
from tests.support.gitrepo import git
from tests.support.project import (
    ProjectSpec,
    lock_body,
    pip_recipe_toml,
    system_base,
    write_project,
)

BASE = {"numpy": "1.0", "six": "1.0"}
MAIN = {"requests": "2.0", "urllib3": "2.0", "idna": "3.0"}
PR = {"requests": "2.1", "urllib3": "2.1", "idna": "2.9", "tqdm": "4.0"}  # idna downgraded
WAIVER = (
    '[[policy.waiver]]\npackage = "idna"\nfrom = "*"\nto = "2.9"\nstage = "v1"\n'
    'reason = "upstream pin"\n'
)


def _write(root: Path, pins: dict[str, str], waiver: str) -> None:
    recipe = pip_recipe_toml(
        ["v1"], base="example/base:1", interpreter="/usr/bin/python3", extra=waiver
    )
    spec = ProjectSpec(
        "fleet-a",
        recipe,
        {"v1.in": "".join(f"{name}>={v}\n" for name, v in sorted(pins.items()))},
        system_base(BASE),
        {"v1": lock_body(pins)},
    )
    write_project(root, spec)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    _write(root, MAIN, "")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "main")
    git(root, "checkout", "-q", "-b", "pr")
    _write(root, PR, WAIVER)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "pr")
    return root


def test_the_terminal_folds_routine_upgrades_that_markdown_and_json_keep(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("COLUMNS", "120")
    report, markdown = tmp_path / "gate.json", tmp_path / "gate.md"
    argv = ["gate", "--base", "main", "--head", "pr", "--repo", str(repo)]
    code = cli.main([*argv, "--json", str(report), "--markdown", str(markdown)])
    out = capsys.readouterr().out
    assert code == EXIT_OK, out
    # the waived downgrade is read; the two plain upgrades fold into the title's count
    assert "fleet-a v1: 0 errors, 1 warning, 3 info; 2 routine info, 1 added by this layer" in out
    assert "2.0 → 2.1" not in out and "3.0 → 2.9" in out
    assert "3 routine rows folded" in out  # the matrix keeps only idna's row, not tqdm's
    assert "idna" in out and not any(name in out for name in ("requests", "urllib3", "tqdm"))
    # the Markdown and the JSON keep every row
    text = markdown.read_text()
    assert "requests" in text and "urllib3" in text and "2.0 → 2.1" in text
    document = json.loads(report.read_text())
    [view] = document["changes"]
    [v1] = [stage for stage in view["stages"] if stage["stage"] == "v1"]
    assert sorted(row["package"] for row in v1["rows"]) == ["idna", "requests", "urllib3"]
    assert [row["package"] for row in v1["added"]] == ["tqdm"]
