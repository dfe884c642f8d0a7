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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from audit.dockerfile.importer import parse_dockerfile
from audit.errors import RecipeError

_FROM = re.compile(
    r"^(?:--platform=\S+\s+)?(?P<base>\S+)(?:\s+[Aa][Ss]\s+(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*))?\s*$"
)
_ARG_REF = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


@dataclass(frozen=True)
class Instruction:
    """One instruction after ``FROM``: its keyword, its text and its 1-based line."""

    keyword: str
    text: str
    line: int


@dataclass(frozen=True)
class Stage:
    """One ``FROM`` and what follows it; ``base`` is an image reference or an earlier stage's
    name (``parent`` is that stage's index, None for an image)."""

    index: int
    name: str
    base: str
    parent: int | None
    instructions: tuple[Instruction, ...]
    line: int


@dataclass(frozen=True)
class Attribution:
    """Where one history entry came from: stage, 1-based position in it, the line."""

    stage: str
    position: int
    line: int
    text: str


def global_args(items: Sequence[Mapping[str, object]]) -> dict[str, str]:
    """``ARG NAME=default`` before the first ``FROM`` (what ``FROM ${BASE}`` may use)."""
    found: dict[str, str] = {}
    for item in items:
        if item["instruction"] == "FROM":
            break
        if item["instruction"] == "ARG":
            name, _, value = str(item["value"]).strip().partition("=")
            found[name.strip()] = value.strip().strip("\"'")
    return found


def substitute(text: str, args: Mapping[str, str]) -> str:
    """``$NAME``, ``${NAME}`` and ``${NAME:-default}`` of ``args`` in a ``FROM`` line."""

    def one(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("bare")
        default = match.group("default")
        value = args.get(name)
        return value if value else (default or "")

    return _ARG_REF.sub(one, text)


def parse_stages(data: bytes, build_args: Mapping[str, str], where: str) -> tuple[Stage, ...]:
    """Every stage of the Dockerfile ``data``; ``build_args`` override global ``ARG`` defaults.

    Raises RecipeError (exit 2) for a file with no ``FROM`` or a ``FROM`` it cannot read.
    """
    items = parse_dockerfile(data)
    args = {**global_args(items), **build_args}
    stages: list[Stage] = []
    current: list[Instruction] = []
    header: tuple[str, str, int] | None = None
    for item in items:
        keyword, value = str(item["instruction"]).upper(), str(item["value"])
        line = int(str(item["startline"])) + 1
        if keyword == "FROM":
            if header is not None:
                stages.append(_stage(len(stages), header, current, stages))
            header, current = _from(value, args, where, line), []
        elif header is not None:
            current.append(Instruction(keyword, f"{keyword} {value}", line))
    if header is None:
        raise RecipeError(where, "no FROM instruction", "is this a Dockerfile?")
    stages.append(_stage(len(stages), header, current, stages))
    return tuple(stages)


def _from(value: str, args: Mapping[str, str], where: str, line: int) -> tuple[str, str, int]:
    match = _FROM.match(substitute(value.strip(), args))
    if match is None:
        raise RecipeError(f"{where}:{line}", f"cannot read FROM {value!r}", "FROM IMAGE [AS NAME]")
    return match.group("base"), match.group("name") or "", line


def _stage(
    index: int, header: tuple[str, str, int], body: list[Instruction], earlier: list[Stage]
) -> Stage:
    base, name, line = header
    parent = next((s.index for s in earlier if s.name and s.name == base), None)
    if parent is None and base.isdigit() and int(base) < index:
        parent = int(base)
    return Stage(index, name or str(index), base, parent, tuple(body), line)


def find_stage(stages: Sequence[Stage], target: str | None, where: str) -> Stage:
    """The stage ``--target`` names (by name or index), else the last."""
    if target is None:
        return stages[-1]
    for stage in stages:
        if target in (stage.name, str(stage.index)):
            return stage
    names = ", ".join(s.name for s in stages)
    raise RecipeError(where, f"no stage {target!r}", f"--target takes one of: {names}")


def chain(stages: Sequence[Stage], target: Stage) -> list[Stage]:
    """The stages ``target`` is built on, the one that starts from an image first."""
    found = [target]
    while found[-1].parent is not None:
        found.append(stages[found[-1].parent])
    return found[::-1]


def _keyword_of(created_by: str) -> str:
    """The instruction keyword an entry's ``created_by`` starts with (``RUN``, ``COPY`` …)."""
    text = created_by.strip()
    if text.startswith("/bin/sh -c #(nop) "):  # the classic builder's spelling
        text = text[len("/bin/sh -c #(nop) ") :].strip()
    elif text.startswith("/bin/sh -c "):
        return "RUN"
    return text.split(" ", 1)[0].upper()


def attribute(
    history: Sequence[str], stages: Sequence[Stage], target: Stage
) -> list[Attribution | None]:
    """For each entry of ``history`` (``created_by`` texts, oldest first), the stage and line
    of the Dockerfile that made it; None for the base image's entries, or for every entry
    when the last ones do not match the stage chain's instructions keyword for keyword."""
    made = [
        (Attribution(stage.name, position, instruction.line, instruction.text), instruction)
        for stage in chain(stages, target)
        for position, instruction in enumerate(stage.instructions, start=1)
        if instruction.keyword != "ONBUILD"
    ]
    unknown: list[Attribution | None] = [None] * len(history)
    if len(made) > len(history):
        return unknown
    tail = history[len(history) - len(made) :]
    for entry, (_, instruction) in zip(tail, made, strict=True):
        if _keyword_of(entry) != instruction.keyword:
            return unknown
    return [None] * (len(history) - len(made)) + [where for where, _ in made]
