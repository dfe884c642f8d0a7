"""``layer-audit import``: a multi-stage Dockerfile turned into a recipe folder, decided in memory.

The Dockerfile is read with ``dockerfile-parse`` (heredoc bodies found in the text:
:mod:`audit.dockerfile.heredoc`); each instruction is mapped on its own (``RUN`` in
:mod:`audit.dockerfile.run`, ``ENV``/``COPY``/``ADD`` in :mod:`audit.dockerfile.files`,
the walk's state in :mod:`audit.dockerfile.state`), so that the rendered recipe does what
the Dockerfile did:

- the first stage's ``FROM`` is the recipe's base (``@sha256:`` becomes ``base_digest``); every
  stage is a recipe stage ``v1`` … ``vN`` (its Dockerfile name goes into the description);
- ``RUN pip install …`` / ``python3 -m pip install …`` / ``uv pip install …`` is a pip layer
  whose ``requirements/vK-NN.in`` holds the requirements; ``--index-url`` becomes the image's
  index (or a declared index when layers disagree), ``--extra-index-url`` a declared index named
  after its host and path, ``--pre`` ``pre = true``, ``--no-deps`` with exact pins
  ``no_deps = true`` (the field's re-pin, which the lock then applies as an override);
- a ``RUN`` of several commands joined by ``&&`` is split, so a pip install among them still
  becomes a pip layer; ``RUN`` otherwise is a run layer (a heredoc body becomes a file of the
  recipe fed to the command's standard input), ``COPY``/``ADD`` of context files a copy layer
  (``--chmod``/``--chown`` kept), ``ENV`` an env layer (``expand = true`` when it names a
  variable the base image sets), ``WORKDIR`` a workdir layer;
- ``ARG`` defaults are substituted where Docker would use them (the ``ARG`` itself leaves
  nothing in an image); ``CMD``, ``ENTRYPOINT``, ``USER``, ``EXPOSE``, ``LABEL``,
  ``HEALTHCHECK``, ``STOPSIGNAL``, ``SHELL`` become the recipe's ``[config]`` (the final image's
  configuration: :mod:`audit.dockerfile.config`).

Invariant: no instruction is dropped. What cannot be mapped (a ``FROM`` that does not continue
the previous stage, ``COPY --from``, ``ADD`` of a URL, a pip install inside ``||`` or a subshell …)
is listed in :attr:`ImportPlan.unmapped` with its line number and a true reason and kept in the
recipe as a run layer: the original command, or a shell no-op ``: '<instruction>'`` naming it.
No credential is written: every text the plan holds passes :func:`audit.redact.redact`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from dockerfile_parse import DockerfileParser

from audit.dockerfile import heredoc as dockerfile_heredoc
from audit.dockerfile.config import CONFIG_KINDS, EXPANDED_KINDS
from audit.dockerfile.files import add, copy, copy_heredoc, env
from audit.dockerfile.heredoc import Heredoc
from audit.dockerfile.run import run
from audit.dockerfile.state import (
    Layer,
    StagePlan,
    State,
    Unmapped,
    add_layer,
    keep,
    q,
    substitute,
    unquote,
    variables,
)
from audit.errors import UsageError
from audit.policy.presets import CUDA_ML
from audit.recipe.parse import CONTAINER_PATH
from audit.redact import redact

DEFAULT_INDEX = "https://pypi.org/simple"
DEFAULT_INTERPRETER = "/usr/bin/python3"
CUDA_TAG = re.compile(r"(?:^|[-_.:])(cu\d{2,4})(?:$|[-_.])")


@dataclass
class ImportPlan:
    """Everything ``import`` writes, by recipe-relative path, plus what it could not map."""

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
    unmapped: list[Unmapped]
    notes: list[Unmapped]
    files: dict[str, bytes] = field(default_factory=dict)  # heredoc bodies, by recipe path
    config: list[str] = field(default_factory=list)  # the [config] table's TOML lines

    def recipe_toml(self) -> str:
        """``image.toml``: deterministic, every layer preceded by its Dockerfile line."""
        lines = [
            "# Imported by `layer-audit import` from a Dockerfile: review every stage, then run",
            f"# `layer-audit lock {self.image}`. Lines it could not map are run layers below",
            "# marked UNMAPPED; each names its Dockerfile line.",
            "",
            "[image]",
            f"base = {q(self.base)}",
        ]
        if self.base_digest:
            lines.append(f"base_digest = {q(self.base_digest)}")
        lines += [
            f"platform = {q(self.platform)}",
            f"cuda = {q(self.cuda)}",
            f"interpreters = [{q(self.interpreter)}]",
            f"repository = {q('local/' + self.image)}",
        ]
        if self.index_url != DEFAULT_INDEX:
            lines.append(f"index_url = {q(self.index_url)}")
        if self.indexes:
            lines += ["", "[indexes]"]
            lines += [f"{name} = {q(url)}" for name, url in sorted(self.indexes.items())]
        lines += self.config
        lines += _policy_lines(self.cuda)
        for stage in self.stages:
            lines += ["", "[[stage]]", f"name = {q(stage.name)}"]
            lines.append(f"description = {q(stage.description)}")
            for layer in stage.layers:
                lines.append("")
                if layer.note:
                    lines.append(f"  # {layer.note}")
                lines += ["  [[stage.layer]]", *(f"  {row}" for row in layer.toml.splitlines())]
        return redact("\n".join(lines) + "\n")


def policy_preset(cuda: str) -> str | None:
    """The policy preset an imported recipe turns on: the field's CUDA ML rules
    (:data:`audit.policy.presets.CUDA_ML`) for a CUDA image, none for ``cpu``."""
    return CUDA_ML if cuda != "cpu" else None


def _policy_lines(cuda: str) -> list[str]:
    preset = policy_preset(cuda)
    return ["", "[policy]", f"preset = {q(preset)}"] if preset else []


def parse_dockerfile(data: bytes) -> list[dict[str, Any]]:
    """The instructions of a Dockerfile, in memory (the parser never touches the disk here);
    an instruction with heredocs carries them as ``item["heredocs"]``."""
    parser = DockerfileParser(fileobj=io.BytesIO(data))
    items = [
        item
        for item in parser.structure
        if item["instruction"] not in ("COMMENT",) and item["instruction"].strip()
    ]
    lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
    return dockerfile_heredoc.attach(items, lines)


def plan_import(
    data: bytes,
    image: str,
    context_has: Callable[[str], bool],
    *,
    where: str = "Dockerfile",
    platform: str | None = None,
    cuda: str | None = None,
    interpreter: str | None = None,
) -> ImportPlan:
    """The recipe for the Dockerfile ``data``; ``context_has`` answers whether a build-context
    path (POSIX, relative) is a file or folder. Raises :class:`UsageError` (exit 2) when the
    text has no ``FROM`` or the first ``FROM`` names no image."""
    instructions = parse_dockerfile(data)
    state = State(context_has, interpreter, platform)
    base, digest = _walk(instructions, state, where)
    found_cuda = cuda or _guess_cuda(base)
    return ImportPlan(
        image=image,
        base=base,
        base_digest=digest,
        platform=state.platform or _guess_platform(base),
        cuda=found_cuda,
        interpreter=state.interpreter or _first(state.seen_interpreters) or DEFAULT_INTERPRETER,
        index_url=state.index_url or DEFAULT_INDEX,
        indexes=state.indexes,
        stages=state.stages,
        requirements=state.requirements,
        copies=state.copies,
        unmapped=state.unmapped,
        notes=state.notes,
        files=state.files,
        config=state.config.toml(),
    )


def _first(items: list[str]) -> str | None:
    return items[0] if items else None


def _guess_platform(base: str) -> str:
    """``linux/arm64`` when the base image's tag names arm64 (or aarch64), else linux/amd64."""
    tag = base.rpartition(":")[2] if ":" in base.rpartition("/")[2] else ""
    return "linux/arm64" if re.search(r"arm64|aarch64", tag) else "linux/amd64"


