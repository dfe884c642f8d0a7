"""A Dockerfile's stages, and which stage and line made each entry of a built image's history.

BuildKit writes one history entry per instruction of every stage a target is built from
(``ARG``, ``ENV``, ``LABEL`` and the like as empty layers; ``FROM`` none; global ``ARG``s
before the first ``FROM`` none), after the entries of the image the first of those stages
starts from. So the last N entries of the built image are the N instructions of its stage
chain, in order: :func:`attribute` maps them back, and checks each entry's keyword against
its instruction, so a file that does not match the image (ONBUILD triggers, another file)
gives no attribution rather than a wrong one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from audit.dockerfile.importer import parse_dockerfile
from audit.dockerfile.layout import DockerStage, chain_of, read_stages
from audit.errors import RecipeError


@dataclass(frozen=True)
class Attribution:
    """Where one history entry came from: stage, 1-based position in it, the line."""

    stage: str
    position: int
    line: int
    text: str


def stage_name(stage: DockerStage) -> str:
    """What ``--target`` and a waiver call a stage: its ``AS`` name, else its index."""
    return stage.alias or str(stage.index)


def global_args(items: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``ARG NAME=default`` before the first ``FROM`` (what ``FROM ${BASE}`` may use)."""
    found: dict[str, str] = {}
    for item in items:
        if item["instruction"] == "FROM":
            break
        if item["instruction"] == "ARG":
            name, _, value = str(item["value"]).strip().partition("=")
            found[name.strip()] = value.strip().strip("\"'")
    return found


def parse_stages(
    data: bytes, build_args: Mapping[str, str], where: str, platform: str = ""
) -> list[DockerStage]:
    """Every stage of the Dockerfile ``data`` (the importer's reading of it:
    :func:`audit.dockerfile.layout.read_stages`); ``build_args`` override global ``ARG``
    defaults, ``platform`` (``linux/arm64``) fills the ``TARGET*`` arguments a FROM may name.
    RecipeError (exit 2) for a file with no ``FROM``."""
    items = parse_dockerfile(data)
    stages = read_stages(items, {**global_args(items), **build_args}, platform)
    if not stages:
        raise RecipeError(where, "no FROM instruction", "is this a Dockerfile?")
    return stages


def find_stage(stages: Sequence[DockerStage], target: str | None, where: str) -> DockerStage:
    """The stage ``--target`` names (by name or index), else the last."""
    if target is None:
        return stages[-1]
    for stage in stages:
        if target.lower() in (stage.alias, str(stage.index)):
            return stage
    names = ", ".join(stage_name(s) for s in stages)
    raise RecipeError(where, f"no stage {target!r}", f"--target takes one of: {names}")


def _keyword_of(created_by: str) -> str:
    """The instruction keyword an entry's ``created_by`` starts with (``RUN``, ``COPY`` …)."""
    text = created_by.strip()
    if text.startswith("/bin/sh -c #(nop) "):  # the classic builder's spelling
        text = text[len("/bin/sh -c #(nop) ") :].strip()
    elif text.startswith("/bin/sh -c "):
        return "RUN"
    return text.split(" ", 1)[0].upper()


def attribute(
    history: Sequence[str], stages: Sequence[DockerStage], target: DockerStage
) -> list[Attribution | None]:
    """For each entry of ``history`` (``created_by`` texts, oldest first), the stage and line
    of the Dockerfile that made it; None for the base image's entries, or for every entry
    when the last ones do not match the stage chain's instructions keyword for keyword."""
    made = [
        (Attribution(stage_name(stage), position, int(item["startline"]) + 1, str(item["value"])),
         str(item["instruction"]).upper())
        for stage in chain_of(stages, target.index)
        for position, item in enumerate(stage.items, start=1)
        if str(item["instruction"]).upper() != "ONBUILD"
    ]  # fmt: skip
    unknown: list[Attribution | None] = [None] * len(history)
    if len(made) > len(history):
        return unknown
    tail = history[len(history) - len(made) :]
    for entry, (_, keyword) in zip(tail, made, strict=True):
        if _keyword_of(entry) != keyword:
            return unknown
    return [None] * (len(history) - len(made)) + [where for where, _ in made]
