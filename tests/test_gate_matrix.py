"""The gate's Markdown leads with stage matrices, on real git repositories: what the pull
request changes per stage (base ref -> head ref) and the head's packages x stages, with
overrides and waivers marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as cli
from audit.errors import EXIT_OK, EXIT_VIOLATION
from audit.gate import compare as gate
from audit.gate.compare import gate_result
from audit.gate.matrix import Cell
from audit.history.predict import StepJudge
from audit.policy.findings import Finding
from audit.project.gitsource import GitSource
from audit.recipe.model import Step
from audit.recipe.parse import load_recipe
from tests.support import gate_project
from tests.support.gate_project import (
    RECIPE,
    TODAY,
    WAIVER,
    Project,
    findings,
    propose,
    repo,
    run_gate,
)

__all__ = ["repo"]  # the fixture, from tests/support/gate_project.py

OVERRIDE_RECIPE = RECIPE.replace(
    'pip = "requirements/v1.in"\n', 'pip = "requirements/v1.in"\n  override = ["alpha==1.0"]\n', 1
)
DOWNGRADE = {"v1": {"alpha": "1.0", "beta": "1.0"}, "v2": {"gamma": "3.0"}}


def propose_recipe(repo: Path, project: Project, recipe: str) -> None:
    """Commit ``project`` with ``recipe`` as its image.toml on the pull-request branch."""
    saved = gate_project.RECIPE
    gate_project.RECIPE = recipe
    try:
        propose(repo, project)
    finally:
        gate_project.RECIPE = saved


def test_the_markdown_shows_each_image_with_its_matrices(repo: Path, tmp_path: Path) -> None:
    propose(repo, Project(pins=DOWNGRADE))
    code, markdown, _ = run_gate(repo, tmp_path)
    assert code == EXIT_VIOLATION
    part = markdown.split("### `demo`", 1)[1]
    changes = part.index("**What this pull request changes** in `demo`: 1 package(s)")
    head = part.index("**Stage matrix at the head ref**")
    findings = part.index("| ❌ | downgraded | `alpha`")
    assert findings < changes < head  # the change view leads, the matrices follow
    assert "| package | base | v1 | v2 |" in part
    # per stage: the base ref's version -> the head's, marked where it first shows (v1)
    assert "| `alpha` | — | 🔻 **2.0 → 1.0** downgraded | 1.0 |" in part
    # at the head, alpha arrives in v1 and stays
    assert "| `alpha` | — | 🟢 1.0 added | 1.0 |" in part


def test_the_matrices_mark_an_override_and_a_waiver(repo: Path) -> None:
    propose_recipe(repo, Project(pins=DOWNGRADE), OVERRIDE_RECIPE)
    result = gate_result(GitSource(repo, "main"), GitSource(repo, "HEAD"), today=TODAY)
    assert not result.report.failed  # an override is a warning, not a downgrade
    [matrices] = result.matrices
    assert matrices.changes is not None
    changed = {row.package: row.cells for row in matrices.changes.rows}
    assert changed["alpha"][1] == Cell("1.0", "override", "2.0", compared=True)
    assert matrices.head is not None  # asked for by default (the Markdown shows it)
    head = {row.package: row.cells for row in matrices.head.rows}
    assert head["alpha"][1] == Cell("1.0", "override")
    assert matrices.head.rows[0].package == "alpha"  # alarming rows lead

    propose(repo, Project(pins=DOWNGRADE, policy=WAIVER))
    waived = gate_result(GitSource(repo, "main"), GitSource(repo, "HEAD"), today=TODAY)
    assert waived.matrices[0].changes is not None
    [alpha] = [row for row in waived.matrices[0].changes.rows if row.package == "alpha"]
    assert alpha.cells[1].kind == "waived" and alpha.cells[1].text == "2.0 → 1.0"


def test_markdown_shows_the_override_and_folds_long_matrices(repo: Path, tmp_path: Path) -> None:
    many = {f"pkg-{n:02d}": "1.0" for n in range(20)}
    propose_recipe(repo, Project(pins={**DOWNGRADE, "v2": {"gamma": "3.0", **many}}),
                   OVERRIDE_RECIPE)  # fmt: skip
    code, markdown, report = run_gate(repo, tmp_path)
    assert code == EXIT_OK
    assert "📌 **2.0 → 1.0** override" in markdown
    summary = "<summary><b>What this pull request changes</b> in <code>demo</code>: 21"
    assert f"<details>{summary}" in markdown and "<summary>**" not in markdown
    [override] = findings(report, "override")
    assert override["package"] == "alpha"


def test_a_huge_matrix_is_cut_with_its_alarming_rows_kept(repo: Path, tmp_path: Path) -> None:
    many = {f"pkg-{n:03d}": "1.0" for n in range(80)}
    propose(repo, Project(pins={**DOWNGRADE, "v2": {"gamma": "3.0", **many}}))
    _, markdown, _ = run_gate(repo, tmp_path)
    changes = markdown.split("<b>What this pull request changes</b>", 1)[1]
    changes = changes.split("</details>")[0]
    assert changes.count("\n| `") == 60 and "| `alpha` |" in changes
    assert "… and 21 more package(s)" in changes


def test_an_unchanged_image_gets_no_matrix_noise(repo: Path, tmp_path: Path) -> None:
    from tests.support.gitrepo import commit_files

    commit_files(repo, {"NOTES.txt": b"unrelated\n"}, "an unrelated change")
    code, markdown, _ = run_gate(repo, tmp_path)
    assert code == EXIT_OK
    assert "Stage matrix" not in markdown and "No image's dependencies change." in markdown


def test_without_markdown_the_head_matrix_is_left_out_and_nothing_else_moves(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the Markdown shows the head's stage matrix: a gate asked for the terminal and JSON
    alone does not judge it, and prints and writes the very same bytes as one that does."""
    propose(repo, Project(pins=DOWNGRADE, policy=WAIVER))
    lean = gate_result(
        GitSource(repo, "main"), GitSource(repo, "HEAD"), today=TODAY, head_matrices=False
    )
    whole = gate_result(GitSource(repo, "main"), GitSource(repo, "HEAD"), today=TODAY)
    assert [m.head for m in lean.matrices] == [None]
    assert [m.changes for m in lean.matrices] == [m.changes for m in whole.matrices]
    assert lean.report == whole.report and lean.views == whole.views
    outputs = []
    for extra in ([], ["--markdown", str(tmp_path / "gate.md")]):
        report = tmp_path / f"gate-{len(extra)}.json"
        argv = ["gate", "--base", "main", "--repo", str(repo), "--json", str(report), *extra]
        code = cli.main(argv)
        outputs.append((code, capsys.readouterr().out, report.read_text()))
    assert outputs[0] == outputs[1]
    assert "downgraded" in outputs[0][1] and "Stage matrix at the head ref" not in outputs[0][1]