def _guess_cuda(base: str) -> str:
    """``cu130`` when the base image's tag says so, else ``cpu``."""
    tag = base.rpartition(":")[2] if ":" in base.rpartition("/")[2] else ""
    match = CUDA_TAG.search(tag)
    return match.group(1) if match else "cpu"


def _walk(instructions: list[dict[str, Any]], state: State, where: str) -> tuple[str, str | None]:
    """Map every instruction; returns the base reference and its digest."""
    base: tuple[str, str | None] | None = None
    for item in instructions:
        line = int(item["startline"]) + 1
        kind = str(item["instruction"]).upper()
        value = str(item["value"])
        if kind == "FROM":
            reference = _from(value, line, state, where)
            if base is None:
                base = reference
            continue
        if not state.stages:
            _before_first_stage(kind, value, line, state)
            continue
        _instruction(kind, value, line, state, item.get("heredocs", []))
    if base is None:
        raise UsageError(
            f"{where}: no FROM instruction",
            "import reads a Dockerfile whose first stage starts with FROM <image>",
        )
    for stage in state.stages:
        if not stage.layers:
            state.notes.append(Unmapped(0, f"stage {stage.name}", "had no layers: a no-op added"))
            stage.layers.append(Layer(0, f"run = {q(': empty stage')}", "an empty stage"))
    return base


def _before_first_stage(kind: str, value: str, line: int, state: State) -> None:
    """Global ``ARG``s feed ``FROM``; anything else before the first FROM is listed."""
    if kind == "ARG":
        name, equals, default = value.partition("=")
        if equals:
            state.args[name.strip()] = unquote(substitute(default.strip(), state.args))
            return
    state.unmapped.append(Unmapped(line, redact(f"{kind} {value}"), "before the first FROM"))


