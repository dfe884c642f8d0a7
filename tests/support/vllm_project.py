"""The field's vLLM recipe on disk for audit-deps tests: a CUDA recipe of three stages, its base,
and fresh locks of chosen pins per stage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.project import ProjectSpec, system_base
from tests.support.project import write_project as write_project_files

CUDA_RECIPE = """\
[image]
base = "example/vllm:day0"
platform = "linux/arm64"
cuda = "cu130"
interpreters = ["/usr/bin/python3"]
repository = "local/vllm"

[[stage]]
name = "v1"
  [[stage.layer]]
  run = "true"

[[stage]]
name = "v2"
  [[stage.layer]]
  pip = "requirements/v2.in"

[[stage]]
name = "v3"
  [[stage.layer]]
  env = { A = "1" }
  [[stage.layer]]
  pip = "requirements/v3.in"

[policy]
require = ["nvidia-nccl-cu13>=2.30"]

[policy.lockstep]
cutlass-dsl = ["nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-*"]
"""


BASE = {
    "nvidia-nccl-cu13": "2.30.1",
    "nvidia-cutlass-dsl": "4.3.0",
    "nvidia-cutlass-dsl-libs-base": "4.3.0",
    "torch": "2.9.0+cu130",
    "pip": "25.2",
}


CLEAN_PINS = {"v2": {"flashinfer-python": "0.6.18"}, "v3": {"rich": "14.0.0"}}


@dataclass
class Project:
    """A recipe folder's worth of inputs: its TOML, base packages and each stage's pins."""

    recipe: str = CUDA_RECIPE
    base: Mapping[str, str] = field(default_factory=lambda: dict(BASE))
    pins: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: dict(CLEAN_PINS))
    interpreter: str = "/usr/bin/python3"


def write_project(root: Path, project: Project, image: str = "vllm") -> None:
    """Recipe, requirements (one per pip stage), base.json and fresh locks."""
    base = system_base(
        project.base,
        site="/usr/local/lib/python3.12/dist-packages",
        python="3.12.3",
        interpreter=project.interpreter,
        image="example/vllm:day0",
    )
    write_project_files(root, ProjectSpec.locked(image, project.recipe, base, project.pins))


def with_pins(**stages: Mapping[str, str]) -> Project:
    return Project(pins={**CLEAN_PINS, **stages})
