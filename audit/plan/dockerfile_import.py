"""``layer-audit import``: a multi-stage Dockerfile turned into a recipe folder, decided in memory.

The Dockerfile is read with ``dockerfile-parse`` (heredoc bodies found in the text:
:mod:`audit.plan.dockerfile_heredoc`); each instruction is mapped on its own, so that the
rendered recipe does what the Dockerfile did:

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
  configuration: :mod:`audit.plan.dockerfile_config`).

Invariant: no instruction is dropped. What cannot be mapped (a ``FROM`` that does not continue
the previous stage, ``COPY --from``, ``ADD`` of a URL, a pip install inside ``||`` or a subshell …)
is listed in :attr:`ImportPlan.unmapped` with its line number and a true reason and kept in the
recipe as a run layer: the original command, or a shell no-op ``: '<instruction>'`` naming it.
No credential is written: every text the plan holds passes :func:`audit.core.redact.redact`.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dockerfile_parse import DockerfileParser
from packaging.requirements import InvalidRequirement, Requirement

from audit.core.errors import UsageError
from audit.core.redact import redact
from audit.plan import dockerfile_heredoc
from audit.plan.dockerfile_config import CONFIG_KINDS, EXPANDED_KINDS, FinalConfig
from audit.plan.dockerfile_heredoc import Heredoc
from audit.plan.recipe_parse import (
    CONTAINER_PATH,
    ENV_NAME,
    ENV_REFERENCE,
    FILE_MODE,
    HEREDOC,
    OWNER,
    PIP_SOURCE_ENV,
    SECRET_NAME,
)

DEFAULT_INDEX = "https://pypi.org/simple"
DEFAULT_INTERPRETER = "/usr/bin/python3"
SHELL_SEPARATORS = {"&&"}
SHELL_UNSAFE = {"||", "|", ";", "&", "(", ")", ">", ">>", "<", "<<", "`"}
STATEFUL_COMMANDS = {"cd", "export", "source", ".", "set", "unset", "pushd", "popd", "umask"}
IGNORED_PIP_FLAGS = {
    "-q", "--quiet", "-qq", "-v", "--verbose", "-U", "--upgrade", "--no-cache-dir",
    "--disable-pip-version-check", "--break-system-packages", "--system", "--no-input",
    "--no-warn-script-location", "--no-compile", "--compile", "--force-reinstall",
    "--ignore-installed", "-I", "--no-build-isolation", "--prefer-binary", "--only-binary=:all:",
}  # fmt: skip
IGNORED_PIP_OPTIONS = {
    "--root-user-action", "--progress-bar", "--trusted-host", "--upgrade-strategy", "--timeout",
    "--retries", "--python", "--cache-dir",
}  # fmt: skip
RESERVED_DIRS = ("requirements", "templates", "image.toml", "locks", "heredocs", "context")
SHELL_WORD = re.compile(r"[A-Za-z0-9_./:,=+@%-]*")  # a value the shell takes as it is
ARCHIVE = re.compile(r"\.(tar|tgz|tbz2?|txz|tzst|gz|bz2|xz|zst|lz4)$", re.IGNORECASE)
PRESET_CUDA = "cuda-ml"
CUDA_TAG = re.compile(r"(?:^|[-_.:])(cu\d{2,4})(?:$|[-_.])")
PYTHON_WORD = re.compile(r"^(?:\S*/)?python(?:3(?:\.\d+)?)?$")
PIP_WORD = re.compile(r"^(?:\S*/)?pip(?:3(?:\.\d+)?)?$")


@dataclass(frozen=True)
class Unmapped:
    """An instruction kept as a run layer because the recipe has no equivalent for it."""

    line: int  # 1-based first line in the Dockerfile
    instruction: str
    reason: str


@dataclass
class Layer:
    """One recipe layer: its TOML body and the Dockerfile line it came from."""

    line: int
    toml: str
    note: str = ""


@dataclass
class StagePlan:
    name: str
    description: str
    layers: list[Layer] = field(default_factory=list)


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
            f"base = {_q(self.base)}",
        ]
        if self.base_digest:
            lines.append(f"base_digest = {_q(self.base_digest)}")
        lines += [
            f"platform = {_q(self.platform)}",
            f"cuda = {_q(self.cuda)}",
            f"interpreters = [{_q(self.interpreter)}]",
            f"repository = {_q('local/' + self.image)}",
        ]
        if self.index_url != DEFAULT_INDEX:
            lines.append(f"index_url = {_q(self.index_url)}")
        if self.indexes:
            lines += ["", "[indexes]"]
            lines += [f"{name} = {_q(url)}" for name, url in sorted(self.indexes.items())]
        lines += self.config
        lines += _policy_lines(self.cuda)
        for stage in self.stages:
            lines += ["", "[[stage]]", f"name = {_q(stage.name)}"]
            lines.append(f"description = {_q(stage.description)}")
            for layer in stage.layers:
                lines.append("")
                if layer.note:
                    lines.append(f"  # {layer.note}")
                lines += ["  [[stage.layer]]", *(f"  {row}" for row in layer.toml.splitlines())]
        return redact("\n".join(lines) + "\n")


def policy_preset(cuda: str) -> str | None:
    """The policy preset an imported recipe turns on: none until the preset grammar lands
    (then ``PRESET_CUDA`` for a CUDA image, ``cuda != "cpu"``)."""
    return None


def _policy_lines(cuda: str) -> list[str]:
    preset = policy_preset(cuda)
    return ["", "[policy]", f"preset = {_q(preset)}"] if preset else []


def _q(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


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


@dataclass
class _State:
    """What the walk over the instructions has decided so far."""

    context_has: Callable[[str], bool]
    interpreter: str | None
    platform: str | None
    index_url: str | None = None
    indexes: dict[str, str] = field(default_factory=dict)
    stages: list[StagePlan] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)
    requirements: dict[str, bytes] = field(default_factory=dict)
    copies: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    unmapped: list[Unmapped] = field(default_factory=list)
    notes: list[Unmapped] = field(default_factory=list)
    args: dict[str, str] = field(default_factory=dict)  # global ARGs (before the first FROM)
    stage_args: dict[str, str] = field(default_factory=dict)  # this stage's ARGs with a value
    envs: dict[str, str] = field(default_factory=dict)  # ENV values set so far (literal)
    workdir: str | None = None  # the working folder, when the Dockerfile set it
    config: FinalConfig = field(default_factory=FinalConfig)
    user_line: int = 0  # a USER other than root in force (it moves to [config]) since this line
    shell_line: int = 0  # a SHELL in force since this line (it moves to [config])
    seen_interpreters: list[str] = field(default_factory=list)


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
    state = _State(context_has, interpreter, platform)
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


def _walk(instructions: list[dict[str, Any]], state: _State, where: str) -> tuple[str, str | None]:
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
            stage.layers.append(Layer(0, f"run = {_q(': empty stage')}", "an empty stage"))
    return base


def _before_first_stage(kind: str, value: str, line: int, state: _State) -> None:
    """Global ``ARG``s feed ``FROM``; anything else before the first FROM is listed."""
    if kind == "ARG":
        name, equals, default = value.partition("=")
        if equals:
            state.args[name.strip()] = _unquote(_substitute(default.strip(), state.args))
            return
    state.unmapped.append(Unmapped(line, redact(f"{kind} {value}"), "before the first FROM"))


def _unquote(text: str) -> str:
    """An ARG value as Docker reads it (quotes removed), or as written if it does not parse."""
    try:
        words = shlex.split(text)
    except ValueError:
        return text
    return " ".join(words)


def _substitute(value: str, args: dict[str, str]) -> str:
    """``${NAME}`` / ``$NAME`` of known variables replaced by their values."""
    for name, default in args.items():
        value = value.replace("${" + name + "}", default)
        pattern = r"\$" + re.escape(name) + r"(?![A-Za-z0-9_])"
        value = re.sub(pattern, default.replace("\\", "\\\\"), value)
    return value


def _from(value: str, line: int, state: _State, where: str) -> tuple[str, str | None]:
    """A new stage; the first FROM gives the base, later ones must continue the previous."""
    words = _substitute(value, state.args).split()
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
        reason = f"FROM {reference}, not the previous stage: this stage is built on it instead"
        state.unmapped.append(Unmapped(line, f"FROM {value}", reason))
        description += f"; UNMAPPED: the Dockerfile built it FROM {reference}"
    state.stages.append(StagePlan(f"v{number}", description))
    state.aliases.append(alias)
    state.stage_args = {}  # ARGs are scoped to their stage
    name, _, digest = reference.partition("@")
    return name, digest or None


def _instruction(kind: str, value: str, line: int, state: _State, heredocs: list[Heredoc]) -> None:
    if heredocs and kind != "RUN":
        _copy_heredoc(kind, value, line, state, heredocs)
        return
    handlers: dict[str, Callable[[str, int, _State], None]] = {
        "RUN": lambda v, n, s: _run(v, n, s, heredocs), "ENV": _env, "COPY": _copy,
        "ADD": _add, "ARG": _arg, "WORKDIR": _workdir,
    }  # fmt: skip
    if kind in handlers:
        handlers[kind](value, line, state)
    elif kind in CONFIG_KINDS:
        _config(kind, value, line, state)
    else:
        reason = f"{kind} has no recipe equivalent"
        if kind in ("VOLUME", "ONBUILD"):
            reason = f"{kind} has no recipe key (it would change the image for later stages)"
        _keep(line, f"{kind} {value}", reason, state)


def _keep(line: int, instruction: str, reason: str, state: _State, command: str = "") -> None:
    """Record an unmapped instruction and keep it as a run layer (a no-op naming it, or
    ``command`` when it is a shell command that can still run)."""
    instruction, command = redact(instruction), redact(command)
    state.unmapped.append(Unmapped(line, instruction, reason))
    clean = re.sub(r"<(?=<)", "< ", " ".join(instruction.split()))  # a no-op, never a heredoc
    if command and _runnable(command):
        body = command
    else:
        body = ": " + shlex.quote(f"UNMAPPED Dockerfile line {line}: {clean}"[:300])
    note = f"UNMAPPED Dockerfile line {line}: {reason}"
    state.stages[-1].layers.append(Layer(line, f"run = {_q(body)}", note))


def _add_layer(state: _State, line: int, toml: str, note: str = "") -> None:
    state.stages[-1].layers.append(Layer(line, toml, note or f"Dockerfile line {line}"))


# --- ARG, WORKDIR, the final image's configuration ------------------------------------------


def _arg(value: str, line: int, state: _State) -> None:
    """``ARG NAME=default`` (or a global ARG redeclared): its value is substituted where the
    stage uses it, as Docker would; an ARG without any value is a build argument."""
    name, equals, default = value.strip().partition("=")
    name = name.strip()
    if equals:
        state.stage_args[name] = _unquote(_substitute(default.strip(), _vars(state)))
    elif name in state.args:
        state.stage_args[name] = state.args[name]
    else:
        reason = f"ARG {name} without a default: a build argument (a recipe takes none)"
        state.unmapped.append(Unmapped(line, f"ARG {name}", reason + "; its uses stay empty"))
        return
    state.notes.append(Unmapped(line, f"ARG {name}", "substituted where it is used"))


def _vars(state: _State) -> dict[str, str]:
    """What ``$NAME`` means in an ENV, COPY, WORKDIR … line here: the stage's ARGs, then ENVs."""
    return {**state.stage_args, **state.envs}


