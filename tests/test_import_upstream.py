"""``import`` of excerpts of public ML Dockerfiles that once lost meaning or stopped it: each
test replays the smallest excerpt of the upstream file its comment names."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.cli.main import main
from audit.dockerfile.importer import ImportOptions, ImportPlan, plan_import
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe


def plan(text: str, **options: object) -> ImportPlan:
    return plan_import(text.encode(), "x", lambda relpath: True, ImportOptions(**options))  # type: ignore[arg-type]


def reasons(items: list[object]) -> dict[int, str]:
    return {i.line: i.reason for i in items}  # type: ignore[attr-defined]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "images").mkdir()
    return tmp_path


def test_a_secret_looking_arg_is_listed_with_a_readable_reason() -> None:
    # vllm-project/vllm docker/Dockerfile: the redaction rule read "secret: a" as a credential
    found = plan("FROM python:3.12\nARG SCCACHE_S3_NO_CREDENTIALS=0\nRUN true\n")
    reason = reasons(found.unmapped)[2]  # type: ignore[arg-type]
    assert "looks like a secret (a build argument stays in the image history)" in reason
    assert "***" not in reason


def test_a_refused_arg_is_not_declared_again_after_the_prelude(root: Path) -> None:
    # vllm-project/vllm docker/Dockerfile.cpu (base-common): the stage is cut after `uv venv`
    # and re-declared every ARG in scope, the refused one too: the recipe did not validate
    text = (
        "FROM ubuntu:25.04 AS base-common\n"
        "ARG PYTHON_VERSION=3.12\n"
        "ARG SCCACHE_S3_NO_CREDENTIALS=0\n"
        'ENV VIRTUAL_ENV="/opt/venv"\n'
        "RUN uv venv --python ${PYTHON_VERSION} --seed ${VIRTUAL_ENV}\n"
        "RUN echo done\n"
    )
    (root / "Dockerfile").write_text(text)
    assert main(["import", str(root / "Dockerfile"), "--image", "x"]) == 0
    recipe = load_recipe(DirectorySource(root), "x")
    assert recipe.base_stage == "v1" and len(recipe.stages) == 2
    assert "SCCACHE_S3_NO_CREDENTIALS" not in (root / "images/x/image.toml").read_text()


def test_a_stage_named_by_the_target_arch_is_resolved_and_listed() -> None:
    # vllm-project/vllm docker/Dockerfile.cpu: `FROM base-${TARGETARCH} AS base-arch` stopped
    # the import (exit 2); BuildKit fills TARGETARCH from the platform
    text = (
        "FROM python:3.12 AS base\n"
        "FROM base AS base-amd64\nENV A=1\n"
        "FROM base AS base-arm64\nENV A=2\n"
        "FROM base-${TARGETARCH} AS base-arch\nRUN true\n"
    )
    found = plan(text, platform="linux/arm64")
    assert 'from = "v2"' not in found.recipe_toml().split('name = "v4"')[1]
    reason = reasons(found.unmapped)[6]  # type: ignore[arg-type]
    assert "comes from TARGETARCH: the recipe builds on v3" in reason
    amd64 = plan(text).recipe_toml().split('name = "v4"')[1]
    assert 'from = "v2"' in amd64


def test_a_computed_index_url_is_not_called_control_flow() -> None:
    # vllm-project/vllm docker/Dockerfile (vllm-base): the pipe is inside $(…), not around
    # the install
    text = (
        "FROM python:3.12\nARG CUDA_VERSION=12.8.1\n"
        "RUN uv pip install --system -r requirements/build.txt \\\n"
        "    --extra-index-url https://download.pytorch.org/whl/cu$(echo $CUDA_VERSION "
        "| cut -d. -f1,2 | tr -d '.')\n"
    )
    reason = reasons(plan(text).unlocked)[3]  # type: ignore[arg-type]
    assert "an argument the shell computes" in reason and "control flow" not in reason


def test_every_run_after_shell_is_listed_in_every_stage_built_on_it() -> None:
    # vllm-project/vllm docker/Dockerfile (vllm-base, test): after SHELL ["/bin/bash", "-c"]
    # a later RUN's `[[ … ]]` runs in /bin/sh in the recipe; only the first RUN was listed
    text = (
        'FROM python:3.12 AS vllm-base\nSHELL ["/bin/bash", "-c"]\nRUN echo one\n'
        'RUN if [[ "$CUDA_VERSION" == 12.8* ]]; then echo new; fi\n'
        "FROM vllm-base AS test\nRUN echo three\n"
    )
    listed = reasons(plan(text).unmapped)  # type: ignore[arg-type]
    for line in (3, 4, 6):
        assert "a RUN after SHELL (line 2)" in listed[line]


PYTORCH = """\
ARG BASE_IMAGE=ubuntu:22.04
FROM ${BASE_IMAGE} as dev-base
RUN apt-get update && apt-get install -y --no-install-recommends curl
ENV PATH /opt/conda/bin:$PATH

FROM dev-base as conda
RUN bash ~/miniconda.sh -b -p /opt/conda && \\
    /opt/conda/bin/python -mpip install -r requirements.txt

FROM conda as conda-installs
RUN /opt/conda/bin/pip install torchelastic

FROM ${BASE_IMAGE} as official
RUN apt-get update && apt-get install -y --no-install-recommends libpng-dev
COPY --from=conda-installs /opt/conda /opt/conda
ENV PATH /opt/conda/bin:$PATH
WORKDIR /workspace
"""


def test_a_conda_prefix_copied_from_another_stage_is_the_audited_python() -> None:
    # pytorch/pytorch Dockerfile: the Python is /opt/conda's (named by `-mpip` and by its
    # pip script), and it arrives in the shipped stage by COPY --from: the prelude ends there
    found = plan(PYTORCH)
    assert found.interpreter == "/opt/conda/bin/python"
    assert [stage.name for stage in found.stages] == ["v1", "v2", "v3", "v4", "v5"]
    assert found.base_stage == "v4"  # `official` up to its COPY --from, then v5
    assert found.stages[3].layers[-1].toml.startswith('copy = { from = "v3", src = "/opt/conda"')
    assert not [item for item in found.unmapped if "base_stage" in item.reason]


def test_a_pip_script_names_its_own_python() -> None:
    assert plan("FROM python:3.12\nRUN /opt/env/bin/pip3 install rich\n").interpreter == (
        "/opt/env/bin/python3"
    )
