"""``layer-audit import``: a Dockerfile turned into a recipe that does what it did, decided in
memory.

The Dockerfile is read with ``dockerfile-parse`` (heredoc bodies found in the text:
:mod:`audit.dockerfile.heredoc`); its stages are laid out as recipe stages first
(:mod:`audit.dockerfile.layout`: each FROM resolved, the image the last stage ships from as
``[image] base``, a prelude up to ``base_stage`` when that base has no Python); then each
instruction is mapped on its own: ``RUN`` in :mod:`audit.dockerfile.run` (pip installs in
:mod:`audit.dockerfile.pip`, flags in :mod:`audit.dockerfile.flags`), ``ENV``/``COPY``/``ADD``
in :mod:`audit.dockerfile.files`, ``ARG`` in :mod:`audit.dockerfile.args`, the image
configuration in :mod:`audit.dockerfile.config`; the CUDA of the base from
:mod:`audit.dockerfile.bases`. :mod:`audit.dockerfile.plan` holds the result and writes
``image.toml``.

Invariants: no instruction is dropped and nothing the Dockerfile does changes without a line
in :attr:`ImportPlan.unmapped` (the Dockerfile line and a true reason; kept in the recipe as a
run layer, the original command or a no-op naming it); an install the recipe keeps as a run
layer is in :attr:`ImportPlan.unlocked`; no credential is written (every text passes
:func:`audit.redact.redact`).
"""

from __future__ import annotations

import io
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from dockerfile_parse import DockerfileParser

from audit.dockerfile import heredoc as dockerfile_heredoc
from audit.dockerfile.args import args_table, declarable, global_arg, stage_arg
from audit.dockerfile.bases import cuda_of, interpreter_of
from audit.dockerfile.config import CONFIG_KINDS, EXPANDED_KINDS
from audit.dockerfile.files import add, copy, copy_heredoc, env
from audit.dockerfile.heredoc import Heredoc
from audit.dockerfile.layout import DockerStage, Layout, lay_out, read_stages
from audit.dockerfile.plan import ImportPlan, policy_preset
from audit.dockerfile.run import run
from audit.dockerfile.state import (
    StagePlan,
    StageScope,
    State,
    Unmapped,
    add_layer,
    from_args,
    keep,
    q,
    substitute,
    variables,
)
from audit.errors import UsageError
from audit.recipe.context import STAGE_NAME
from audit.recipe.parse import CONTAINER_PATH, DIGEST, IMAGE_REF
from audit.redact import redact

MAX_DOCKERFILE = 1 << 20  # 1 MiB: real Dockerfiles are a few KiB; parsing is not linear
DEFAULT_INDEX = "https://pypi.org/simple"
ABSOLUTE_PIP = re.compile(
    r"(?:^|[\s;&|])(?:(?P<python>/\S*/python(?:3(?:\.\d+)?)?)\s+-m\s*pip"
    r"|(?P<bin>/\S*/bin)/pip(?P<version>3(?:\.\d+)?)?)\s+install\b"
)
VIRTUAL_ENV = re.compile(r"\bVIRTUAL_ENV=[\"']?(/[^\s\"']+)")
__all__ = ["ImportPlan", "parse_dockerfile", "plan_import", "policy_preset", "unmapped_lines"]


def read_dockerfile(path: Path, hint: str) -> bytes:
    """The bytes of the Dockerfile at ``path`` (``import`` and ``build --dockerfile`` read it
    here): a regular UTF-8 text file of at most ``MAX_DOCKERFILE`` bytes, its size checked
    before anything is read; otherwise UsageError (exit 2) with ``hint``, naming the path."""
    try:
        info = path.stat()
    except OSError as exc:
        raise UsageError(f"{path}: not a file ({exc.strerror})", hint) from exc
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path}: not a regular file", hint)
    if info.st_size > MAX_DOCKERFILE:
        raise UsageError(
            f"{path}: {info.st_size} bytes, over 1 MiB ({MAX_DOCKERFILE} bytes, the most read)",
            "is it the Dockerfile? real ones are a few KiB; split generated parts out of it",
        )
    try:
        data = path.read_bytes()
        if b"\0" in data:
            raise UnicodeError("a NUL byte")
        data.decode("utf-8")
    except UnicodeError as exc:
        raise UsageError(f"{path}: binary, not a UTF-8 text file ({exc})", hint) from exc
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})", hint) from exc
    return data


