"""The gate end to end on real git repositories: a main branch and a pull-request branch.

Each commit holds a whole project (recipe, requirements, base snapshot, locks) written with the
lock helpers, so locks are fresh unless a test changes an input behind their back.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from audit.cli import main as cli
from audit.cli.context import RunContext
from audit.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION, UsageError
from audit.gate.compare import gate_result
from audit.gate.markdown import gate_markdown
from audit.policy.findings import ERROR, INFO, Finding
from audit.project.gitsource import GitSource
from audit.report.findings import Report, Section
from tests.support.gate_project import (
    TODAY,
    WAIVER,
    Project,
    findings,
    propose,
    repo,
    run_gate,
    write_project,
)
from tests.support.gitrepo import SHELL_BRANCH, commit_files, git

__all__ = ["repo"]  # the fixture, from tests/support/gate_project.py


def test_a_downgrade_in_a_lock_fails_and_the_markdown_names_it(repo: Path, tmp_path: Path) -> None:
    propose(repo, Project(pins={"v1": {"alpha": "1.0", "beta": "1.0"}, "v2": {"gamma": "3.0"}}))
    code, markdown, report = run_gate(repo, tmp_path)
    assert code == EXIT_VIOLATION
    [downgrade] = findings(report, "downgraded")
    assert (downgrade["package"], downgrade["before"], downgrade["after"]) == (
        "alpha",
        "2.0",
        "1.0",
    )
    assert downgrade["where"] == "demo v1 layer 1 (requirements/v1.in)"
    assert "**❌ FAIL**" in markdown
    assert "| ❌ | downgraded | `alpha` | 2.0 → 1.0 | v1 layer 1 (requirements/v1.in) |" in markdown
    assert markdown.count("downgraded | `alpha`") == 1  # reported at v1, not again at v2


def test_the_same_downgrade_with_a_waiver_passes_and_shows_it(repo: Path, tmp_path: Path) -> None:
    pins = {"v1": {"alpha": "1.0", "beta": "1.0"}, "v2": {"gamma": "3.0"}}
    propose(repo, Project(pins=pins, policy=WAIVER))
    code, markdown, report = run_gate(repo, tmp_path)
    assert code == EXIT_OK
    [downgrade] = findings(report, "downgraded")
    assert downgrade["severity"] == "warning"  # allowed, and a reviewer must read it
    assert (
        downgrade["waiver"]
        == "2.0 miscompiles our kernels (waiver alpha 2.0 -> 1.0) (added by this pull request)"
    )
    [added] = findings(report, "waiver-added")
    assert added["severity"] == "warning"
    assert "**✅ PASS**" in markdown
    waived = "waived: 2.0 miscompiles our kernels, no expiry (added by this pull request)"
    assert (
        f"| ⚠️ | downgraded | `alpha` | 2.0 → 1.0 | v1 layer 1 (requirements/v1.in) | {waived} |"
        in markdown
    )
    review = "| ⚠️ | waiver-added | `alpha` | 2.0 → 1.0 | policy | new waiver: 2.0 miscompiles"
    assert review in markdown and markdown.count("| waiver-added |") == 1


def test_a_requirements_file_changed_without_recompiling_fails(repo: Path, tmp_path: Path) -> None:
    commit_files(repo, {"images/demo/requirements/v2.in": b"gamma==3.0\ndelta\n"})
    code, markdown, report = run_gate(repo, tmp_path)
    assert code == EXIT_VIOLATION
    [stale] = findings(report, "stale-lock")
    assert "images/demo/requirements/v2.in changed without recompiling" in str(stale["message"])
    assert stale["package"] == "locks/demo/v2-02.txt"
    assert "images/demo/requirements/v2.in" in markdown


def test_a_lock_already_missing_at_the_base_only_warns(repo: Path, tmp_path: Path) -> None:
    git(repo, "checkout", "-q", "main")
    (repo / "locks/demo/v2-02.txt").unlink()
    commit_files(repo, {}, "main loses a lock")
    git(repo, "checkout", "-q", "-B", "pr")
    commit_files(repo, {"NOTES.txt": b"unrelated\n"}, "an unrelated change")
    code, _, report = run_gate(repo, tmp_path)
    assert code == EXIT_OK
    [missing] = findings(report, "missing-lock")
    assert missing["severity"] == "warning"
    assert "not caused by this pull request" in str(missing["message"])


def test_a_pull_request_that_removes_a_lock_fails(repo: Path, tmp_path: Path) -> None:
    (repo / "locks/demo/v2-02.txt").unlink()
    commit_files(repo, {}, "drop a lock")
    code, _, report = run_gate(repo, tmp_path)
    assert code == EXIT_VIOLATION
    [missing] = findings(report, "missing-lock")
    assert missing["severity"] == "error" and missing["package"] == "locks/demo/v2-02.txt"


def test_each_side_reads_every_lock_and_its_base_record_once(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit_files(repo, {"NOTES.txt": b"unrelated\n"}, "an unrelated change")
    reads: Counter[tuple[str, str]] = Counter()
    read_bytes = GitSource.read_bytes

    def counting(source: GitSource, relpath: str) -> bytes:
        reads[(source.ref, relpath)] += 1
        return read_bytes(source, relpath)

    monkeypatch.setattr(GitSource, "read_bytes", counting)
    report = gate_result(GitSource(repo, "main"), GitSource(repo, "HEAD"), today=TODAY).report
    locks = {key: n for key, n in reads.items() if key[1].startswith("locks/")}
    assert not report.failed
    assert {ref for ref, _ in locks} == {"main", "HEAD"} and set(locks.values()) == {1}


def test_an_upgrade_only_change_passes(repo: Path, tmp_path: Path) -> None:
    pins = {"v1": {"alpha": "2.1", "beta": "1.0"}, "v2": {"gamma": "3.0", "delta": "0.1"}}
    propose(repo, Project(pins=pins))
    code, markdown, report = run_gate(repo, tmp_path)
    assert code == EXIT_OK
    assert report["verdict"] == "pass"
    assert [f["package"] for f in findings(report, "upgraded")] == ["alpha"]
    assert [f["where"] for f in findings(report, "added")] == [
        "demo v2 layer 2 (requirements/v2.in)"
    ]
    assert "**✅ PASS**" in markdown and "`delta`" in markdown


def test_a_new_base_image_is_its_own_section(repo: Path, tmp_path: Path) -> None:
    propose(repo, Project(base={"pip": "23.0", "six": "1.16.0"}, image_id="sha256:" + "2" * 64))
    code, markdown, report = run_gate(repo, tmp_path)
    assert code == EXIT_VIOLATION
    assert "**Base image:** base image changed: example/base:1 (image id sha256:111" in markdown
    sections = report["sections"]
    assert isinstance(sections, list)
    [base] = [s for s in sections if s["title"] == "demo: base image"]
    rules = {f["rule"]: f for f in base["findings"]}
    assert "sha256:" + "2" * 64 in str(rules["base-image"]["message"])
    assert (rules["downgraded"]["package"], rules["downgraded"]["after"]) == ("pip", "23.0")


@pytest.mark.parametrize("unreadable", ["symlink", "binary"])
def test_an_unreadable_file_at_the_base_is_bad_input(
    repo: Path, tmp_path: Path, unreadable: str
) -> None:
    git(repo, "checkout", "-q", "main")
    lock = repo / "locks/demo/v1-01.txt"
    lock.unlink()
    if unreadable == "symlink":
        lock.symlink_to("v2-02.txt")
    else:
        lock.write_bytes(b"\xff\xfe not text")
    commit_files(repo, {}, "break main")
    git(repo, "checkout", "-q", "pr")
    code, _, _ = run_gate(repo, tmp_path)
    assert code == EXIT_BAD_INPUT


def test_a_lock_edited_by_hand_at_the_base_is_bad_input_naming_it(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The base ref's locks are read for their pins whether or not their freshness is judged
    (it is only when the head has a lock that is not fresh): a damaged one stops the gate."""
    git(repo, "checkout", "-q", "main")
    lock = repo / "locks/demo/v1-01.txt"
    lock.write_text(lock.read_text().replace("alpha==2.0", "alpha==2.1"))
    commit_files(repo, {}, "edit a lock by hand on main")
    git(repo, "checkout", "-q", "pr")
    code, _, _ = run_gate(repo, tmp_path)
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT
    assert "main:locks/demo/v1-01.txt: edited by hand: its content digest does not match" in err


