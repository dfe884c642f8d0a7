"""The JSON Schemas shipped in ``audit/schemas/`` against real outputs: the committed recipes
(parsed with tomllib, as an editor's TOML plugin sees them), reports from audit-deps, the gate
and diff, and snapshots written by the in-image script on this machine's Python."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as cli
from audit.history.snapshot import SCRIPT_PATH
from audit.host import process as commands
from tests.support.gate_project import Project, propose, repo, run_gate
from tests.support.schemas import problems, schema_of, validator
from tests.support.snapshot_files import write as write_snapshot
from tests.support.vllm_project import with_pins
from tests.support.vllm_project import write_project as write_vllm_project

__all__ = ["repo"]  # the gate's fixture, from tests/support/gate_project.py
ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ("image", "report", "snapshot")


def as_json(value: Any) -> Any:
    """TOML as a JSON Schema editor plugin sees it: dates become ISO strings."""
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_json(item) for item in value]
    return value.isoformat() if isinstance(value, dt.date) else value


@pytest.mark.parametrize("name", SCHEMAS)
def test_every_schema_is_valid_draft_07_and_shipped_as_package_data(name: str) -> None:
    validator(name)
    assert schema_of(name)["$id"].endswith(f"/{name}.schema.json")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # the wheel ships all of audit/ (tests/test_package.py checks the schemas are in it)
    assert pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["audit"]


@pytest.mark.parametrize(
    "recipe",
    sorted([*ROOT.glob("images/*/image.toml"), *ROOT.glob("benchmarks/recipes/*/image.toml")]),
    ids=str,
)
def test_the_committed_recipes_are_valid(recipe: Path) -> None:
    document = as_json(tomllib.loads(recipe.read_text()))
    assert problems("image", document) == []


def test_a_recipe_mistake_is_caught_by_the_schema() -> None:
    document = as_json(tomllib.loads((ROOT / "images/demo/image.toml").read_text()))
    document["image"]["platfrom"] = document["image"].pop("platform")
    document["stage"][0]["layer"][0]["run"] = "true"  # two kinds in one layer
    document.setdefault("policy", {})["waiver"] = [{"package": "x", "from": "1", "to": "2",
                                                   "reason": "r", "expires": "soon"}]  # fmt: skip
    found = "\n".join(problems("image", document))
    assert "'platfrom' was unexpected" in found and "'platform' is a required property" in found
    assert "stage/0/layer/0" in found and "'soon' is not a 'date'" in found


def test_an_audit_deps_report_is_valid_and_located(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    write_vllm_project(tmp_path, with_pins(v3={"rich": "14.0.0", "nvidia-nccl-cu13": "2.29.7"}))
    output = tmp_path / "report.json"
    assert cli.main(["audit-deps", "--format", "json", "--output", str(output)]) == 1
    document = json.loads(output.read_text())
    assert problems("report", document) == []
    [downgrade] = [f for s in document["sections"] for f in s["findings"]
                   if f["rule"] == "downgraded"]  # fmt: skip
    assert (downgrade["image"], downgrade["stage"], downgrade["layer"]) == ("vllm", "v3", 2)
    assert downgrade["where"] == "vllm v3 layer 2 (requirements/v3.in)"


def test_a_gate_report_is_valid_and_located(repo: Path, tmp_path: Path) -> None:
    propose(repo, Project(pins={"v1": {"alpha": "1.0", "beta": "1.0"}, "v2": {"gamma": "3.0"}}))
    code, _, document = run_gate(repo, tmp_path)
    assert code == 1 and problems("report", document) == []
    findings = [f for s in document["sections"] for f in s["findings"]]  # type: ignore[attr-defined]
    [downgrade] = [f for f in findings if f["rule"] == "downgraded"]
    assert (downgrade["image"], downgrade["stage"], downgrade["layer"]) == ("demo", "v1", 1)


def test_a_diff_report_is_valid(tmp_path: Path) -> None:
    before = write_snapshot(tmp_path / "before.json", ("nccl", "2.30.1"), ("six", "1.16"))
    after = write_snapshot(tmp_path / "after.json", ("nccl", "2.29.7"))
    output = tmp_path / "report.json"
    argv = ["diff", str(before), str(after), "--format", "json", "--output", str(output)]
    assert cli.main(argv) == 1
    document = json.loads(output.read_text())
    assert problems("report", document) == [] and document["verdict"] == "fail"


def test_a_snapshot_from_the_in_image_script_is_valid(tmp_path: Path) -> None:
    """The stdlib script on this machine's Python (150+ distributions of the test venv)."""
    done = subprocess.run([sys.executable, str(SCRIPT_PATH)], capture_output=True, check=True)
    document = json.loads(done.stdout)
    assert problems("snapshot", document) == []
    [environment] = document["environments"]
    assert any(d["requires_dist"] for d in environment["distributions"])
    written = write_snapshot(tmp_path / "written.json", ("alpha", "1.0"))
    assert problems("snapshot", json.loads(written.read_text())) == []
    document["schema"] = "layer-audit.snapshot/9"
    assert problems("snapshot", document)


def test_the_recipe_init_writes_is_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    assert cli.main(["init", str(tmp_path)]) == 0
    [recipe] = tmp_path.glob("images/*/image.toml")
    assert problems("image", as_json(tomllib.loads(recipe.read_text()))) == []
