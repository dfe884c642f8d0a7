"""A Dockerfile's stages laid out as recipe stages, before any instruction is mapped.

Each ``FROM`` is resolved (global ``ARG`` defaults substituted; an earlier stage's name or
index is that stage, anything else an image); the recipe's ``[image] base`` is the image the
last stage's chain starts from (what the file ships); other roots become stages with an image
of their own. When that base holds no Python, the prelude ends where one appears: after the
first step of the last stage's chain that installs one, else just before the first step that
uses one; a Dockerfile stage cut there becomes two recipe stages, the second built on the
first.

Invariants: recipe stages keep the Dockerfile's order (a stage's parent and every stage it
names come before it); each Dockerfile stage maps to one recipe stage, or two when the
prelude ends inside it (its name and ``COPY --from`` then mean the second).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from audit.dockerfile.bases import has_python
from audit.dockerfile.state import substitute

PYTHON_INSTALL = re.compile(
    r"\b(?:apt-get|apt|yum|dnf|microdnf|apk|zypper)\b[^\n;|]*\b(?:install|add)\b[^\n;|]*"
    r"\bpython3?(?:\.\d+)?(?:-[a-z]+)?\b|get-pip\.py|\buv\s+python\s+install\b|deadsnakes"
    r"|\b(?:miniconda|miniforge|mambaforge|micromamba|pyenv\s+install)\b"
)
PYTHON_USE = re.compile(r"(?:^|[\s;&|(/])(?:python3?(?:\.\d+)?|pip3?(?:\.\d+)?|uv)(?:\s|$)")
FROM_WORDS = re.compile(
    r"^(?P<flags>(?:--\S+\s+)*)(?P<base>\S+)(?:\s+[Aa][Ss]\s+(?P<name>\S+))?\s*$"
)


@dataclass
class DockerStage:
    """One FROM and the instructions after it."""

    index: int
    alias: str  # the AS name ('' when none)
    line: int  # the FROM's line
    reference: str  # what FROM names, global ARGs substituted
    platform: str  # its --platform, substituted ('' when none)
    items: list[dict[str, Any]] = field(default_factory=list)
    parent: int | None = None  # the earlier Dockerfile stage it builds on
    used_args: list[str] = field(default_factory=list)  # ARGs its FROM's image or stage names


@dataclass
class Layout:
    """The recipe stages to be: per Dockerfile stage its one or two recipe names, where the
    prelude ends, and the image the recipe records."""

    stages: list[DockerStage]
    names: dict[int, list[str]]  # Dockerfile stage index -> recipe stage names
    base: str  # the recorded base, [image] base (with any digest)
    cut: tuple[int, int] | None = None  # (stage index, items before the cut): prelude's end
    base_stage: str | None = None  # the recipe stage the base record is taken from
    no_python: bool = False  # the recorded base holds no Python
    problem: str = ""  # why no base_stage could be found for a base without Python

    def root(self, index: int) -> DockerStage:
        stage = self.stages[index]
        while stage.parent is not None:
            stage = self.stages[stage.parent]
        return stage

    def chain(self, index: int) -> list[DockerStage]:
        return chain_of(self.stages, index)


def chain_of(stages: Sequence[DockerStage], index: int) -> list[DockerStage]:
    """The stages stage ``index`` is built on, the one that starts from an image first."""
    found = [stages[index]]
    while found[-1].parent is not None:
        found.append(stages[found[-1].parent])
    return found[::-1]


def read_stages(
    items: list[dict[str, Any]], args: dict[str, str], platform: str = ""
) -> list[DockerStage]:
    """The Dockerfile's stages; ``args`` are the global ARG defaults FROM may name, and
    ``platform`` gives the ``TARGET*`` arguments BuildKit fills for a FROM's image or stage
    (``FROM base-${TARGETARCH}``; none when '')."""
    stages: list[DockerStage] = []
    known: dict[str, int] = {}
    for item in items:
        if str(item["instruction"]).upper() == "FROM":
            stage = _from(item, len(stages), {**target_args(platform), **args})
            stage.parent = known.get(stage.reference.lower())
            stages.append(stage)
            known[str(stage.index)] = stage.index
            if stage.alias:
                known[stage.alias] = stage.index
        elif stages:
            stages[-1].items.append(item)
    return stages


def target_args(platform: str) -> dict[str, str]:
    """``TARGETPLATFORM``, ``TARGETOS``, ``TARGETARCH``, ``TARGETVARIANT`` of ``platform``
    (``linux/arm64/v8``), as BuildKit fills them; none for ''."""
    if not platform:
        return {}
    os_name, _, rest = platform.partition("/")
    arch, _, variant = rest.partition("/")
    return {
        "TARGETPLATFORM": platform,
        "TARGETOS": os_name,
        "TARGETARCH": arch,
        "TARGETVARIANT": variant,
    }


def _from(item: dict[str, Any], index: int, args: dict[str, str]) -> DockerStage:
    value = str(item["value"]).strip()
    words = FROM_WORDS.match(value)
    base = words.group("base") if words else value
    used = [name for name in args if re.search(r"\$\{?" + re.escape(name) + r"\b", base)]
    match = FROM_WORDS.match(substitute(_defaults(value, args), args))
    flags = (match.group("flags") if match else "").split()
    platform = next((f.partition("=")[2] for f in flags if f.startswith("--platform=")), "")
    reference = match.group("base") if match else value
    alias = (match.group("name") or "").lower() if match else ""
    line = int(item["startline"]) + 1
    return DockerStage(index, alias, line, reference, platform, [], None, used)


_DEFAULTED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?-([^}]*)\}")


def _defaults(value: str, args: Mapping[str, str]) -> str:
    """``${NAME:-default}`` in a ``FROM``: NAME's value when it has one, else the default (as
    BuildKit reads it; the importer's other substitutions leave such forms alone)."""
    return _DEFAULTED.sub(lambda m: args.get(m.group(1)) or m.group(2), value)