def test_a_lock_stale_at_both_refs_only_warns_and_one_stale_at_the_head_only_fails(
    repo: Path, tmp_path: Path
) -> None:
    """The base ref's freshness is judged when the head has a stale lock: the same problem at
    both refs warns, and a second one the pull request adds fails."""
    git(repo, "checkout", "-q", "main")
    commit_files(repo, {"images/demo/requirements/v2.in": b"gamma>=2\n"}, "main: v2.in edited")
    git(repo, "checkout", "-q", "-B", "pr")
    commit_files(repo, {"NOTES.txt": b"unrelated\n"}, "an unrelated change")
    code, _, report = run_gate(repo, tmp_path)
    assert code == EXIT_OK
    [stale] = findings(report, "stale-lock")
    assert stale["severity"] == "warning" and stale["package"] == "locks/demo/v2-02.txt"
    commit_files(repo, {"images/demo/requirements/v1.in": b"alpha>=1\n"}, "pr: v1.in edited")
    code, _, report = run_gate(repo, tmp_path)
    assert code == EXIT_VIOLATION
    severities = {str(f["package"]): f["severity"] for f in findings(report, "stale-lock")}
    assert severities == {"locks/demo/v1-01.txt": "error", "locks/demo/v2-02.txt": "error"}


def test_a_base_ref_that_does_not_resolve_is_bad_input(repo: Path, tmp_path: Path) -> None:
    code = cli.main(["gate", "--base", "origin/nope", "--repo", str(repo)])
    assert code == EXIT_BAD_INPUT