@dataclass(frozen=True)
class ImportOptions:
    """What the command line adds to the Dockerfile: settings it cannot say itself."""

    where: str = "Dockerfile"
    platform: str | None = None
    cuda: str | None = None
    interpreter: str | None = None
    base_has_python: bool | None = None  # None: known from the base's name
    build_args: tuple[tuple[str, str], ...] = ()  # values to import with (what gets locked)


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
    options: ImportOptions | None = None,
    context_read: Callable[[str], str | None] | None = None,
) -> ImportPlan:
    """The recipe for the Dockerfile ``data``; ``context_has`` answers whether a build-context
    path (POSIX, relative) is a file or folder, ``context_read`` gives a small text file of it
    (the scripts a RUN runs). Raises :class:`UsageError` (exit 2) when the text has no ``FROM``
    or the recorded base is no image reference."""
    options = options or ImportOptions()
    instructions = parse_dockerfile(data)
    state = State(context_has, context_read or (lambda _: None), options.interpreter, None)
    state.where = options.where
    _globals(instructions, state, options)
    stages = read_stages(instructions, _resolved_globals(state), options.platform or "linux/amd64")
    if not stages:
        raise UsageError(
            f"{options.where}: no FROM instruction",
            "import reads a Dockerfile whose first stage starts with FROM <image>",
        )
    state.interpreter = _interpreter(stages, state)
    layout = lay_out(stages, state.interpreter or "", base_has_python=options.base_has_python)
    base, digest = _base_reference(layout.base, stages[-1], options.where)
    _python_less(layout, state)
    for stage in stages:
        _walk_stage(stage, layout, state)
    return _plan(image, (base, digest), layout, state, options)


def _globals(instructions: list[dict[str, Any]], state: State, options: ImportOptions) -> None:
    """ARGs before the first FROM (with ``--build-arg`` values); anything else there is listed."""
    for item in instructions:
        kind, value = str(item["instruction"]).upper(), str(item["value"])
        if kind == "FROM":
            break
        if kind == "ARG":
            global_arg(value, int(item["startline"]) + 1, state)
        else:
            line = int(item["startline"]) + 1
            state.list_unmapped(line, f"{kind} {value}", "before the first FROM")
    for name, value in options.build_args:
        state.global_args[name] = state.global_text[name] = value
    state.overrides = dict(options.build_args)


def _resolved_globals(state: State) -> dict[str, str]:
    return {name: text for name, text in state.global_args.items() if text is not None}


def _base_reference(reference: str, stage: DockerStage, where: str) -> tuple[str, str | None]:
    """``(image, digest)`` of what a stage's FROM names; exit 2 when it is no image."""
    name, _, digest = reference.partition("@")
    if (
        "$" in reference
        or not IMAGE_REF.fullmatch(name)
        or (digest and not DIGEST.fullmatch(digest))
    ):
        raise UsageError(
            f"{where}:{stage.line}: FROM {reference!r} names no image this import can resolve",
            "give the base image literally (or as a global ARG with a default), or pass "
            "--build-arg NAME=IMAGE",
        )
    return name, digest or None


def _python_less(layout: Layout, state: State) -> None:
    """Say what the import did about a base without Python."""
    if not layout.no_python:
        return
    if layout.base_stage:
        state.note(
            0,
            f"base {layout.base}",
            f"has no Python: the base record is {layout.base_stage} built (base_stage)",
        )
    else:
        state.list_unmapped(
            0,
            f"base {layout.base}",
            f"has no Python and {layout.problem}: set base_stage in image.toml to the stage "
            "that installs one",
        )


# --- stages --------------------------------------------------------------------------------


def _walk_stage(stage: DockerStage, layout: Layout, state: State) -> None:
    """Open the stage's recipe stage(s) and map its instructions, cutting at the prelude."""
    names = layout.names[stage.index]
    _open(stage, layout, state, part=0)
    _from_listing(stage, layout, state)
    for position, item in enumerate(stage.items):
        if len(names) == 2 and layout.cut == (stage.index, position):
            _split(stage, layout, state)
        _instruction(item, state)
    state.ends[names[-1]] = state.scope


def _open(stage: DockerStage, layout: Layout, state: State, part: int) -> None:
    names = layout.names[stage.index]
    name = names[part]
    plan = StagePlan(name, _description(stage, part, len(names)))
    previous = state.stages[-1].name if state.stages else None
    parent = names[0] if part else _parent_name(stage, layout)
    if parent is not None:
        plan.parent = parent if parent != previous else None
        state.scope = state.ends[parent].inherit() if not part else state.scope
    else:
        state.scope = StageScope()
        if stage.reference != layout.base or state.stages:
            plan.base, plan.base_digest = _base_reference(stage.reference, stage, state.where)
    if part == len(names) - 1:
        plan.target = _target(stage, name, state)
        state.aliases[str(stage.index)] = name
        if stage.alias:
            state.aliases[stage.alias] = name
    state.stages.append(plan)
    plan.unaudited = _unaudited(plan, stage, layout, state)


def _parent_name(stage: DockerStage, layout: Layout) -> str | None:
    return layout.names[stage.parent][-1] if stage.parent is not None else None