def _from(value: str, line: int, state: State, where: str) -> tuple[str, str | None]:
    """A new stage; the first FROM gives the base, later ones must continue the previous."""
    words = substitute(value, state.args).split()
    for word in [w for w in words if w.startswith("--")]:
        if word.startswith("--platform=") and state.platform is None:
            state.platform = word.partition("=")[2]
        words.remove(word)
    if not words or "$" in words[0]:
        raise UsageError(
            f"{where}:{line}: FROM {value!r} names no image this import can resolve",
            "give the base image literally (or as a global ARG with a default)",
        )
    reference = words[0]
    alias = words[2] if len(words) >= 3 and words[1].lower() == "as" else ""
    number = len(state.stages) + 1
    description = f"Dockerfile stage {alias or number} (line {line})"
    if state.stages and reference != (state.aliases[-1] or str(number - 2)):
        reason = (
            f"FROM {reference}, not the stage before it: the recipe builds every stage on the "
            f"one before, so v{number} starts from v{number - 1} instead"
        )
        state.unmapped.append(Unmapped(line, f"FROM {value}", reason))
        description += f"; UNMAPPED Dockerfile line {line}: built FROM {reference}"
    state.stages.append(StagePlan(f"v{number}", description))
    state.aliases.append(alias)
    state.stage_args = {}  # ARGs are scoped to their stage
    name, _, digest = reference.partition("@")
    return name, digest or None


def _instruction(kind: str, value: str, line: int, state: State, heredocs: list[Heredoc]) -> None:
    if heredocs and kind != "RUN":
        copy_heredoc(kind, value, line, state, heredocs)
        return
    handlers: dict[str, Callable[[str, int, State], None]] = {
        "RUN": lambda v, n, s: run(v, n, s, heredocs), "ENV": env, "COPY": copy,
        "ADD": add, "ARG": _arg, "WORKDIR": _workdir,
    }  # fmt: skip
    if kind in handlers:
        handlers[kind](value, line, state)
    elif kind in CONFIG_KINDS:
        _config(kind, value, line, state)
    else:
        reason = f"{kind} has no recipe equivalent"
        if kind in ("VOLUME", "ONBUILD"):
            reason = f"{kind} has no recipe key (it would change the image for later stages)"
        keep(line, f"{kind} {value}", reason, state)


# --- ARG, WORKDIR, the final image's configuration ------------------------------------------


def _arg(value: str, line: int, state: State) -> None:
    """``ARG NAME=default`` (or a global ARG redeclared): its value is substituted where the
    stage uses it, as Docker would; an ARG without any value is a build argument."""
    name, equals, default = value.strip().partition("=")
    name = name.strip()
    if equals:
        state.stage_args[name] = unquote(substitute(default.strip(), variables(state)))
    elif name in state.args:
        state.stage_args[name] = state.args[name]
    else:
        reason = f"ARG {name} without a default: a build argument (a recipe takes none)"
        state.unmapped.append(Unmapped(line, f"ARG {name}", reason + "; its uses stay empty"))
        return
    state.notes.append(Unmapped(line, f"ARG {name}", "substituted where it is used"))


def _workdir(value: str, line: int, state: State) -> None:
    path = substitute(value.strip(), variables(state))
    if not path.startswith("/") and state.workdir:
        path = str(PurePosixPath(state.workdir) / path)
    if not CONTAINER_PATH.fullmatch(path):
        keep(line, f"WORKDIR {value}", "WORKDIR that is not an absolute plain path", state)
        return
    state.workdir = path
    add_layer(state, line, f"workdir = {q(path)}")


def _config(kind: str, value: str, line: int, state: State) -> None:
    """A final-image setting into ``[config]``; a USER or SHELL also changes how later RUNs
    run in the Dockerfile, which the recipe does not (noted when such a RUN follows)."""
    if kind in EXPANDED_KINDS:
        value = substitute(value, variables(state))
    unresolved = kind in EXPANDED_KINDS and "$" in value
    problem = "a variable the import cannot resolve" if unresolved else ""
    problem = problem or state.config.apply(kind, value, line, len(state.stages))
    if problem:
        keep(line, f"{kind} {value}", problem, state)
        return
    state.notes.append(Unmapped(line, kind, "kept in [config]: set after the last stage"))
    if kind == "USER":
        state.user_line = 0 if value.strip().split(":")[0] in ("root", "0") else line
    if kind == "SHELL":
        state.shell_line = line


def unmapped_lines(plan: ImportPlan) -> Iterator[str]:
    """The report's lines: one per unmapped instruction, with its Dockerfile line."""
    for item in plan.unmapped:
        yield f"line {item.line}: {item.instruction[:120]}: {item.reason}"