def _workdir(value: str, line: int, state: _State) -> None:
    path = _substitute(value.strip(), _vars(state))
    if not path.startswith("/") and state.workdir:
        path = str(PurePosixPath(state.workdir) / path)
    if not CONTAINER_PATH.fullmatch(path):
        _keep(line, f"WORKDIR {value}", "WORKDIR that is not an absolute plain path", state)
        return
    state.workdir = path
    _add_layer(state, line, f"workdir = {_q(path)}")


def _config(kind: str, value: str, line: int, state: _State) -> None:
    """A final-image setting into ``[config]``; a USER or SHELL also changes how later RUNs
    run in the Dockerfile, which the recipe does not (noted when such a RUN follows)."""
    if kind in EXPANDED_KINDS:
        value = _substitute(value, _vars(state))
    unresolved = kind in EXPANDED_KINDS and "$" in value
    problem = "a variable the import cannot resolve" if unresolved else ""
    problem = problem or state.config.apply(kind, value, line, len(state.stages))
    if problem:
        _keep(line, f"{kind} {value}", problem, state)
        return
    state.notes.append(Unmapped(line, kind, "kept in [config]: set after the last stage"))
    if kind == "USER":
        state.user_line = 0 if value.strip().split(":")[0] in ("root", "0") else line
    if kind == "SHELL":
        state.shell_line = line