def lay_out(
    stages: list[DockerStage], interpreter: str, *, base_has_python: bool | None = None
) -> Layout:
    """Recipe stage names, the recorded base and the prelude's end (where ``interpreter``,
    the one the recipe audits, first exists)."""
    layout = Layout(stages, {}, "")
    layout.base = layout.root(len(stages) - 1).reference
    python = has_python(layout.base) if base_has_python is None else base_has_python
    layout.no_python = not python
    if layout.no_python:
        _find_cut(layout, interpreter)
    number = 1
    for stage in stages:
        cut = layout.cut
        split = cut is not None and cut[0] == stage.index and 0 < cut[1] < len(stage.items)
        layout.names[stage.index] = [f"v{number + n}" for n in range(2 if split else 1)]
        number += 2 if split else 1
    _base_stage(layout)
    return layout


def _find_cut(layout: Layout, interpreter: str) -> None:
    """Where the prelude ends on the last stage's chain: after the RUN that makes the virtual
    environment ``interpreter`` lives in, else after the first RUN that installs a Python,
    else after a ``COPY --from`` that brings in its folder, else before the first step that
    uses one."""
    runs = [
        (stage.index, position, str(item["value"]))
        for stage in layout.chain(len(layout.stages) - 1)
        for position, item in enumerate(stage.items)
        if str(item["instruction"]).upper() == "RUN"
    ]
    venv = _venv_maker(interpreter)
    found = next(((i, p + 1) for i, p, text in runs if venv and venv.search(text)), None)
    found = found or next(((i, p + 1) for i, p, text in runs if PYTHON_INSTALL.search(text)), None)
    found = found or _copied_in(layout, interpreter)
    found = found or next(((i, p) for i, p, text in runs if PYTHON_USE.search(text)), None)
    layout.cut = found
    if found is None:
        layout.problem = "no step of the last stage's chain installs or uses a Python"


def _copied_in(layout: Layout, interpreter: str) -> tuple[int, int] | None:
    """Just after the first ``COPY --from`` of the last stage's chain that brings in the
    folder ``interpreter`` lives in (``COPY --from=conda /opt/conda /opt/conda``: a prefix
    built in another stage, pytorch's own Dockerfile)."""
    for stage in layout.chain(len(layout.stages) - 1):
        for position, item in enumerate(stage.items):
            words = str(item["value"]).split()
            if str(item["instruction"]).upper() == "COPY" and _brings(words, interpreter):
                return stage.index, position + 1
    return None


def _brings(words: list[str], interpreter: str) -> bool:
    """Whether ``COPY --from=… SRC… DEST`` puts a folder above ``interpreter`` in place."""
    folder = words[-1].rstrip("/") if len(words) >= 3 else ""
    from_stage = any(word.startswith("--from=") for word in words)
    return from_stage and bool(folder) and interpreter.startswith(folder + "/")


def _venv_maker(interpreter: str) -> re.Pattern[str] | None:
    """What a RUN that makes the virtual environment of ``/x/bin/python`` says."""
    folder = interpreter.removesuffix("/bin/python").removesuffix("/bin/python3")
    if folder == interpreter or folder in ("/usr", "/usr/local"):
        return None
    return re.compile(r"\b(?:venv|virtualenv)\s+(?:--?\S+\s+)*" + re.escape(folder) + r"/?(?:\s|$)")


def _base_stage(layout: Layout) -> None:
    """The recipe stage the base record is taken from: the first half of a cut stage, the
    stage a cut falls at the end of, or the parent of one it falls at the start of."""
    if layout.cut is None:
        return
    index, position = layout.cut
    stage = layout.stages[index]
    if position >= len(stage.items) or (0 < position < len(stage.items)):
        layout.base_stage = layout.names[index][0]
    elif stage.parent is not None:
        layout.base_stage = layout.names[stage.parent][-1]
    else:
        layout.problem = (
            f"line {stage.line}: {layout.base} has no Python and the first step of its stage "
            "already uses one"
        )
