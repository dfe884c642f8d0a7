"""``build --dockerfile``: a serving-style Dockerfile built unchanged, walked, tagged on a pass.

The Dockerfile (``tests/support/walk_build.py``) has what real serving images have (a build
and a runtime stage, ``COPY --from``, cache and bind mounts, ARG-driven versions, a
``$TARGETPLATFORM`` branch, an install by a copied script, ``apt-get install``), and one late
layer whose ``pip install`` downgrades the NCCL stand-in: the field's failure. Built with the
engine's BuildKit from the offline base and tiny wheels on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as cli
from audit.docker import host as docker_host
from audit.errors import EXIT_OK, EXIT_VIOLATION
from tests.support.fixtures import BaseImageFactory
from tests.support.pkgindex import serve_index
from tests.support.walk_build import LATE_LAYER, REPOSITORY, serving_context, wheels

pytestmark = [pytest.mark.docker, pytest.mark.slow]
FIXED_LAYER = LATE_LAYER.replace("pip install", "pip install --no-deps")


@dataclass(frozen=True)
class Served:
    context: Path
    args: tuple[str, ...]  # the --build-arg options every build takes


@pytest.fixture(scope="module")
def served(
    base_image: BaseImageFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    base = base_image("bookworm", "amd64")
    context = serving_context(tmp_path_factory.mktemp("serving"))
    with serve_index(wheels(tmp_path_factory.mktemp("wheels"))) as index:
        args = ("--build-arg", f"BASE={base}", "--build-arg", f"INDEX_URL={index}")
        yield Served(context, (*args, "--network", "host"))


@pytest.fixture
def tag() -> Iterator[str]:
    name = f"{REPOSITORY}-dockerfile/serving:candidate"
    yield name
    docker_host.remove_image(name)


def build(served: Served, tag: str, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "report.json"
    argv = ["build", "--dockerfile", str(served.context / "Dockerfile"), "-t", tag, *served.args]
    code = cli.main([*argv, *extra, "--format", "json", "--output", str(report)])
    return code, json.loads(report.read_text())


def failing(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (section["title"], f)
        for section in report["sections"]
        for f in section["findings"]
        if f["severity"] == "error"
    ]


def test_the_late_downgrade_fails_names_its_layer_and_moves_no_tag(
    served: Served, tag: str, tmp_path: Path
) -> None:
    code, report = build(served, tag, tmp_path)
    assert code == EXIT_VIOLATION
    ((title, finding),) = failing(report)
    assert (finding["rule"], finding["package"], finding["before"], finding["after"]) == (
        "downgraded", "nccl-like", "2.30.0", "2.29.7",
    )  # fmt: skip
    assert finding["stage"] == "runtime"
    assert any(a.startswith("flashy 1.0 requires nccl-like==2.29.7") for a in finding["askers"])
    line = next(
        n for n, text in enumerate((served.context / "Dockerfile").read_text().splitlines(), 1)
        if LATE_LAYER in text
    )  # fmt: skip
    assert re.search(rf"\(runtime \d+, Dockerfile:{line}\): RUN ", title), title
    assert "/opt/venv/bin/pip install --no-ind" in title  # the instruction, shortened
    assert not docker_host.image_exists(tag)


def test_a_waiver_for_that_stage_passes_and_tags(served: Served, tag: str, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[[policy.waiver]]\npackage = "nccl-like"\nfrom = "2.30.0"\nto = "2.29.7"\n'
        'reason = "flashy 1.0 needs it until its next release"\nstage = "runtime"\n'
    )
    code, report = build(served, tag, tmp_path, "--policy", str(policy))
    assert code == EXIT_OK, failing(report)
    assert docker_host.image_exists(tag)
    waived = [f for s in report["sections"] for f in s["findings"] if f.get("waiver")]
    assert [(f["package"], f["stage"]) for f in waived] == [("nccl-like", "runtime")]


def test_the_fixed_file_is_built_unchanged_and_tagged(
    served: Served, tag: str, tmp_path: Path
) -> None:
    fixed = tmp_path / "fixed"
    shutil.copytree(served.context, fixed)
    text = (served.context / "Dockerfile").read_text()
    (fixed / "Dockerfile").write_text(text.replace(LATE_LAYER, FIXED_LAYER))
    code, report = build(Served(fixed, served.args), tag, tmp_path)
    assert code == EXIT_OK, failing(report)
    assert docker_host.image_exists(tag)


PLAIN_DOCKERFILE = """\
ARG BASE
FROM ${BASE}
COPY wheels /wheels
RUN /opt/venv/bin/pip install --no-index --find-links /wheels nccl-like==2.30.0
RUN /opt/venv/bin/pip install --no-index --find-links /wheels flashy==1.0
"""


def test_a_plain_file_with_no_stage_name_is_built_and_judged(
    base_image: BaseImageFactory, tag: str, tmp_path: Path
) -> None:
    """Most Dockerfiles have one stage and no AS name: it is built as docker builds it (no
    --target, which takes only names) and its late downgrade is named by its line."""
    context = tmp_path / "plain"
    wheels(context / "wheels")
    (context / "Dockerfile").write_text(PLAIN_DOCKERFILE)
    base = base_image("bookworm", "amd64")
    served = Served(context, ("--build-arg", f"BASE={base}"))
    code, report = build(served, tag, tmp_path)
    assert code == EXIT_VIOLATION
    ((title, finding),) = failing(report)
    assert (finding["rule"], finding["package"], finding["after"]) == (
        "downgraded", "nccl-like", "2.29.7",
    )  # fmt: skip
    assert "Dockerfile:5): RUN " in title, title
    assert not docker_host.image_exists(tag)