def test_head_marks_skip_only_layers_a_change_waiver_cannot_touch(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head matrix judges only the layers that move a package a (rule-less) waiver names,
    and of them only the packages waivers name: v1 downgrades alpha under the waiver and is
    judged on alpha alone, v2 moves only gamma and is skipped, and the marks are exactly those
    of judging every layer whole."""
    base = {"pip": "24.0", "alpha": "3.0"}
    pins = {"v1": {"alpha": "2.0", "beta": "1.0"}, "v2": {"gamma": "4.0"}}
    waiver = WAIVER.replace('to = "1.0"', 'to = "2.0"').replace('from = "2.0"', 'from = "3.0"')
    propose(repo, Project(base=base, pins=pins, policy=waiver))
    head = GitSource(repo, "HEAD")
    new = gate.read_side(head, load_recipe(head, "demo"))
    judged: list[str] = []
    seen: list[set[str]] = []
    judge = StepJudge.judge

    def counted(self: StepJudge, step: Step, *args: Any) -> list[Finding]:
        judged.append(step.stage.name)
        seen.append({*args[0], *args[1]})
        return judge(self, step, *args)

    monkeypatch.setattr(StepJudge, "judge", counted)
    skipping = gate.head_marks("demo", new, TODAY)
    assert judged == ["v1"] and skipping[("v1", "alpha")] == "waived" and seen == [{"alpha"}]
    monkeypatch.setattr(gate, "_change_waiver_names", lambda policy: None)  # judge every layer
    assert gate.head_marks("demo", new, TODAY) == skipping and judged == ["v1", "v1", "v2"]
