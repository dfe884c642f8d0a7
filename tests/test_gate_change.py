"""The gate sees the whole change, on real git repositories: shell layers it cannot predict,
a base snapshot one side lacks, and waivers a pull request adds or widens."""

from __future__ import annotations

import json
from pathlib import Path

from audit.errors import EXIT_OK, EXIT_VIOLATION
from tests.support import gate_project as shared
from tests.support.cli import edit
from tests.support.gate_project import WAIVER, Project, findings, propose, run_gate
from tests.support.gitrepo import commit_files, git

TOML = "images/demo/image.toml"
repo = shared.repo  # the fixture: main holds the project, HEAD is branch pr
DOWNGRADE = {"v1": {"alpha": "1.0", "beta": "1.0"}, "v2": {"gamma": "3.0"}}


def test_a_changed_run_layer_is_a_warning_naming_its_command(repo: Path, tmp_path: Path) -> None:
    command = "pip install --no-deps alpha==0.1"
    edit(repo, TOML, 'run = "true"', f'run = "{command}"')
    commit_files(repo, {}, "a shell step that installs")
    code, markdown, report = run_gate(repo, tmp_path)
    assert code == EXIT_OK
    [run] = findings(report, "run-layer-changed")
    assert run["severity"] == "warning"
    assert run["message"] == f"not predictable: the build's guard will judge it: {command}"
    assert run["where"] == "demo v2 layer 1 (run)"
    assert command in markdown and "not predictable" in markdown


def test_an_unchanged_run_layer_says_nothing(repo: Path, tmp_path: Path) -> None:
    commit_files(repo, {"NOTES.txt": b"unrelated\n"}, "unrelated")
    _, _, report = run_gate(repo, tmp_path)
    assert findings(report, "run-layer-changed") == []


def test_a_base_snapshot_the_pull_request_deletes_fails_not_a_phantom_removal(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "locks/demo/base.json").unlink()
    commit_files(repo, {}, "lose the base snapshot")
    code, markdown, report = run_gate(repo, tmp_path)
    assert code == EXIT_VIOLATION
    [missing] = findings(report, "not-audited")
    assert missing["severity"] == "error"
    assert "locks/demo/base.json does not exist" in str(missing["message"])
    assert "this pull request changes it" in str(missing["message"])
    assert "--record-base" in str(missing["hint"])
    assert findings(report, "removed") == [] and "removed" not in markdown


def test_a_base_snapshot_the_pull_request_records_is_compared_as_a_new_image(
    repo: Path, tmp_path: Path
) -> None:
    git(repo, "checkout", "-q", "main")
    (repo / "locks/demo/base.json").unlink()
    commit_files(repo, {}, "lose the base snapshot")
    git(repo, "checkout", "-q", "pr")
    git(repo, "reset", "-q", "--hard", "main")
    propose(repo, Project())  # the pull request records it again
    code, _, report = run_gate(repo, tmp_path)
    assert code == EXIT_OK
    assert findings(report, "not-audited") == [] and findings(report, "removed") == []
    assert {f["package"] for f in findings(report, "added")} >= {"alpha", "beta", "gamma"}


def test_a_waiver_added_by_the_pull_request_needs_owner_review_first(
    repo: Path, tmp_path: Path
) -> None:
    propose(repo, Project(pins=DOWNGRADE, policy=WAIVER))
    code, markdown, report = run_gate(repo, tmp_path)
    assert code == EXIT_OK
    sections = report["sections"]
    assert isinstance(sections, list)
    assert sections[0]["title"] == "demo: waivers added by this pull request"
    review = markdown.index("Needs owner review")
    assert review < markdown.index("### `demo`")
    assert "| waiver-added | `alpha` | 2.0 → 1.0 | policy | new waiver: 2.0 miscompiles" in markdown


def test_strict_waivers_fail_a_self_waiving_pull_request(repo: Path, tmp_path: Path) -> None:
    propose(repo, Project(pins=DOWNGRADE, policy=WAIVER))
    code, markdown, report = run_gate(repo, tmp_path, "--strict-waivers")
    assert code == EXIT_VIOLATION
    [added] = findings(report, "waiver-added")
    assert added["severity"] == "error" and "own" in str(added["hint"])
    assert "**❌ FAIL**" in markdown


def test_a_widened_waiver_needs_review_and_an_untouched_one_does_not(
    repo: Path, tmp_path: Path
) -> None:
    git(repo, "checkout", "-q", "main")
    propose(repo, Project(policy=WAIVER))
    git(repo, "checkout", "-q", "-B", "pr")
    commit_files(repo, {"NOTES.txt": b"unrelated\n"}, "unrelated")
    code, _, report = run_gate(repo, tmp_path, "--strict-waivers")
    assert code == EXIT_OK and findings(report, "waiver-added") == []

    widened = WAIVER.replace('to = "1.0"', 'to = "*"')
    propose(repo, Project(policy=widened))
    code, _, report = run_gate(repo, tmp_path, "--strict-waivers")
    assert code == EXIT_VIOLATION
    [added] = findings(report, "waiver-added")
    assert "changed or widened" in str(added["message"]) and added["after"] == "*"


