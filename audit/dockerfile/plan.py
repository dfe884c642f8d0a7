"""What an import writes (:class:`ImportPlan`), and its ``image.toml``: deterministic, every
stage and layer preceded by the Dockerfile line it came from, every listed line marked where
it is kept.

Invariant: the text passes :func:`audit.redact.redact` as a whole, and every value is a TOML
basic string (JSON's escapes), so no value of the Dockerfile can add a key or a table.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from audit.dockerfile.state import StagePlan, Unmapped, q
from audit.policy.presets import CUDA_ML
from audit.redact import redact

DEFAULT_INDEX = "https://pypi.org/simple"


@dataclass
class ImportPlan:
    """Everything ``import`` writes, by recipe-relative path, and what it lists."""

    image: str
    base: str
    base_digest: str | None
    platform: str
    cuda: str
    interpreter: str
    index_url: str
    indexes: dict[str, str]
    stages: list[StagePlan]
    requirements: dict[str, bytes]  # recipe-relative path -> bytes
    copies: dict[str, str]  # recipe-relative path -> build-context-relative source
    unmapped: list[Unmapped]  # not kept: the recipe does something else there
    notes: list[Unmapped]
    unlocked: list[Unmapped] = field(default_factory=list)  # installs kept as run layers
    files: dict[str, bytes] = field(default_factory=dict)  # heredoc bodies, by recipe path
    args: list[str] = field(default_factory=list)  # the [args] table's rows
    base_stage: str | None = None
    break_system_packages: bool = False

    def recipe_toml(self) -> str:
        """``image.toml``: deterministic, every layer preceded by its Dockerfile line."""
        return recipe_toml(self)


def policy_preset(cuda: str) -> str | None:
    """The policy preset an imported recipe turns on: the field's CUDA ML rules
    (:data:`audit.policy.presets.CUDA_ML`) for a CUDA image, none for ``cpu``."""
    return CUDA_ML if cuda != "cpu" else None


def recipe_toml(plan: ImportPlan) -> str:
    """The whole recipe text."""
    lines = [
        "# Imported by `layer-audit import` from a Dockerfile: review every stage, then run",
        f"# `layer-audit lock {plan.image}`. Lines it could not keep are marked UNMAPPED, each",
        "# with its Dockerfile line; installs kept as run layers are listed by import.",
        "",
        *_image(plan),
    ]
    if plan.indexes:
        lines += ["", "[indexes]"]
        lines += [f"{name} = {q(url)}" for name, url in sorted(plan.indexes.items())]
    if plan.args:
        lines += ["", "[args]  # build arguments: render and build take --build-arg NAME=VALUE"]
        lines += plan.args
    last = plan.stages[-1] if plan.stages else None
    lines += last.config.toml() if last else []
    preset = policy_preset(plan.cuda)
    lines += ["", "[policy]", f"preset = {q(preset)}"] if preset else []
    for stage in plan.stages:
        lines += list(_stage(stage, stage is last))
    return redact("\n".join(lines) + "\n")


def _image(plan: ImportPlan) -> list[str]:
    rows = ["[image]", f"base = {q(plan.base)}"]
    rows += [f"base_digest = {q(plan.base_digest)}"] if plan.base_digest else []
    rows += [
        f"platform = {q(plan.platform)}",
        f"cuda = {q(plan.cuda)}",
        f"interpreters = [{q(plan.interpreter)}]",
        f"repository = {q('local/' + plan.image)}",
    ]
    rows += [f"index_url = {q(plan.index_url)}"] if plan.index_url != DEFAULT_INDEX else []
    rows += ["break_system_packages = true"] if plan.break_system_packages else []
    if plan.base_stage:
        rows += [
            f"# {plan.base} has no Python: {plan.base_stage} gives it one, and the base record",
            "# is taken from it built (lock --record-base builds it)",
            f"base_stage = {q(plan.base_stage)}",
        ]
    return rows


def _stage(stage: StagePlan, last: bool) -> Iterator[str]:
    yield from ("", "[[stage]]", f"name = {q(stage.name)}", f"description = {q(stage.description)}")
    if stage.parent:
        yield f"from = {q(stage.parent)}"
    if stage.base:
        yield f"base = {q(stage.base)}"
    if stage.base_digest:
        yield f"base_digest = {q(stage.base_digest)}"
    if stage.target:
        yield f"target = {q(stage.target)}"
    if stage.unaudited:
        yield f"# not audited by the guard: {stage.unaudited}"
    for layer in stage.layers:
        yield ""
        if layer.note:
            yield f"  # {layer.note}"
        yield "  [[stage.layer]]"
        yield from (f"  {row}" for row in layer.toml.splitlines())
        if layer.primary:
            yield f"  primary_index = {q(layer.primary)}"
    if not last:
        yield from stage.config.toml("[stage.config]", "  ")