def _runs_as_in_dockerfile(line: int, state: _State, first: int) -> None:
    """A RUN after a USER or SHELL runs as root with /bin/sh in the recipe: listed once, and
    said beside the first layer it became (``first``: its index in the stage)."""
    layers = state.stages[-1].layers
    for attribute, what in (("user_line", "USER"), ("shell_line", "SHELL")):
        since = getattr(state, attribute)
        if since and len(layers) > first:
            reason = (
                f"a RUN after {what} (line {since}): the recipe runs it as root with /bin/sh "
                f"(the guard needs both) and applies {what} to the final image"
            )
            state.unmapped.append(Unmapped(line, f"RUN after {what}", reason))
            layers[first].note = f"UNMAPPED Dockerfile line {line}: {reason}; {layers[first].note}"
            setattr(state, attribute, 0)


def _runnable(command: str) -> bool:
    """Whether a shell command passes the recipe's run-layer rules as it is."""
    return (
        bool(command.strip())
        and not any(ord(ch) < 32 for ch in command)
        and not HEREDOC.search(command)
        and not command.rstrip().endswith("\\")
    )


# --- RUN ------------------------------------------------------------------------------------


def _run(value: str, line: int, state: _State, heredocs: list[Heredoc]) -> None:
    """A RUN: flags dropped (noted), exec form joined, ARGs substituted, ``&&`` chains split
    into layers, a heredoc kept as a file fed to the command."""
    command = value.strip()
    while command.startswith("--"):
        flag, _, command = command.partition(" ")
        state.notes.append(Unmapped(line, f"RUN {flag}", "RUN flag dropped"))
        command = command.strip()
    if command.startswith("["):
        with contextlib.suppress(ValueError, TypeError):
            command = shlex.join(json.loads(command))
    command = command.replace("\t", " ")
    first = len(state.stages[-1].layers)
    problem = _arg_problem(command + "".join(doc.body for doc in heredocs), state)
    if heredocs and not problem:
        _heredoc_run(command, line, state, heredocs)
    elif problem:
        _keep(line, f"RUN {value}", problem, state, command)
    else:
        _run_command(_substitute(command, state.stage_args), value, line, state)
    _runs_as_in_dockerfile(line, state, first)


