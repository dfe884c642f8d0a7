"""The pull-request workflow: safe trigger, read-only token, full history, no PR text in shell;
actions pinned by commit SHA, pip cache, pinned tools, strict waivers, lock and audit jobs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

WORKFLOW = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "dependency-gate.yml"


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    loaded = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def test_runs_on_pull_requests_and_the_merge_queue_only(workflow: dict[Any, Any]) -> None:
    # YAML 1.1 reads the bare key `on` as the boolean True.
    trigger = workflow.get("on", workflow.get(True))
    names = set(trigger) if isinstance(trigger, dict | list) else {trigger}
    assert names == {"pull_request", "merge_group"}  # above all not pull_request_target


def test_token_is_read_only(workflow: dict[Any, Any]) -> None:
    assert workflow["permissions"] == {"contents": "read"}
    for job in workflow["jobs"].values():
        assert job.get("permissions", {"contents": "read"}) == {"contents": "read"}


def test_checkout_fetches_full_history_without_keeping_credentials(
    workflow: dict[Any, Any],
) -> None:
    for job in workflow["jobs"].values():
        checkouts = [
            s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout")
        ]
        assert len(checkouts) == 1
        assert checkouts[0]["with"]["persist-credentials"] is False
    gate_steps = workflow["jobs"]["gate"]["steps"]
    [checkout] = [s for s in gate_steps if str(s.get("uses", "")).startswith("actions/checkout")]
    assert checkout["with"]["fetch-depth"] == 0


def test_no_expression_is_expanded_inside_a_shell_command(workflow: dict[Any, Any]) -> None:
    runs = [s["run"] for s in steps(workflow) if "run" in s]
    assert runs
    for script in runs:
        assert "${{" not in script, script
        assert not re.search(r"github\.(event|head_ref)", script)


def test_runs_the_gate_against_the_base_branch_passed_by_environment(
    workflow: dict[Any, Any],
) -> None:
    gate = [s for s in steps(workflow) if "nox -s gate" in s.get("run", "")]
    assert len(gate) == 1
    assert gate[0]["run"].strip() == (
        'nox -s gate -- --base "origin/${BASE_REF#refs/heads/}" --strict-waivers '
        "--format markdown --output gate-report/gate.md --format terminal"
    )
    assert gate[0]["env"] == {
        "BASE_REF": "${{ github.base_ref || github.event.merge_group.base_ref }}"
    }
    installs = [s["run"] for s in steps(workflow) if "pip install" in s.get("run", "")]
    assert installs and "nox" in installs[0]


def test_actions_are_pinned_by_full_commit_sha_with_the_tag_in_a_comment() -> None:
    uses = re.findall(r"^\s*(?:- )?uses: (\S+)(.*)$", WORKFLOW.read_text(), re.MULTILINE)
    assert uses
    for action, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), action
        assert re.fullmatch(r"\s+# v\d+(\.\d+)*", comment), (action, comment)


def test_pip_is_cached_and_tools_are_pinned(workflow: dict[Any, Any]) -> None:
    setups = [s for s in steps(workflow) if "actions/setup-python" in str(s.get("uses", ""))]
    assert setups and all(s["with"]["cache"] == "pip" for s in setups)
    installs = [s["run"] for s in steps(workflow) if "pip install" in s.get("run", "")]
    assert all("nox==" in run or "install ." in run for run in installs)
    assert re.fullmatch(r"\d+(\.\d+)+", workflow["env"]["NOX_VERSION"])


def test_locks_and_audit_deps_run_beside_the_gate(workflow: dict[Any, Any]) -> None:
    runs = {
        name: " ".join(s.get("run", "") for s in job["steps"])
        for name, job in workflow["jobs"].items()
    }
    assert "--strict-waivers" in runs["gate"]
    assert "lock" in runs["lock-check"] and "--check" in runs["lock-check"]
    assert "nox -s audit-deps" in runs["audit-deps"]
