"""One truth: the layer walk of a built recipe image judges every guarded layer as the guard did.

A recipe is built with the guard after every pip and run layer (its trail keeps each layer's
findings), then the image is walked from the engine (no container) and judged by the one judge
with the recipe's policy. For every guarded layer, the walk's findings for the recipe's
interpreter equal the guard's: rule, severity, package, versions, waiver, stage and layer.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from audit.gate.images import PolicyChoice, audit_image
from audit.history.walk.run import WalkContext
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.docker_build import (
    PYTHON,
    Index,
    amd64,
    cleanup,
    images_of,
    index,
    make_project,
)

__all__ = ["amd64", "cleanup", "index"]
pytestmark = [pytest.mark.docker, pytest.mark.slow]

RECIPE = """\
[[stage]]
name = "v1"
[[stage.layer]]
pip = "requirements/v1.in"

[[stage]]
name = "v2"
[[stage.layer]]
pip = "requirements/v2.in"
[[stage.layer]]
run = "echo built > /etc/built"

[[stage]]
name = "v3"
[[stage.layer]]
pip = "requirements/v3.in"

[[policy.waiver]]
package = "nccl-like"
from = "2.30.0"
to = "2.29.7"
reason = "flashy 1.0 needs it; tested on the fabric"
stage = "v2"
"""
Key = tuple[str, str, str, Any, Any, bool]


def key(finding: dict[str, Any]) -> Key:
    """What the verdict says (the guard locates a finding by its trail file, the walk by its
    fields: compared apart)."""
    return (
        finding["rule"], finding["severity"], finding["package"], finding["before"],
        finding["after"], finding.get("waiver") is not None,
    )  # fmt: skip


def test_the_walk_judges_every_guarded_layer_as_the_guard_did(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    project = make_project(tmp_path, index, "truth", RECIPE, *amd64)
    (tmp_path / "images" / "truth" / "requirements" / "v3.in").write_text("# test\nalpha\n")
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0"), ("nccl-like", "2.30.0")])
    project.lock("v2-01", "v2.in", [("flashy", "1.0"), ("nccl-like", "2.29.7")])
    project.lock("v3-01", "v3.in", [("cutlass-dsl", "4.4.0")])
    done = project.build()
    assert done.returncode == 0, done.stderr[-3000:]

    trail = tmp_path / "build" / "reports" / "truth" / "v3" / "trail"
    guard = {
        path.name.removesuffix(".findings.json"): {
            key(f) for f in json.loads(path.read_text())["findings"]
        }
        for path in sorted(trail.glob("*.findings.json"))
    }
    assert set(guard) == {"v1-01", "v2-01", "v2-02", "v3-01"}
    assert any(k[0] == "downgraded" and k[5] for k in guard["v2-01"])  # waived, as the guard did

    recipe = load_recipe(DirectorySource(tmp_path), "truth")
    tag = f"{project.repository}:latest-amd64-cpu"
    assert tag in images_of(project.repository)
    judged = audit_image(
        tag, PolicyChoice(recipe=recipe), WalkContext(cache_root=tmp_path / "walk-cache"),
        today=datetime.date.today(),
    )  # fmt: skip
    located = [v for v in judged.verdicts if v.ref.stage is not None and v.ref.layer is not None]
    walked = {
        f"{v.ref.stage}-{v.ref.layer:02d}": {
            key(f.to_json()) for f in v.findings if f.where.endswith(f"({PYTHON})")
        }
        for v in located
    }
    assert walked == guard
    for verdict in located:
        assert {(f.stage, f.layer) for f in verdict.findings} <= {
            (verdict.ref.stage, verdict.ref.layer)
        }