def _arg_problem(command: str, state: _State) -> str:
    """Why this stage's ARGs cannot be written into ``command`` as text ('' when they can:
    each used one is a plain word, named as ``$NAME`` or ``${NAME}``)."""
    for name, value in state.stage_args.items():
        if not re.search(r"\$\{?" + re.escape(name) + r"(?![A-Za-z0-9_])", command):
            continue
        if not SHELL_WORD.fullmatch(value):
            return f"uses ARG {name}, whose value is not one plain word (a recipe takes no ARG)"
        if re.search(r"\$\{" + re.escape(name) + r"[^}A-Za-z0-9_]", command):
            return f"uses ARG {name} with a ${{...}} modifier (a recipe takes no ARG)"
    return ""


def _run_command(command: str, value: str, line: int, state: _State) -> None:
    segments = _segments(command)
    if segments is None:
        reason = "a pip install inside a compound shell command (||, |, ;, a subshell or cd)"
        if _mentions_pip_install(command):
            _keep(line, f"RUN {value}", reason, state, command)
        elif _runnable(command):
            _add_layer(state, line, f"run = {_q(redact(command))}")
        else:
            _keep(line, f"RUN {value}", "not a one-line shell command", state)
        return
    for words, text in segments:
        before = len(state.unmapped)
        if _pip_layer(words, line, state):
            continue
        if len(state.unmapped) > before:  # a pip install whose arguments did not map
            _keep(line, f"RUN {text}", state.unmapped.pop().reason, state, text)
        elif _mentions_pip_install(text):
            _keep(line, f"RUN {text}", "a pip install this import does not recognise", state, text)
        elif _runnable(text):
            _add_layer(state, line, f"run = {_q(redact(text))}")
        else:
            _keep(line, f"RUN {text}", "not a one-line shell command", state)


