"""The PR-comment workflows (this repository's and the one ``init`` writes) and init's gate
workflow against this repository's: fork-safe triggers and permissions, pinned actions, the
artifact handed from the read-only gate job to the comment job, no expression in a shell."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from audit.project.scaffold import skeleton

ROOT = Path(__file__).resolve().parents[1]
GATE = ".github/workflows/dependency-gate.yml"
COMMENT = ".github/workflows/dependency-gate-comment.yml"
SPEC = "layer-audit @ git+https://git.example.com/ml/layer-audit@" + "c" * 40
SCAFFOLD = skeleton("example", SPEC)
TEXTS = {
    "repo": {GATE: (ROOT / GATE).read_text(), COMMENT: (ROOT / COMMENT).read_text()},
    "init": {GATE: SCAFFOLD[GATE].decode(), COMMENT: SCAFFOLD[COMMENT].decode()},
}
USES = re.compile(r"^\s*(?:- )?uses: (\S+)(.*)$", re.MULTILINE)


def load(where: str, relpath: str) -> dict[Any, Any]:
    loaded = yaml.safe_load(TEXTS[where][relpath])
    assert isinstance(loaded, dict)
    return loaded


def trigger(workflow: dict[Any, Any]) -> Any:
    return workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True


def all_steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


@pytest.mark.parametrize("where", ["repo", "init"])
def test_the_comment_job_runs_after_the_gate_with_write_access_only_there(where: str) -> None:
    workflow = load(where, COMMENT)
    assert trigger(workflow) == {
        "workflow_run": {"workflows": ["dependency-gate"], "types": ["completed"]}
    }
    assert workflow["permissions"] == {"contents": "read"}
    [job] = workflow["jobs"].values()
    assert job["permissions"]["pull-requests"] == "write"
    assert "github.event.workflow_run.event == 'pull_request'" in job["if"]


@pytest.mark.parametrize("where", ["repo", "init"])
def test_the_comment_job_never_checks_out_or_runs_pull_request_code(where: str) -> None:
    workflow = load(where, COMMENT)
    for step in all_steps(workflow):
        uses = str(step.get("uses", ""))
        if uses.startswith("actions/checkout"):
            assert step["with"]["ref"] == "${{ github.event.repository.default_branch }}"
            assert step["with"]["persist-credentials"] is False
        assert "head_branch" not in str(step.get("with", {}))
    runs = " ".join(step.get("run", "") for step in all_steps(workflow))
    assert "pip install ." in runs or 'pip install "$LAYER_AUDIT_SPEC"' in runs
    [post] = [s for s in all_steps(workflow) if "pr-comment" in s.get("run", "")]
    assert "--head-sha" in post["run"] and "--markdown gate-report/gate.md" in post["run"]
    assert post["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert post["env"]["HEAD_SHA"] == "${{ github.event.workflow_run.head_sha }}"


@pytest.mark.parametrize("where", ["repo", "init"])
def test_the_gate_hands_its_report_over_as_data(where: str) -> None:
    gate_steps = load(where, GATE)["jobs"]["gate"]["steps"]
    [upload] = [s for s in gate_steps if "upload-artifact" in str(s.get("uses", ""))]
    [download] = [
        s for s in all_steps(load(where, COMMENT)) if "download-artifact" in str(s.get("uses", ""))
    ]
    assert upload["with"]["name"] == download["with"]["name"] == "dependency-gate-report"
    assert upload["if"].startswith("always()")
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    assert any("--output gate-report/gate.md" in s.get("run", "") for s in gate_steps)


@pytest.mark.parametrize("where", ["repo", "init"])
@pytest.mark.parametrize("relpath", [GATE, COMMENT])
def test_actions_are_pinned_and_no_expression_reaches_a_shell(where: str, relpath: str) -> None:
    uses = USES.findall(TEXTS[where][relpath])
    assert uses
    for action, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), action
        assert re.fullmatch(r"\s+# v\d+(\.\d+)*", comment), (action, comment)
    for step in all_steps(load(where, relpath)):
        assert "${{" not in step.get("run", ""), step


def test_inits_gate_workflow_matches_this_repositorys() -> None:
    ours, theirs = load("repo", GATE), load("init", GATE)
    assert trigger(theirs) == trigger(ours) and set(trigger(theirs)) == {
        "pull_request",
        "merge_group",
    }
    assert theirs["permissions"] == ours["permissions"] == {"contents": "read"}
    assert set(theirs["jobs"]) == set(ours["jobs"]) == {"gate", "lock-check", "audit-deps"}
    assert set(USES.findall(TEXTS["init"][GATE])) <= set(USES.findall(TEXTS["repo"][GATE]))
    runs = {
        name: " ".join(s.get("run", "") for s in job["steps"])
        for name, job in theirs["jobs"].items()
    }
    assert "--strict-waivers" in runs["gate"]
    assert "lock" in runs["lock-check"] and "--check" in runs["lock-check"]
    assert "layer-audit audit-deps" in runs["audit-deps"]
    assert theirs["env"]["LAYER_AUDIT_SPEC"] == SPEC
    installs = [s["run"] for s in all_steps(theirs) if "pip install" in s.get("run", "")]
    assert installs and all(run == 'python -m pip install "$LAYER_AUDIT_SPEC"' for run in installs)
