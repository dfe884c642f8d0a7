"""BuildKit plain-progress parsing and the mapping from BuildKit steps to recipe layers."""

from __future__ import annotations

from dataclasses import replace

from audit.build_progress import parse, step_labels
from audit.recipe import CopyLayer, EnvLayer, PipLayer, RunLayer, Stage
from tests.test_build_plan import make_recipe


def test_steps_are_named_by_the_recipe_layer_they_build() -> None:
    stages = (
        Stage("v1", (PipLayer("requirements/v1.in"), RunLayer("true"))),
        Stage("v2", (EnvLayer((("A", "1"),)), CopyLayer("x.py", "/opt/x.py"), RunLayer("true"))),
    )
    labels = step_labels(replace(make_recipe(), stages=stages))
    assert labels[("v1", "1")] == "v1 FROM layer-audit/base:bookworm-arm64"
    assert labels[("v1", "2")] == "v1 layer 1 (requirements/v1.in)"
    assert labels[("v1", "3")] == "v1 layer 2 (run)"
    # FROM v1 makes no BuildKit step and ENV makes none: v2's step 1 is its copy layer.
    assert labels[("v2", "1")] == "v2 layer 2 (copy)"
    assert labels[("v2", "2")] == "v2 layer 3 (run)"
    assert ("v2", "3") not in labels


def test_plain_progress_yields_steps_statuses_and_guard_violations() -> None:
    lines = [
        "#5 [v2 1/2] RUN --mount=type=bind,source=locks/v2-01.txt pip install",
        "#5 0.412 Collecting alpha==1.0",
        '#5 1.020 LAYER-AUDIT-VIOLATION {"package": "nccl", "before": "2.30", "after": "2.29.7"}',
        "#5 ERROR: process did not complete successfully",
    ]
    progress = parse(lines)
    [vertex] = progress.vertices.values()
    assert (vertex.stage, vertex.position, vertex.status) == ("v2", "1/2", "error")
    assert progress.violations == [{"package": "nccl", "before": "2.30", "after": "2.29.7"}]