def _heredoc_run(command: str, line: int, state: _State, heredocs: list[Heredoc]) -> None:
    """``RUN <<EOF`` (the body run by the shell, or by its ``#!`` program) or ``RUN prog <<EOF``
    (the body on prog's standard input): a run layer whose ``stdin`` is the body's file."""
    doc = heredocs[0]
    program, _, after = command.partition(doc.mark)
    program = _substitute(program.strip(), state.stage_args)
    problem = _heredoc_problem(heredocs, program, after)
    if problem:
        _keep(line, f"RUN {command}", problem, state)
        return
    stage = state.stages[-1]
    relpath = f"heredocs/{stage.name}-{len(stage.layers) + 1:02d}"
    # a shell script body sees the stage's ARGs in its environment: they are written into it
    body = doc.body if program else _substitute(doc.body, state.stage_args)
    state.files[relpath] = redact(body).encode()
    if not program:  # BuildKit runs such a body as `sh -c BODY`, or as a file when it has #!
        program = _shebang(doc.body) or 'sh -c "$(cat)"'
    _add_layer(state, line, f"run = {_q(program)}\nstdin = {_q(relpath)}")


def _heredoc_problem(heredocs: list[Heredoc], program: str, after: str) -> str:
    """Why this RUN's heredoc cannot be a run layer's stdin file ('' when it can)."""
    doc = heredocs[0]
    segments = _segments(program) if program else []
    checks = (
        (len(heredocs) != 1 or not doc.closed, "several heredocs in one RUN, or one never closed"),
        (bool(after.strip()), "a heredoc followed by more shell on its line"),
        (
            bool(program) and not doc.quoted and bool(re.search(r"[$`\\]", doc.body)),
            "a heredoc the shell would expand ($, ` or \\ without a quoted delimiter)",
        ),
        (
            bool(program) and (segments is None or len(segments) != 1 or not _runnable(program)),
            "a heredoc fed to a compound shell command",
        ),
        (_mentions_pip_install(program), "a pip install reading a heredoc (list requirements)"),
    )
    return next((reason for failed, reason in checks if failed), "")


def _shebang(body: str) -> str:
    """``/usr/bin/env python3 /dev/stdin`` for a body starting ``#!/usr/bin/env python3``."""
    first = body.split("\n", 1)[0]
    if not first.startswith("#!") or any(ord(ch) < 32 for ch in first):
        return ""
    return f"{first[2:].strip()} /dev/stdin"