def test_a_changed_base_reference_without_a_new_snapshot_is_a_stale_base(
    repo: Path, tmp_path: Path
) -> None:
    edit(repo, TOML, 'base = "example/base:1"', 'base = "example/base:2"')
    commit_files(repo, {}, "bump the base, forget to re-record it")
    code, _, report = run_gate(repo, tmp_path)
    assert code == EXIT_VIOLATION
    [stale] = findings(report, "stale-base")
    assert "example/base:2" in str(stale["message"]) and "example/base:1" in str(stale["message"])
    assert "--record-base" in str(stale["hint"])
    assert findings(report, "removed") == []


def test_the_view_tells_new_and_widened_waivers_from_data_not_from_messages() -> None:
    """The change view knows a waiver is new, widened or old from the two refs' waivers (and a
    waived finding's waiver by its index), whatever the finding's message or waiver text says."""
    from audit.gate.change_view import WAIVER_RULE, ImageInputs, image_view
    from audit.policy.findings import INFO, WARNING, Finding
    from audit.policy.model import Waiver

    old = Waiver("alpha", "2.0", "1.5", "old reason")
    widened = Waiver("alpha", "2.0", "1.0", "wider")
    new = Waiver("beta", "1.0", "0.9", "fresh")
    misleading = "waiver changed or widened by this pull request (added by this pull request)"
    review = [
        Finding(WAIVER_RULE, WARNING, w.package, w.from_version, w.to_version, misleading)
        for w in (widened, new)
    ]
    waived = Finding(
        "downgraded", INFO, "alpha", "2.0", "1.5", "alpha 2.0 -> 1.5: downgraded",
        waiver="old reason (added by this pull request)", waiver_index=0, stage="v1",
    )  # fmt: skip
    inputs = ImageInputs(waivers=(old, widened, new), base_waivers=(old,))
    view = image_view("demo", [*review, waived], inputs)
    assert [row.note for row in view.review] == [
        "changed or widened waiver: wider, no expiry",
        "new waiver: fresh, no expiry",
    ]
    (stage,) = view.stages
    assert [row.note for row in stage.rows] == ["waived: old reason, no expiry"]


def test_a_refused_lock_shows_its_violation_not_only_missing_lock(
    repo: Path, tmp_path: Path
) -> None:
    """``lock`` refused v1 (alpha 2.0 -> 1.0 asked for by gamma) and kept why beside the
    missing lock: the gate and audit-deps show that violation, typed, after "missing lock";
    a record of other inputs says nothing."""
    from audit.cli import main as cli
    from audit.lock.files import digest_inputs
    from audit.lock.plan import survey_locks
    from audit.lock.refusal import Refusal, refusal_relpath, render_refusal
    from audit.policy.findings import ERROR, Finding
    from audit.project.sources import DirectorySource
    from audit.recipe.parse import load_recipe

    (repo / "images/demo/requirements/v1.in").write_text("alpha\nbeta\ngamma\n")
    (repo / "locks/demo/v1-01.txt").unlink()
    recipe = load_recipe(DirectorySource(repo), "demo")
    state = survey_locks(DirectorySource(repo), recipe).states[0]
    downgrade = Finding(
        "downgraded", ERROR, "alpha", "2.0", "1.0", "alpha 2.0 -> 1.0: downgraded",
        where="demo v1 layer 1 (requirements/v1.in)", askers=("gamma 1.0 requires alpha<2",),
    )  # fmt: skip
    record = Refusal(state.step.label, digest_inputs(state.inputs), (downgrade,))
    (repo / refusal_relpath(recipe, state.step)).write_text(render_refusal(record))
    commit_files(repo, {}, "gamma, whose lock was refused")
    code, markdown, report = run_gate(repo, tmp_path)
    assert code == EXIT_VIOLATION
    assert [f["rule"] for f in findings(report, "missing-lock")] == ["missing-lock"]
    [shown] = findings(report, "downgraded")
    assert (shown["severity"], shown["before"], shown["after"]) == ("error", "2.0", "1.0")
    assert (shown["stage"], shown["layer"], shown["askers"]) == ("v1", 1, [downgrade.askers[0]])
    assert "asked for by: gamma 1.0 requires alpha&lt;2" in markdown
    audit = tmp_path / "audit.json"
    assert (
        cli.main(["--project", str(repo), "audit-deps", "--format", "json", "--output", str(audit)])
        == 1
    )
    assert findings(json.loads(audit.read_text()), "downgraded") == [shown]

    (repo / "images/demo/requirements/v1.in").write_text("alpha\nbeta\ngamma>=1\n")
    commit_files(repo, {}, "other requirements: the record is of other inputs")
    _, _, report = run_gate(repo, tmp_path)
    assert findings(report, "downgraded") == [] and findings(report, "missing-lock")
