"""An ``override`` entry for a package the layer does not install or move: a warning.

Decision (docs/recipes.md): an override that changes nothing is a warning (exit 0), not an
error: the upstream fix that makes it unnecessary should not break a build, but a reviewer must
see that the entry is dead (a typo, or a re-pin an upgrade made moot). It used to be accepted
silently. Judged on the real vLLM 0.33.0 arm64 metadata (tests/data/real_stacks/).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as cli
from audit.errors import EXIT_OK
from audit.history.snapshot import Distribution
from audit.host import process as commands
from audit.policy.findings import WARNING, Finding
from audit.policy.model import Policy
from audit.policy.verdict import evaluate
from tests.support.project import ProjectSpec, system_base
from tests.support.project import write_project as write_project_files

STACK = Path(__file__).resolve().parent / "data" / "real_stacks" / "vllm-0.33.0-arm64-py312.json"
TODAY = dt.date(2026, 12, 1)
Env = dict[str, Distribution]


def vendor() -> tuple[Env, dict[str, str]]:
    data: dict[str, Any] = json.loads(STACK.read_text())
    env = {
        name: Distribution(name, entry["version"], requires_dist=tuple(entry["requires_dist"]))
        for name, entry in data["packages"].items()
    }
    return env, data["markers"]


def overrides(before: Env, after: Env, *names: str) -> list[Finding]:
    _, markers = vendor()
    found = evaluate(before, after, Policy(cuda="cu130"), where="v2 layer 1", today=TODAY,
                     declared=names, markers=markers)  # fmt: skip
    return [f for f in found if f.rule == "override"]


def test_an_override_of_a_package_nothing_asks_to_move_changes_nothing() -> None:
    before, _ = vendor()
    rich = Distribution("rich-click", "1.9.0", requires_dist=())
    (finding,) = overrides(before, {**before, "rich-click": rich}, "nvidia-nccl-cu13")
    assert finding.severity == WARNING
    assert finding.message == (
        "nvidia-nccl-cu13 2.30.7: the override changes nothing: the step does not move it and "
        "no installed package requires another version"
    )
    assert "remove nvidia-nccl-cu13 from the layer's override list" in finding.hint


def test_an_override_of_a_package_that_is_not_installed_changes_nothing() -> None:
    before, _ = vendor()
    (finding,) = overrides(before, before, "nvidia-ncl-cu13")
    assert finding.severity == WARNING and finding.after is None
    assert "the override changes nothing: this step leaves it uninstalled" in finding.message


def test_an_override_that_holds_a_package_back_is_still_reported_as_what_it_breaks() -> None:
    """The field's fix: the nightly torch wants NCCL 2.29.7, the override keeps 2.30.7."""
    before, _ = vendor()
    torch = before["torch"]
    wants = tuple(r.replace("nvidia-nccl-cu13==2.30.7", "nvidia-nccl-cu13==2.29.7")
                  for r in torch.requires_dist or ())  # fmt: skip
    nightly = Distribution("torch", "2.13.0", requires_dist=wants)
    after = {**before, "torch": nightly}
    (finding,) = overrides(before, after, "nvidia-nccl-cu13")
    assert finding.message.startswith("nvidia-nccl-cu13 kept at 2.30.7 on purpose (override)")
    assert "torch 2.13.0 has requirement nvidia-nccl-cu13==2.29.7" in finding.message


CUTLASS_SET = (
    "nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-base",
    "nvidia-cutlass-dsl-libs-core",
    "nvidia-cutlass-dsl-libs-cu12",
)


def test_overrides_of_the_pins_a_held_back_package_brings_belong_to_its_re_pin() -> None:
    """The field's re-pin of the cutlass-dsl set (the GLM-5.3-Flash routes): a nightly wants
    nvidia-cutlass-dsl>=4.9, which would move it with the libs it pins ``==``; the override keeps
    the whole set. Only the dsl breaks a requirement, but its libs' entries are not dead: each is
    kept with the entry that pins it (followed through -libs-base to -libs-core)."""
    before, _ = vendor()
    nightly = Distribution(
        "flashinfer-python", "0.8.0.dev1", requires_dist=("nvidia-cutlass-dsl>=4.9",)
    )
    after = {**before, "flashinfer-python": nightly}
    found = {f.package: f.message for f in overrides(before, after, *CUTLASS_SET)}
    assert set(found) == set(CUTLASS_SET)
    assert "has requirement nvidia-cutlass-dsl>=4.9" in found["nvidia-cutlass-dsl"]
    assert not [m for m in found.values() if "changes nothing" in m]
    assert found["nvidia-cutlass-dsl-libs-core"] == (
        "nvidia-cutlass-dsl-libs-core kept at 4.8.0 on purpose (override), with the override "
        "it belongs to: nvidia-cutlass-dsl-libs-base 4.8.0 requires "
        "nvidia-cutlass-dsl-libs-core==4.8.0"
    )
    # without the dsl's entry nothing holds the libs back: their entries change nothing
    alone = overrides(before, after, *CUTLASS_SET[1:])
    assert alone and all("the override changes nothing" in f.message for f in alone)


def test_without_recorded_metadata_nothing_is_claimed() -> None:
    before, _ = vendor()
    blind = {**before, "rich-click": Distribution("rich-click", "1.9.0")}  # requires unknown
    assert overrides(before, blind, "nvidia-nccl-cu13") == []


RECIPE = """\
[image]
base = "example/base:1"
platform = "linux/amd64"
cuda = "cpu"
interpreters = ["/usr/bin/python3"]
repository = "local/x"

[[stage]]
name = "v1"
  [[stage.layer]]
  pip = "requirements/v1.in"
  override = ["gamma==1.0"]
"""


def test_audit_deps_warns_and_exits_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    base = system_base({"alpha": "1.0", "pip": "25.2"})
    spec = ProjectSpec.locked("x", RECIPE, base, {"v1": {"beta": "2.0"}})
    write_project_files(tmp_path, spec)
    output = tmp_path / "report.json"
    assert cli.main(["audit-deps", "--format", "json", "--output", str(output)]) == EXIT_OK
    report = json.loads(output.read_text())
    found = [f for s in report["sections"] for f in s["findings"] if f["rule"] == "override"]
    assert [(f["package"], f["severity"]) for f in found] == [("gamma", "warning")]
    assert "changes nothing" in found[0]["message"]