def _segments(command: str) -> list[tuple[list[str], str]] | None:
    """The ``&&``-joined simple commands of ``command`` (words and text), or None when the
    command uses other shell syntax or state-changing builtins that splitting would break."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return None
    if any(token in SHELL_UNSAFE for token in tokens) or "$(" in command or "`" in command:
        return None
    groups: list[list[str]] = [[]]
    for token in tokens:
        if token in SHELL_SEPARATORS:
            groups.append([])
        else:
            groups[-1].append(token)
    if any(not group for group in groups):
        return None
    if len(groups) > 1 and any(group[0] in STATEFUL_COMMANDS for group in groups):
        return None
    texts = [part.strip() for part in _split_text(command)]
    if len(texts) != len(groups):
        return None
    return list(zip(groups, texts, strict=True))


def _split_text(command: str) -> list[str]:
    """``command`` cut at every ``&&`` outside quotes (its original spelling kept)."""
    parts, current, quote, index = [], "", "", 0
    while index < len(command):
        char = command[index]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif command.startswith("&&", index):
            parts.append(current)
            current, index = "", index + 2
            continue
        current += char
        index += 1
    return [*parts, current]


def _mentions_pip_install(command: str) -> bool:
    return bool(re.search(r"\bpip3?(?:\.\d+)?\b[^&|;]*\binstall\b", command))


def _pip_words(words: list[str]) -> tuple[str | None, list[str]] | None:
    """(the interpreter it names, the install arguments) for a pip install; None otherwise."""
    if len(words) >= 4 and PYTHON_WORD.match(words[0]) and words[1:3] == ["-m", "pip"]:
        return (words[0] if words[0].startswith("/") else None), words[3:]
    if len(words) >= 3 and words[0] == "uv" and words[1] == "pip":
        return None, words[2:]
    if len(words) >= 2 and PIP_WORD.match(words[0]):
        return None, words[1:]
    return None


def _pip_layer(words: list[str], line: int, state: _State) -> bool:
    """Add a pip layer for ``pip install …``; False (a run layer then) for anything else."""
    found = _pip_words(words)
    if found is None or not found[1] or found[1][0] != "install":
        return False
    interpreter, args = found
    if interpreter:
        state.seen_interpreters.append(interpreter)
    parsed = _pip_arguments(args[1:], line, state)
    if parsed is None:
        return False
    slug = f"{state.stages[-1].name}-{len(state.stages[-1].layers) + 1:02d}"
    relpath = f"requirements/{slug}.in"
    header = redact(f"# Dockerfile line {line}: {' '.join(words)}")[:400]
    body = [header, *parsed.comments, *parsed.lines]
    state.requirements[relpath] = ("\n".join(body) + "\n").encode()
    toml = f"pip = {_q(relpath)}"
    if parsed.index:
        toml += f"\nindex = {_q(parsed.index)}"
    if parsed.pre:
        toml += "\npre = true"
    if parsed.no_deps:
        toml += "\nno_deps = true"
    note = f"Dockerfile line {line}"
    note += " (pip install --no-deps: a re-pin, applied as an override)" if parsed.no_deps else ""
    state.stages[-1].layers.append(Layer(line, toml, note))
    return True


@dataclass
class _PipArgs:
    lines: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    index: str | None = None
    pre: bool = False
    no_deps: bool = False


def _pip_arguments(args: list[str], line: int, state: _State) -> _PipArgs | None:
    """Requirements and options of one install; None (keep it as a run layer) when an
    argument has no recipe equivalent, which is then listed as unmapped."""
    parsed = _PipArgs()
    words = iter(args)
    for word in words:
        name, equals, inline = word.partition("=")
        value = inline if equals else ""
        if name in ("-i", "--index-url", "--extra-index-url", "-r", "--requirement", "-c"):
            value = value or next(words, "")
            if not _pip_option(name, value, line, state, parsed):
                return None
        elif word == "--pre":
            parsed.pre = True
        elif word == "--no-deps":
            parsed.no_deps = True
        elif word in IGNORED_PIP_FLAGS or name in IGNORED_PIP_OPTIONS:
            if name in IGNORED_PIP_OPTIONS and not equals:
                next(words, "")
            state.notes.append(Unmapped(line, f"pip {name}", "pip option dropped"))
        elif word in ("-e", "--editable"):
            reason = "an editable install of a path in the image (a lock pins released versions)"
            state.unmapped.append(Unmapped(line, f"pip {word}", reason))
            return None
        elif word.startswith("-"):
            state.unmapped.append(Unmapped(line, f"pip {word}", "pip option with no recipe key"))
            return None
        elif not _requirement(word):
            reason = "not a PEP 508 requirement (a path, a URL or an editable)"
            state.unmapped.append(Unmapped(line, f"pip install {word}", reason))
            return None
        else:
            parsed.lines.append(word)
    if not parsed.lines:
        state.unmapped.append(Unmapped(line, "pip install", "no requirement to install"))
        return None
    return parsed if _repin(parsed, line, state) else None


def _repin(parsed: _PipArgs, line: int, state: _State) -> bool:
    """A ``--no-deps`` install of exact pins is a re-pin (``no_deps = true``); of anything
    else it cannot be one (listed, False)."""
    if not parsed.no_deps:
        return True
    if not all(_exact_pin(word) for word in parsed.lines):
        reason = "--no-deps with a requirement that is not one exact name==version"
        state.unmapped.append(Unmapped(line, "pip install --no-deps", reason))
        return False
    parsed.comments.append("# --no-deps in the Dockerfile: re-pinned with no_deps = true")
    state.notes.append(Unmapped(line, "pip install --no-deps", "a re-pin: no_deps = true"))
    return True


def _exact_pin(word: str) -> bool:
    """Whether a requirement names one version with ``==`` (what a no_deps layer holds)."""
    specs = list(Requirement(word).specifier)
    return len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version


def _requirement(word: str) -> bool:
    try:
        Requirement(word)
    except InvalidRequirement:
        return False
    return True


def _pip_option(name: str, value: str, line: int, state: _State, parsed: _PipArgs) -> bool:
    """Map an index or requirements-file option; False when it cannot be."""
    if not value:
        state.unmapped.append(Unmapped(line, f"pip {name}", "option without a value"))
        return False
    if name in ("-r", "--requirement", "-c"):
        reason = "requirements files of the image are not read: list the requirements instead"
        state.unmapped.append(Unmapped(line, f"pip {name} {value}", reason))
        return False
    url = _public_url(value, line, state)
    if name in ("-i", "--index-url") and state.index_url in (None, url):
        state.index_url = url
        return True
    if parsed.index is not None:
        reason = "a second extra index in one layer (a recipe layer names one)"
        state.unmapped.append(Unmapped(line, f"pip {name} {value}", reason))
        return False
    parsed.index = _declare_index(url, state)
    return True


def _public_url(url: str, line: int, state: _State) -> str:
    """``url`` without credentials (noted: they belong in a BuildKit secret)."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        state.notes.append(Unmapped(line, "index credentials", "dropped: pass them as a secret"))
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _declare_index(url: str, state: _State) -> str:
    """The name of the declared index for ``url`` (host and path, lower case, dashes)."""
    for name, known in state.indexes.items():
        if known == url:
            return name
    parts = urlsplit(url)
    words = re.split(r"[^a-z0-9]+", f"{parts.hostname or 'index'} {parts.path}".lower())
    name = "-".join(w for w in words if w and w not in ("www", "whl", "simple", "com", "org"))
    name = name or "index"
    candidate, number = name, 2
    while candidate in state.indexes:
        candidate, number = f"{name}-{number}", number + 1
    state.indexes[candidate] = url
    return candidate


