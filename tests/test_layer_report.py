"""An image's layers judged by the one judge and reported: sections, matrix, formats.

The histories here are built by hand (pure logic); the walk producing them from real images is
tested in ``tests/test_walk_docker.py`` and ``tests/test_build_dockerfile_docker.py``.
"""

from __future__ import annotations

import datetime
import json

from audit.gate.images import recipe_located, repin_hint
from audit.history.model import WALK, History, LayerRef, LayerState
from audit.history.snapshot import Distribution, Environment
from audit.policy.judge import declared_by_instruction, judge_history
from audit.policy.model import Policy, Waiver
from audit.report.layers import JudgedImage, layer_matrices, layers_report, render_layers

TODAY = datetime.date(2026, 12, 1)
VENV = "/opt/venv/bin/python"
NIGHTLY = "RUN |1 V=1 /bin/sh -c pip install flashy==1.0 # buildkit"


def env(**pins: str) -> Environment:
    dists = tuple(
        Distribution(name.replace("_", "-"), version, "/opt/venv/lib/python3.11/site-packages")
        for name, version in pins.items()
    )
    return Environment(VENV, "3.11.2", {"python_version": "3.11"}, ("/site",), dists)


def state(index: int, instruction: str, stage: str | None = None, **pins: str) -> LayerState:
    ref = LayerRef(index, instruction, stage, index if stage else None, f"sha256:{index}")
    return LayerState(ref, (env(**pins),) if pins else ())


def history(*states: LayerState) -> History:
    return History("serving:1", WALK, (LayerState(LayerRef(-1, ""), ()), *states))


FIELD = history(
    state(0, "ADD rootfs.tar / # buildkit", None, pip="23.0"),
    state(1, "ENV A=b", None, pip="23.0"),
    state(2, "RUN /bin/sh -c install-ml.sh nccl-like==2.30.0", "runtime", pip="23.0",
          nccl_like="2.30.0"),
    state(3, NIGHTLY, "runtime", pip="23.0", nccl_like="2.29.7", flashy="1.0"),
)  # fmt: skip


def judged(hist: History, policy: Policy | None = None) -> JudgedImage:
    verdicts = judge_history(hist, policy or Policy(), today=TODAY)
    return JudgedImage(hist.image, hist, tuple(verdicts))


def test_the_layer_that_downgraded_is_named_with_its_instruction() -> None:
    result = judged(FIELD)
    report = layers_report("audit", [result])
    failing = [s for s in report.sections if any(f.fails for f in s.findings)]
    (section,) = failing
    assert section.title == "serving:1 layer 3 (runtime 3): RUN pip install flashy==1.0"
    (finding,) = [f for f in section.findings if f.fails]
    assert (finding.rule, finding.package, finding.before, finding.after) == (
        "downgraded", "nccl-like", "2.30.0", "2.29.7",
    )  # fmt: skip
    assert (finding.stage, finding.layer, finding.image) == ("runtime", 3, "serving:1")
    # the ENV layer changed nothing: no section of its own
    assert [s.title.split(":")[1].split(" ")[2] for s in report.sections] == ["0", "2", "3"]


def test_a_waiver_scoped_to_the_stage_allows_it_and_one_for_another_stage_does_not() -> None:
    waiver = Waiver("nccl-like", "2.30.0", "2.29.7", "until 0.6.19", stage="runtime")
    assert not layers_report("a", [judged(FIELD, Policy(waivers=(waiver,)))]).failed
    elsewhere = Waiver("nccl-like", "2.30.0", "2.29.7", "until 0.6.19", stage="build")
    assert layers_report("a", [judged(FIELD, Policy(waivers=(elsewhere,)))]).failed


def test_a_no_deps_install_re_pins_on_purpose() -> None:
    repin = "RUN /bin/sh -c pip install --no-deps nccl-like==2.29.7 # buildkit"
    before, after = env(nccl_like="2.30.0"), env(nccl_like="2.29.7", extra="1.0")
    assert declared_by_instruction(LayerRef(4, repin), before, after) == ("nccl-like",)
    assert declared_by_instruction(LayerRef(4, NIGHTLY), before, after) == ()
    hist = history(state(0, "ADD x", None, nccl_like="2.30.0"),
                   state(1, repin, "runtime", nccl_like="2.29.7"))  # fmt: skip
    findings = [f for v in judged(hist).verdicts for f in v.findings]
    assert {(f.rule, f.severity) for f in findings if f.package == "nccl-like"} >= {
        ("override", "warning")
    }
    assert not any(f.fails for f in findings)


def test_the_matrix_has_a_column_per_layer_that_changed_the_environment() -> None:
    (matrix,) = layer_matrices(judged(FIELD))
    assert matrix.columns == ("empty", "#0", "#2 runtime", "#3 runtime")
    row = next(r for r in matrix.rows if r.package == "nccl-like")
    assert [c.kind for c in row.cells] == ["", "", "added", "downgraded"]


def test_every_format_names_the_layer_and_the_verdict() -> None:
    images = [judged(FIELD)]
    table = render_layers("audit-deps --image serving:1", images, "terminal", 120)
    assert "layer 3 (runtime 3): RUN pip install flashy==1.0" in table
    assert "✗ downgraded: nccl-like 2.30.0 -> 2.29.7" in table
    assert table.rstrip().endswith("FAIL (1 error, 0 warnings, 3 info)")
    document = json.loads(render_layers("t", images, "json"))
    assert document["verdict"] == "fail"
    (failing,) = [
        f for s in document["sections"] for f in s["findings"] if f["severity"] == "error"
    ]
    assert (failing["stage"], failing["layer"]) == ("runtime", 3)
    markdown = render_layers("t", images, "markdown")
    assert "#3 runtime" in markdown and "downgraded" in markdown
    page = render_layers("t", images, "html")
    assert page.startswith("<!DOCTYPE html>") and "nccl-like" in page


def test_a_recipe_image_is_located_by_its_guarded_steps() -> None:
    guarded = (
        "RUN /bin/sh -c pip install -r lock.txt"
        " && python -B /tmp/layer-audit/guard/guard.py --step v2-01 --trail x"
    )
    hist = history(state(0, "ADD x", None, a="1"), state(1, guarded, None, a="2"))
    located = recipe_located(hist)
    assert (located.states[2].ref.stage, located.states[2].ref.layer) == ("v2", 1)
    assert located.states[1].ref.stage is None


def test_the_fix_of_a_walked_image_uses_the_package_manager_of_the_package() -> None:
    """A Dockerfile re-pins a distribution with pip, an OS package with its own manager
    (pip install deb:libc6 means nothing)."""
    assert repin_hint("nccl-like", "2.30.0") == (
        "re-pin it in a later layer: pip install --no-deps nccl-like==2.30.0 (an override)"
    )
    assert repin_hint("deb:libc6", "2.36-9") == (
        "re-pin it in a later layer: apt-get install -y --allow-downgrades libc6=2.36-9"
    )
    assert repin_hint("apk:musl", "1.2.4-r2").endswith("apk add musl=1.2.4-r2")
