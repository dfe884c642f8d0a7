"""BuildKit plain-progress parsing, the mapping from BuildKit steps to recipe layers, and what
the executor prints and pushes once a build has passed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from audit.build.plan import BuildOptions
from audit.build.progress import parse, step_labels, step_table
from audit.build.run import move_tags
from audit.docker import host as docker_host
from audit.host import process as commands
from audit.host.process import Completed, shown_command
from audit.recipe.model import CopyLayer, EnvLayer, PipLayer, RunLayer, Stage
from tests.support.build_plan import LEGACY, make_recipe, plan


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


def test_the_live_table_renders_every_status_and_bracketed_text() -> None:
    lines = [
        "#1 [v1 1/3] FROM docker.io/layer-audit/base:bookworm-amd64",
        "#1 CACHED",
        "#2 [v1 2/3] RUN echo [not markup]",
        "#2 DONE 0.8s",
        "#3 [v1 3/3] RUN false",
        "#3 ERROR: process did not complete successfully",
        "#4 [v2 1/1] RUN sleep 9",
    ]
    buffer = StringIO()
    Console(file=buffer, width=100).print(step_table(parse(lines), "demo v2"))
    text = buffer.getvalue()
    for shown in ("cached", "done 0.8s", "error", "running", "RUN echo [not markup]"):
        assert shown in text


def test_the_printed_build_command_counts_its_labels_instead_of_listing_them() -> None:
    argv = ["docker", "build", "--label", "a=1", "-t", "x:v1", "--label", "b=2", "ctx"]
    assert shown_command(argv) == "docker build -t x:v1 --label … (2 labels, in build.log) ctx"
    assert shown_command(["docker", "build", "ctx"]) == "docker build ctx"


class _Image:
    def __init__(self, moved: list[str]) -> None:
        self.moved = moved

    def tag(self, repository: str, tag: str) -> None:
        self.moved.append(f"{repository}:{tag}")


class _Daemon:
    """The two calls ``move_tags`` makes of the docker SDK: ``images.get(ref).tag(repo, tag)``."""

    def __init__(self) -> None:
        self.moved: list[str] = []
        self.images = self

    def get(self, ref: str) -> _Image:
        return _Image(self.moved)


@pytest.mark.parametrize("push", [False, True], ids=["tag-only", "push"])
def test_push_pushes_every_moved_tag_after_tagging(
    monkeypatch: pytest.MonkeyPatch, push: bool
) -> None:
    daemon, pushed = _Daemon(), []

    def run(args: Sequence[str | Path], **kwargs: object) -> Completed:
        assert daemon.moved, "a tag is pushed only after every tag moved"
        pushed.append([str(a) for a in args])
        return Completed(tuple(pushed[-1]), 0, f"x: digest: sha256:{'a' * 64} size: 9\n", "")

    monkeypatch.setattr(docker_host, "daemon", lambda: daemon)
    monkeypatch.setattr(commands, "run", run)
    built = plan(BuildOptions(image="spark", push=push))
    move_tags(LEGACY, built)
    assert daemon.moved == list(built.tags) and "spark:latest-arm64-cu130" in str(built.tags)
    assert pushed == ([[LEGACY.path, "push", ref] for ref in built.tags] if push else [])