def test_an_output_that_cannot_be_a_file_fails_before_git_is_read(tmp_path: Path) -> None:
    argv = ["gate", "--base", "main", "--repo", str(tmp_path), "--json", str(tmp_path)]
    args = cli.build_parser(argv).parse_args(argv)
    with pytest.raises(UsageError, match=r"--json .*: is a directory"):  # not "not a git repo"
        args.handler(args, RunContext())


def test_a_branch_name_full_of_shell_characters_changes_nothing(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(repo, "branch", "-m", SHELL_BRANCH)
    propose(repo, Project(pins={"v1": {"alpha": "2.1", "beta": "1.0"}, "v2": {"gamma": "3.0"}}))
    git(repo, "checkout", "-q", "main")
    monkeypatch.chdir(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if ".git" not in p.parts)
    code, markdown, _ = run_gate(repo, tmp_path, "--head", SHELL_BRANCH)
    assert code == EXIT_OK
    assert "upgraded | `alpha`" in markdown
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if ".git" not in p.parts)
    assert set(after) - set(before) == {Path("gate.md"), Path("gate.json")}
    assert not list(tmp_path.rglob("pwned*"))


def test_added_and_removed_images_are_reported(repo: Path) -> None:
    write_project(repo, Project(), image="fresh")
    commit_files(repo, {}, "add fresh")
    report = gate_result(GitSource(repo, "main"), GitSource(repo, "HEAD"), today=TODAY).report
    titles = [section.title for section in report.sections]
    assert "fresh: v1" in titles and not any(t.startswith("demo") for t in titles)
    assert not report.failed
    backwards = gate_result(GitSource(repo, "HEAD"), GitSource(repo, "main"), today=TODAY).report
    assert [s.title for s in backwards.sections] == ["fresh: image removed"]


def test_the_job_summary_is_appended_to(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    propose(repo, Project(pins={"v1": {"alpha": "1.0", "beta": "1.0"}, "v2": {"gamma": "3.0"}}))
    assert cli.main(["gate", "--base", "main", "--repo", str(repo)]) == EXIT_VIOLATION
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "downgraded | `alpha`" in text


def test_markdown_folds_routine_changes_and_escapes_recipe_text() -> None:
    upgrades = tuple(
        Finding("upgraded", INFO, f"pkg-{n:02d}", "1.0", "2.0", "upgraded", "demo v1")
        for n in range(12)
    )
    hostile = Finding(
        "forbidden", ERROR, "evil", None, "1.0", "a|b <script>x</script>\nnext", "demo v2"
    )
    report = Report("gate", (Section("demo: v1", upgrades), Section("demo: v2", (hostile,))))
    markdown = gate_markdown(report)
    assert markdown.splitlines()[2].startswith("**❌ FAIL**")
    table, folded = markdown.split("<summary>12 upgraded</summary>")
    assert (
        "| ❌ | forbidden | `evil` | – → 1.0 | v2 | a\\|b &lt;script&gt;x&lt;/script&gt;<br>next |"
        in table
    )
    assert "pkg-00" not in table and folded.count("| ℹ️ | upgraded |") == 12
    assert "<script>" not in markdown


def test_a_heredoc_script_edited_alone_is_a_changed_run_layer(repo: Path, tmp_path: Path) -> None:
    """An imported heredoc is a run layer fed a file: editing only that file changes what the
    build runs, so the gate reports the run layer again, naming the file; an untouched script
    is not reported."""
    recipe = repo / "images/demo/image.toml"
    text = recipe.read_text().replace('run = "true"', 'run = "sh"\n  stdin = "setup.sh"')
    git(repo, "checkout", "-q", "main")
    commit_files(
        repo,
        {"images/demo/image.toml": text.encode(), "images/demo/setup.sh": b"echo one\n"},
        "a heredoc step",
    )
    git(repo, "checkout", "-q", "-B", "pr")
    commit_files(repo, {"README": b"no recipe change\n"}, "unrelated")
    code, _, report = run_gate(repo, tmp_path)
    assert code == EXIT_OK and not findings(report, "run-layer-changed")
    commit_files(repo, {"images/demo/setup.sh": b"pip install alpha==1.0\n"}, "edit the script")
    code, markdown, report = run_gate(repo, tmp_path)
    (run,) = findings(report, "run-layer-changed")
    assert run["message"] == (
        "not predictable: the build's guard will judge it: sh (its standard input setup.sh changed)"
    )
    assert "setup.sh changed" in markdown and code == EXIT_OK
