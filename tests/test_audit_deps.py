"""audit-deps on recipes: predicted environments from hand-made base records and fresh locks.

Each test writes a whole project (recipe, requirements, base.json, locks) into a temporary
folder through the lock module's own writers, then runs ``python -m audit audit-deps`` through
:func:`audit.cli.main.main` and reads the JSON report it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as cli
from audit.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION
from audit.gate.audit_deps import audit_recipe
from audit.host import process as commands
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.vllm_project import BASE, CUDA_RECIPE, Project, with_pins, write_project


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    (tmp_path / "images").mkdir()
    return tmp_path


def run_json(root: Path, *args: str) -> tuple[int, dict[str, Any]]:
    output = root / "report.json"
    code = cli.main(["audit-deps", *args, "--format", "json", "--output", str(output)])
    return code, json.loads(output.read_text())


def errors(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        finding
        for section in report["sections"]
        for finding in section["findings"]
        if finding["severity"] == "error"
    ]


def test_clean_recipe_passes(root: Path) -> None:
    write_project(root, Project())
    code, report = run_json(root)
    assert code == EXIT_OK
    assert errors(report) == []
    titles = [section["title"] for section in report["sections"]]
    assert titles == [
        "vllm base -> v1",
        "vllm v1 -> v2: layer 1 (requirements/v2.in)",
        "vllm v2 -> v3: layer 2 (requirements/v3.in)",
    ]
    added = report["sections"][1]["findings"]
    assert [(f["rule"], f["package"], f["after"]) for f in added] == [
        ("added", "flashinfer-python", "0.6.18")
    ]


def test_lock_downgrading_a_base_package_fails_at_its_layer(root: Path) -> None:
    write_project(root, with_pins(v3={"nvidia-nccl-cu13": "2.29.7"}))
    code, report = run_json(root)
    assert code == EXIT_VIOLATION
    found = {(f["rule"], f["package"], f["before"], f["after"], f["where"]) for f in errors(report)}
    where = "vllm v3 layer 2 (requirements/v3.in)"
    assert ("downgraded", "nvidia-nccl-cu13", "2.30.1", "2.29.7", where) in found
    floors = [f for f in errors(report) if f["rule"] == "requirement"]
    assert [(f["package"], f["after"], f["where"]) for f in floors] == [
        ("nvidia-nccl-cu13", "2.29.7", where)
    ]


def test_waiver_allows_the_downgrade(root: Path) -> None:
    waiver = (
        '\n[[policy.waiver]]\npackage = "nvidia-nccl-cu13"\nfrom = "2.30.1"\nto = "2.30.0"\n'
        'reason = "2.30.1 hangs on the fabric"\n'
    )
    project = with_pins(v3={"nvidia-nccl-cu13": "2.30.0"})
    project.recipe = CUDA_RECIPE + waiver
    write_project(root, project)
    code, report = run_json(root)
    assert code == EXIT_OK, errors(report)
    waived = [f for s in report["sections"] for f in s["findings"] if f["waiver"]]
    assert [(f["rule"], f["package"]) for f in waived] == [("downgraded", "nvidia-nccl-cu13")]


def test_lockstep_skew_fails_naming_both_versions(root: Path) -> None:
    write_project(root, with_pins(v2={"nvidia-cutlass-dsl": "4.3.1"}))
    code, report = run_json(root)
    assert code == EXIT_VIOLATION
    [skew] = errors(report)
    assert skew["rule"] == "lockstep"
    assert skew["where"] == "vllm v2 layer 1 (requirements/v2.in)"
    assert "4.3.1" in skew["message"] and "4.3.0" in skew["message"]


def test_cu12_package_in_a_cu130_image_fails(root: Path) -> None:
    write_project(root, with_pins(v2={"nvidia-nccl-cu12": "2.27.3"}))
    code, report = run_json(root)
    assert code == EXIT_VIOLATION
    [suffix] = errors(report)
    assert (suffix["rule"], suffix["package"], suffix["after"]) == (
        "cuda-suffix",
        "nvidia-nccl-cu12",
        "2.27.3",
    )
    assert suffix["where"].startswith("vllm v2 layer 1")


def test_cpu_build_replacing_a_cuda_build_fails(root: Path) -> None:
    write_project(root, with_pins(v3={"torch": "2.9.0+cpu"}))
    code, report = run_json(root)
    assert code == EXIT_VIOLATION
    variant = [f for f in errors(report) if f["rule"] == "variant"]
    assert [(f["package"], f["before"], f["after"]) for f in variant] == [
        ("torch", "2.9.0+cu130", "2.9.0+cpu")
    ]
    assert variant[0]["where"] == "vllm v3 layer 2 (requirements/v3.in)"


def test_table_and_markdown_name_stage_layer_package_and_versions(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_project(root, with_pins(v3={"nvidia-nccl-cu13": "2.29.7"}))
    assert cli.main(["audit-deps", "--format", "markdown"]) == EXIT_VIOLATION
    text = capsys.readouterr().out
    assert "### vllm v2 -> v3: layer 2 (requirements/v3.in)" in text
    assert "`nvidia-nccl-cu13`" in text and "2.30.1 → 2.29.7" in text
    assert "FAIL" in text


def test_stale_lock_is_a_finding(root: Path) -> None:
    write_project(root, Project())
    (root / "images/vllm/requirements/v2.in").write_text("flashinfer-python==0.6.19\n")
    code, report = run_json(root)
    assert code == EXIT_VIOLATION
    stale = [(f["rule"], f["package"]) for f in errors(report)]
    assert stale == [
        ("stale-lock", "locks/vllm/v2-01.txt"),
        ("stale-lock", "locks/vllm/v3-02.txt"),
    ]


def test_missing_base_and_locks_are_findings(root: Path) -> None:
    write_project(root, Project())
    (root / "locks/vllm/base.json").unlink()
    (root / "locks/vllm/v3-02.txt").unlink()
    code, report = run_json(root)
    assert code == EXIT_VIOLATION
    assert [(f["rule"], f["package"]) for f in errors(report)] == [
        ("missing-lock", "locks/vllm/base.json"),
        ("stale-lock", "locks/vllm/v2-01.txt"),
        ("missing-lock", "locks/vllm/v3-02.txt"),
    ]


def test_violation_already_in_the_base_is_reported_once_against_the_base(root: Path) -> None:
    write_project(root, Project(base={**BASE, "nvidia-nccl-cu13": "2.29.7"}))
    code, report = run_json(root)
    assert code == EXIT_VIOLATION
    [floor] = errors(report)
    assert floor["rule"] == "requirement"
    assert floor["where"] == "vllm base (example/vllm:day0)"


def test_a_layer_fixing_the_base_clears_it(root: Path) -> None:
    project = with_pins(v2={"nvidia-nccl-cu13": "2.30.1"})
    project.base = {**BASE, "nvidia-nccl-cu13": "2.29.7"}
    write_project(root, project)
    code, report = run_json(root)
    assert code == EXIT_OK, errors(report)


def test_named_images_only(root: Path) -> None:
    write_project(root, Project(), image="good")
    write_project(root, with_pins(v3={"torch": "2.9.0+cpu"}), image="bad")
    assert run_json(root, "good")[0] == EXIT_OK
    assert run_json(root)[0] == EXIT_VIOLATION


def test_unknown_recipe_is_bad_input(root: Path) -> None:
    write_project(root, Project())
    assert cli.main(["audit-deps", "nope"]) == EXIT_BAD_INPUT


@pytest.mark.parametrize(
    "args",
    [
        ["--against", "a:1"],
        ["vllm", "--image", "a:1"],
        ["--recipe", "vllm"],
    ],
)
def test_bad_option_combinations_exit_2(root: Path, args: list[str]) -> None:
    assert cli.main(["audit-deps", *args]) == EXIT_BAD_INPUT


def test_audit_recipe_is_pure_and_exposes_steps(root: Path) -> None:
    write_project(root, with_pins(v3={"nvidia-nccl-cu13": "2.29.7"}))
    source = DirectorySource(root)
    audit = audit_recipe(source, load_recipe(source, "vllm"), today=date(2025, 6, 1))
    assert audit.failed
    assert [p.step.slug for p in audit.steps] == ["v1-01", "v2-01", "v3-01", "v3-02"]
    assert audit.steps[-1].after["nvidia-nccl-cu13"].version == "2.29.7"
    assert audit.steps[-1].before["nvidia-nccl-cu13"].version == "2.30.1"


REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    not (REPO / "locks/demo/base.json").is_file(), reason="locks/demo not recorded yet"
)
def test_committed_demo_recipe_passes_without_docker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # proves no daemon is needed
    code, report = run_json(tmp_path, "demo")
    assert code == EXIT_OK, errors(report)
    assert any(section["findings"] for section in report["sections"])