# --- ENV, COPY, ADD ------------------------------------------------------------------------


def _env(value: str, line: int, state: _State) -> None:
    """``ENV A=1 B="x y"`` (or the legacy ``ENV A value``) as one env layer; variables the
    import knows (ARGs, earlier ENVs) are substituted, others (the base image's ``$PATH``)
    are left to Docker with ``expand = true``."""
    try:
        words = shlex.split(value)
    except ValueError:
        _keep(line, f"ENV {value}", "ENV that does not parse", state)
        return
    known = _vars(state)
    pairs = [(name, _substitute(text, known)) for name, text in _env_pairs(words)]
    problem = _env_problem(pairs)
    if problem:
        _keep(line, f"ENV {value}", problem, state)
        return
    expand = any("$" in text for _, text in pairs)
    for name, text in pairs:
        state.envs.pop(name, None)
        if "$" not in text:
            state.envs[name] = text
    body = ", ".join(f"{name} = {_q(text)}" for name, text in pairs)
    _add_layer(state, line, f"env = {{ {body} }}" + ("\nexpand = true" if expand else ""))


def _env_pairs(words: list[str]) -> list[tuple[str, str]]:
    if words and "=" not in words[0]:
        return [(words[0], " ".join(words[1:]))]
    return [(w.partition("=")[0], w.partition("=")[2]) for w in words]


def _env_problem(pairs: list[tuple[str, str]]) -> str:
    """Why these pairs cannot be a recipe env layer ('' when they can)."""
    names = [name for name, _ in pairs]
    if not pairs or len(set(names)) != len(names):
        return "ENV that sets nothing, or one name twice"
    for name, text in pairs:
        if not ENV_NAME.fullmatch(name):
            return f"{name!r} is not a shell variable name"
        if SECRET_NAME.search(name) or name in PIP_SOURCE_ENV:
            return f"{name} looks like a secret or an index setting (recipes refuse it)"
        if any(ord(ch) < 32 for ch in text):
            return "ENV value with a control character"
        if "$" in ENV_REFERENCE.sub("", text):
            return "ENV with a ${...} form other than ${NAME} (a modifier, or a lone $)"
    return ""


def _copy_heredoc(kind: str, value: str, line: int, state: _State, heredocs: list[Heredoc]) -> None:
    """``COPY <<EOF /dest`` (a file written from the Dockerfile): the body becomes a file of
    the recipe and a copy layer (variables expanded unless the delimiter is quoted)."""
    doc = heredocs[0]
    words = value.replace(doc.mark, "", 1).split()
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    options, reason = _copy_flags(flags, line, state)
    dest = _copy_dest(paths[0], state) if len(paths) == 1 else ""
    if len(heredocs) != 1 or not doc.closed or not dest or reason or dest.endswith("/"):
        reason = reason or f"{kind} of several heredocs, or to a folder or unknown destination"
        _keep(line, f"{kind} {value}", reason, state)
        return
    stage = state.stages[-1]
    relpath = f"heredocs/{stage.name}-{len(stage.layers) + 1:02d}"
    body = doc.body if doc.quoted else _substitute(doc.body, _vars(state))
    state.files[relpath] = redact(body).encode()
    _add_layer(state, line, f"copy = {{ src = {_q(relpath)}, dest = {_q(dest)}{options} }}")