def _description(stage: DockerStage, part: int, parts: int) -> str:
    text = f"Dockerfile stage {stage.alias or stage.index} (line {stage.line})"
    if parts == 2:
        text += ": up to the step that installs Python" if part == 0 else ": after it"
    return text


def _target(stage: DockerStage, name: str, state: State) -> str | None:
    """The Dockerfile's stage name as the recipe stage's ``target`` (not a ``vN`` name, which
    the recipe's own names already are)."""
    if not stage.alias or STAGE_NAME.fullmatch(stage.alias):
        if stage.alias and stage.alias != name:
            state.note(stage.line, f"AS {stage.alias}", f"is recipe stage {name}")
        return None
    return stage.alias


def _unaudited(plan: StagePlan, stage: DockerStage, layout: Layout, state: State) -> str:
    """Why the guard cannot audit this recipe stage ('' when it builds on the record)."""
    root = layout.root(stage.index).reference
    if root != layout.base:
        return f"it builds on {root}, which no base record describes (the record is {layout.base})"
    if not layout.no_python:
        return ""
    if layout.base_stage is None:
        return f"{layout.base} has no Python and no base_stage says where one appears"
    chain = _recipe_chain(plan.name, state)
    if layout.base_stage in chain and plan.name != layout.base_stage:
        return ""
    return f"the prelude: {layout.base} has no Python before {layout.base_stage}"


def _recipe_chain(name: str, state: State) -> list[str]:
    """The recipe stages ``name`` builds on, itself included."""
    by_name = {s.name: s for s in state.stages}
    found = [name]
    while True:
        stage = by_name[found[-1]]
        index = state.stages.index(stage)
        parent = stage.parent or (
            None if stage.base or index == 0 else state.stages[index - 1].name
        )
        if parent is None:
            return found
        found.append(parent)


def _split(stage: DockerStage, layout: Layout, state: State) -> None:
    """End the prelude inside this Dockerfile stage: the rest is a recipe stage built on it,
    declaring the ARGs in scope again (a recipe stage declares its own)."""
    state.ends[layout.names[stage.index][0]] = state.scope
    _open(stage, layout, state, part=1)
    names = [name for name in state.scope.args if declarable(name)]
    if names:
        rows = q(names[0]) if len(names) == 1 else "[" + ", ".join(q(n) for n in names) + "]"
        note = "the ARGs of this Dockerfile stage, in scope here too"
        add_layer(state, stage.line, f"arg = {rows}", note)


def _from_listing(stage: DockerStage, layout: Layout, state: State) -> None:
    """What a FROM says that the recipe cannot: a base fixed at an ARG's default, a
    --platform of its own."""
    if stage.used_args and stage.parent is None:
        names = ", ".join(stage.used_args)
        state.list_unmapped(
            stage.line,
            f"FROM {stage.reference}",
            f"the image comes from {names}: the recipe names it literally, so --build-arg "
            f"{stage.used_args[0]} no longer changes it",
        )
    elif stage.used_args and stage.parent is not None:
        state.list_unmapped(
            stage.line,
            f"FROM {stage.reference}",
            f"the stage it builds on comes from {', '.join(stage.used_args)}: the recipe builds "
            f"on {layout.names[stage.parent][-1]} whatever --platform or --build-arg says",
        )
    if stage.platform and (state.platform or "") != stage.platform:
        if state.platform is None and "$" not in stage.platform and stage.reference == layout.base:
            state.platform = stage.platform
        else:
            state.list_unmapped(
                stage.line,
                f"FROM --platform={stage.platform}",
                "the recipe builds every stage for its one platform",
            )


# --- instructions --------------------------------------------------------------------------


