"""The shipped real-stack example, offline: its committed replica record, locks and audit.

``images/vllm-arm64-cu13`` is the real ``vllm==0.33.0`` linux/arm64 CUDA 13 stack on a replica
base. Its ``base.json`` and lock are committed, so ``lock --check`` and ``audit-deps`` run here
with no image and no network, and pass with zero waivers: the vendor's own set (a ``-cu12``
cutlass-dsl package included) is clean under the field's policy.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from audit.cli.main import main
from audit.lock.plan import read_base_digest
from audit.lock.trust import REPLICA_SOURCE
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "vllm-arm64-cu13"


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(ROOT)
    return ROOT


def test_the_record_is_the_replica_of_the_committed_list() -> None:
    source = DirectorySource(ROOT)
    recipe = load_recipe(source, IMAGE)
    found = read_base_digest(source, recipe)
    assert found is not None
    record = found[0]
    assert record.source == REPLICA_SOURCE and recipe.policy.waivers == ()
    (env,) = record.environments
    versions = {d.name: d.version for d in env.distributions}
    assert 190 <= len(versions) <= 210 and len(versions) == len(env.distributions)
    assert versions["vllm"] == "0.33.0" and versions["nvidia-nccl-cu13"] == "2.30.7"
    listed = ROOT / "images" / IMAGE / "replica" / "vllm-0.33.0.txt"
    pins = dict(re.findall(r"^([a-z0-9][a-z0-9._-]*)==(\S+)", listed.read_text(), re.MULTILINE))
    assert {n: versions[n] for n in pins} == pins and set(versions) - set(pins) == {"pip"}
    cutlass = next(d for d in env.distributions if d.name == "nvidia-cutlass-dsl")
    assert "nvidia-cutlass-dsl-libs-cu12==4.8.0" in (cutlass.requires_dist or ())


def test_lock_check_passes_offline(in_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lock", IMAGE, "--check"]) == 0, capsys.readouterr().err


def test_audit_deps_passes_with_zero_waivers(
    in_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["audit-deps", IMAGE, "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["counts"]["error"] == 0 and report["counts"]["warning"] == 0
    waived = [f for s in report["sections"] for f in s["findings"] if f.get("waiver")]
    assert waived == []