def _add(value: str, line: int, state: _State) -> None:
    """``ADD`` of a plain context file is a COPY; of a URL or an archive (which ADD unpacks)
    it has no recipe equivalent."""
    words = value.split()
    sources = [w for w in words[:-1] if not w.startswith("--")]
    if any(re.match(r"[a-z+]+://|git@", w) for w in sources):
        reason = "ADD from a URL: download the file into the build context and COPY it"
        _keep(line, f"ADD {value}", reason, state)
    elif any(ARCHIVE.search(w) for w in sources):
        reason = "ADD of an archive, which Docker unpacks (a copy layer would not)"
        _keep(line, f"ADD {value}", reason, state)
    else:
        _copy(value, line, state, "ADD")


def _copy(value: str, line: int, state: _State, kind: str = "COPY") -> None:
    """``COPY [--chmod] [--chown] src… dest`` from the build context: one copy layer per source,
    a relative destination placed under the WORKDIR the Dockerfile set."""
    try:
        text = _substitute(value, _vars(state))
        words = json.loads(text) if text.lstrip().startswith("[") else shlex.split(text)
    except ValueError:
        words = []
    words = [w for w in words if isinstance(w, str)]
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    options, reason = _copy_flags(flags, line, state)
    dest = _copy_dest(paths[-1], state) if len(paths) >= 2 else ""
    sources = paths[:-1]
    reason = reason or _copy_problem(sources, dest, text if words else "", state)
    if reason:
        _keep(line, f"{kind} {value}", reason, state)
        return
    for source in sources:
        relative = PurePosixPath(source).as_posix().strip("/") or "."
        top = relative.split("/")[0]
        target = "context" if relative == "." else relative
        target = f"context/{relative}" if top in RESERVED_DIRS else target
        state.copies[target] = relative
        toml = f"copy = {{ src = {_q(target)}, dest = {_q(dest)}{options} }}"
        _add_layer(state, line, toml)


def _copy_flags(flags: list[str], line: int, state: _State) -> tuple[str, str]:
    """(the copy table's extra keys, '') or ('', why a flag has no recipe key)."""
    options = ""
    for flag in flags:
        name, _, setting = flag.partition("=")
        if name == "--chmod" and FILE_MODE.fullmatch(setting):
            options += f", mode = {_q(setting)}"
        elif name == "--chown" and OWNER.fullmatch(setting):
            options += f", owner = {_q(setting)}"
        elif name == "--link":
            state.notes.append(Unmapped(line, flag, "dropped: it changes caching, not contents"))
        elif name == "--from":
            return (
                "",
                f"{flag}: a file of another stage or image (a copy layer takes context files)",
            )
        else:
            return "", f"{flag} has no recipe key (copy layers take --chmod and --chown)"
    return options, ""


def _copy_dest(dest: str, state: _State) -> str:
    """An absolute destination: relative ones under the WORKDIR the Dockerfile set ('' when
    it set none: the base image's is not known here)."""
    if dest.startswith("/"):
        return dest
    if not state.workdir:
        return ""
    joined = str(PurePosixPath(state.workdir) / dest)
    return joined + "/" if dest.endswith("/") or dest in (".", "./") else joined


def _copy_problem(sources: list[str], dest: str, text: str, state: _State) -> str:
    """Why these sources and destination are not copy layers ('' when they are)."""
    checks = (
        (not text or not sources, "COPY without a source and a destination"),
        (not dest, "COPY to a relative destination before any WORKDIR (the base's is unknown)"),
        (
            not CONTAINER_PATH.fullmatch(dest.rstrip("/") or "/") or "$" in text,
            "COPY with spaces or variables in a path the import cannot resolve",
        ),
        (len(sources) > 1 and not dest.endswith("/"), "several sources need a folder ending in /"),
    )
    found = next((reason for failed, reason in checks if failed), "")
    if found:
        return found
    for source in sources:
        posix = PurePosixPath(source)
        if posix.is_absolute() or ".." in posix.parts or any(c in source for c in "*?["):
            return f"COPY source {source} is outside the build context, or a wildcard"
        if not state.context_has(posix.as_posix()):
            return f"{source} is not in the build context"
    return ""


def unmapped_lines(plan: ImportPlan) -> Iterator[str]:
    """The report's lines: one per unmapped instruction, with its Dockerfile line."""
    for item in plan.unmapped:
        yield f"line {item.line}: {item.instruction[:120]}: {item.reason}"