def _instruction(item: dict[str, Any], state: State) -> None:
    kind = str(item["instruction"]).upper()
    value = str(item["value"])
    line = int(item["startline"]) + 1
    heredocs: list[Heredoc] = item.get("heredocs", [])
    if heredocs and kind != "RUN":
        copy_heredoc(kind, value, line, state, heredocs)
        return
    handlers: dict[str, Callable[[str, int, State], None]] = {
        "RUN": lambda v, n, s: run(v, n, s, heredocs), "ENV": env, "COPY": copy,
        "ADD": add, "ARG": stage_arg, "WORKDIR": _workdir,
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


def _workdir(value: str, line: int, state: State) -> None:
    path = substitute(value.strip(), variables(state))
    if not path.startswith("/") and state.scope.workdir:
        path = str(PurePosixPath(state.scope.workdir) / path)
    if not CONTAINER_PATH.fullmatch(path):
        keep(line, f"WORKDIR {value}", "WORKDIR that is not an absolute plain path", state)
        return
    frozen = from_args(value, state)
    if frozen:
        state.list_unmapped(line, f"WORKDIR {value}", f"takes the value of {frozen[0]} here: "
                            f"--build-arg {frozen[0]} no longer changes it")  # fmt: skip
    state.scope.workdir = path
    add_layer(state, line, f"workdir = {q(path)}")


def _config(kind: str, value: str, line: int, state: State) -> None:
    """A setting into the stage's configuration; a USER or SHELL also changes how later RUNs
    run in the Dockerfile, which the recipe does not (listed when such a RUN follows)."""
    if kind in EXPANDED_KINDS:
        value = substitute(value, variables(state))
    unresolved = kind in EXPANDED_KINDS and "$" in value
    problem = "a variable the import cannot resolve" if unresolved else ""
    problem = problem or state.stage.config.apply(kind, value, line, len(state.stages))
    if problem:
        keep(line, f"{kind} {value}", problem, state)
        return
    state.note(line, kind, "kept in the stage's config: set after its layers")
    if kind == "USER":
        state.scope.user_line = 0 if value.strip().split(":")[0] in ("root", "0") else line
    if kind == "SHELL":
        state.scope.shell_line = line


# --- the plan ------------------------------------------------------------------------------


def _plan(
    image: str,
    reference: tuple[str, str | None],
    layout: Layout,
    state: State,
    options: ImportOptions,
) -> ImportPlan:
    base, digest = reference
    cuda = options.cuda or _cuda(base, state)
    index_url = _hoist_index(state)
    return ImportPlan(
        image=image,
        base=base,
        base_digest=digest,
        platform=options.platform or state.platform or _guess_platform(base),
        cuda=cuda,
        interpreter=state.interpreter or interpreter_of(base),
        index_url=index_url,
        indexes=state.indexes,
        stages=state.stages,
        requirements=state.requirements,
        copies=state.copies,
        unmapped=state.unmapped,
        notes=state.notes,
        unlocked=state.unlocked,
        files=state.files,
        args=args_table(state),
        base_stage=layout.base_stage,
        break_system_packages=state.break_system_packages,
    )


def _cuda(base: str, state: State) -> str:
    found, known = cuda_of(base)
    if not known:
        state.list_unmapped(
            0,
            f"base {base}",
            "an NGC release whose CUDA import does not know: the recipe says cpu and the CUDA "
            "rules are off; set cuda in image.toml (or import with --cuda cuNNN)",
        )
    return found or "cpu"


def _guess_platform(base: str) -> str:
    """``linux/arm64`` when the base image's tag names arm64 (or aarch64), else linux/amd64."""
    tag = base.rpartition(":")[2] if ":" in base.rpartition("/")[2] else ""
    return "linux/arm64" if re.search(r"arm64|aarch64", tag) else "linux/amd64"


def _interpreter(stages: list[DockerStage], state: State) -> str | None:
    """``--interpreter``, else the Python a ``RUN /x/python -m pip`` (or ``/x/bin/pip``) names,
    else the virtual environment an ENV of the last stage's chain names
    (``VIRTUAL_ENV=/opt/venv``); None: where the recorded base usually has it."""
    if state.interpreter:
        return state.interpreter
    named = [_pip_python(m) for stage in stages for item in stage.items
             if str(item["instruction"]).upper() == "RUN"
             for m in [ABSOLUTE_PIP.search(str(item["value"]))] if m]  # fmt: skip
    if named:
        return named[0]
    for item in (i for s in stages for i in s.items if str(i["instruction"]).upper() == "ENV"):
        venv = VIRTUAL_ENV.search(str(item["value"]))
        if venv and CONTAINER_PATH.fullmatch(venv.group(1)):
            return f"{venv.group(1).rstrip('/')}/bin/python"
    return None


def _pip_python(match: re.Match[str]) -> str:
    """The Python of ``/x/python -m pip install`` (``-mpip`` too), or of ``/x/bin/pip3
    install`` (``/x/bin/python3``: the pip script's own environment)."""
    return match["python"] or f"{match['bin']}/python{match['version'] or ''}"


def _hoist_index(state: State) -> str:
    """The image's index_url: the one every pip layer names with --index-url (then no layer
    needs ``primary_index``), else the default."""
    pips = [
        layer for stage in state.stages for layer in stage.layers if layer.toml.startswith("pip =")
    ]
    named = {layer.primary for layer in pips}
    if len(named) != 1 or None in named:
        return DEFAULT_INDEX
    name = named.pop()
    assert name is not None
    url = state.indexes[name]
    for layer in pips:
        layer.primary = None
    if not any(f"index = {q(name)}" in layer.toml for layer in pips):
        del state.indexes[name]
    return url


def unmapped_lines(items: list[Unmapped]) -> Iterator[str]:
    """The report's lines: one per listed instruction, with its Dockerfile line."""
    for item in items:
        where = f"line {item.line}: " if item.line else ""
        yield redact(f"{where}{item.instruction[:120]}: {item.reason}")
