"""``layer-audit import``: a multi-stage Dockerfile turned into a recipe folder, decided in memory.

The Dockerfile is read with ``dockerfile-parse``; each instruction is mapped on its own:

- the first stage's ``FROM`` is the recipe's base (``@sha256:`` becomes ``base_digest``); every
  stage is a recipe stage ``v1`` … ``vN`` (its Dockerfile name goes into the description);
- ``RUN pip install …`` / ``python3 -m pip install …`` / ``uv pip install …`` is a pip layer
  whose ``requirements/vK-NN.in`` holds the requirements; ``--index-url`` becomes the image's
  index (or a declared index when layers disagree), ``--extra-index-url`` a declared index named
  after its host and path, ``--pre`` ``pre = true``; ``--no-deps`` is noted (the recipe locks
  every pip layer, so the note tells a reviewer which layer forced versions past a resolver);
- a ``RUN`` of several commands joined by ``&&`` is split, so a pip install among them still
  becomes a pip layer; ``RUN`` otherwise is a run layer, ``COPY src dest`` a copy layer (the
  file is taken from the build context), ``ENV`` an env layer.

Invariant: no instruction is dropped. What cannot be mapped (``WORKDIR``, ``CMD``, a ``FROM``
that does not continue the previous stage, ``ENV`` with ``$`` expansion, a pip install inside
``||`` or a subshell …) is listed in :attr:`ImportPlan.unmapped` with its line number and kept
in the recipe as a run layer: the original command, or a shell no-op ``: '<instruction>'``
naming it, so the rendered Dockerfile still shows where it was.
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
from audit.plan.recipe_parse import ENV_NAME, PIP_SOURCE_ENV, SECRET_NAME

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
RESERVED_DIRS = ("requirements", "templates", "image.toml", "locks")
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
        for stage in self.stages:
            lines += ["", "[[stage]]", f"name = {_q(stage.name)}"]
            lines.append(f"description = {_q(stage.description)}")
            for layer in stage.layers:
                lines.append("")
                if layer.note:
                    lines.append(f"  # {layer.note}")
                lines += ["  [[stage.layer]]", *(f"  {row}" for row in layer.toml.splitlines())]
        return "\n".join(lines) + "\n"


def _q(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def parse_dockerfile(data: bytes) -> list[dict[str, Any]]:
    """The instructions of a Dockerfile, in memory (the parser never touches the disk here)."""
    parser = DockerfileParser(fileobj=io.BytesIO(data))
    return [
        item
        for item in parser.structure
        if item["instruction"] not in ("COMMENT",) and item["instruction"].strip()
    ]


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
    unmapped: list[Unmapped] = field(default_factory=list)
    notes: list[Unmapped] = field(default_factory=list)
    args: dict[str, str] = field(default_factory=dict)
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
        _instruction(kind, value, line, state)
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
            state.args[name.strip()] = default.strip().strip("\"'")
            return
    state.unmapped.append(Unmapped(line, f"{kind} {value}", "before the first FROM"))


def _substitute(value: str, args: dict[str, str]) -> str:
    """``${NAME}`` / ``$NAME`` of global ARGs with defaults replaced by their values."""
    for name, default in args.items():
        value = value.replace("${" + name + "}", default).replace("$" + name, default)
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
    name, _, digest = reference.partition("@")
    return name, digest or None


def _instruction(kind: str, value: str, line: int, state: _State) -> None:
    if kind == "RUN":
        _run(value, line, state)
    elif kind == "ENV":
        _env(value, line, state)
    elif kind == "COPY":
        _copy(value, line, state)
    else:
        _keep(line, f"{kind} {value}", f"{kind} has no recipe equivalent", state)


def _keep(line: int, instruction: str, reason: str, state: _State, command: str = "") -> None:
    """Record an unmapped instruction and keep it as a run layer (a no-op naming it, or
    ``command`` when it is a shell command that can still run)."""
    state.unmapped.append(Unmapped(line, instruction, reason))
    clean = " ".join(instruction.split())
    if command and _runnable(command):
        body = command
    else:
        body = ": " + shlex.quote(f"UNMAPPED Dockerfile line {line}: {clean}"[:300])
    note = f"UNMAPPED Dockerfile line {line}: {reason}"
    state.stages[-1].layers.append(Layer(line, f"run = {_q(body)}", note))


def _runnable(command: str) -> bool:
    """Whether a shell command passes the recipe's run-layer rules as it is."""
    return (
        bool(command.strip())
        and not any(ord(ch) < 32 for ch in command)
        and "<<" not in command
        and not command.rstrip().endswith("\\")
    )


# --- RUN ------------------------------------------------------------------------------------


def _run(value: str, line: int, state: _State) -> None:
    """A RUN: flags dropped (noted), exec form joined, ``&&`` chains split into layers."""
    command = value.strip()
    while command.startswith("--"):
        flag, _, command = command.partition(" ")
        state.notes.append(Unmapped(line, f"RUN {flag}", "RUN flag dropped"))
        command = command.strip()
    if command.startswith("["):
        with contextlib.suppress(ValueError, TypeError):
            command = shlex.join(json.loads(command))
    command = command.replace("\t", " ")
    segments = _segments(command)
    if segments is None:
        reason = "a pip install inside a compound shell command (||, |, ;, a subshell or cd)"
        if _mentions_pip_install(command):
            _keep(line, f"RUN {value}", reason, state, command)
        elif _runnable(command):
            state.stages[-1].layers.append(
                Layer(line, f"run = {_q(command)}", f"Dockerfile line {line}")
            )
        else:
            _keep(line, f"RUN {value}", "not a one-line shell command (heredoc?)", state)
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
            state.stages[-1].layers.append(
                Layer(line, f"run = {_q(text)}", f"Dockerfile line {line}")
            )
        else:
            _keep(line, f"RUN {text}", "not a one-line shell command", state)


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
    header = f"# Dockerfile line {line}: {' '.join(words)}"[:400]
    body = [header, *parsed.comments, *parsed.lines]
    state.requirements[relpath] = ("\n".join(body) + "\n").encode()
    toml = f"pip = {_q(relpath)}"
    if parsed.index:
        toml += f"\nindex = {_q(parsed.index)}"
    if parsed.pre:
        toml += "\npre = true"
    note = f"Dockerfile line {line}"
    note += " (--no-deps in the Dockerfile: an override)" if parsed.no_deps else ""
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
            parsed.comments.append(
                "# --no-deps in the Dockerfile: these pins override what earlier layers need"
            )
            state.notes.append(Unmapped(line, "pip install --no-deps", "noted as an override"))
        elif word in IGNORED_PIP_FLAGS or name in IGNORED_PIP_OPTIONS:
            if name in IGNORED_PIP_OPTIONS and not equals:
                next(words, "")
            state.notes.append(Unmapped(line, f"pip {name}", "pip option dropped"))
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
    return parsed


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


# --- ENV, COPY -----------------------------------------------------------------------------


def _env(value: str, line: int, state: _State) -> None:
    """``ENV A=1 B="x y"`` (or the legacy ``ENV A value``) as one env layer of literals."""
    try:
        words = shlex.split(value)
    except ValueError:
        _keep(line, f"ENV {value}", "ENV that does not parse", state)
        return
    pairs = _env_pairs(words)
    problem = _env_problem(value, pairs)
    if problem:
        _keep(line, f"ENV {value}", problem, state)
        return
    body = ", ".join(f"{name} = {_q(text)}" for name, text in pairs)
    state.stages[-1].layers.append(Layer(line, f"env = {{ {body} }}", f"Dockerfile line {line}"))


def _env_pairs(words: list[str]) -> list[tuple[str, str]]:
    if words and "=" not in words[0]:
        return [(words[0], " ".join(words[1:]))]
    return [(w.partition("=")[0], w.partition("=")[2]) for w in words]


def _env_problem(value: str, pairs: list[tuple[str, str]]) -> str:
    """Why these pairs cannot be a recipe env layer ('' when they can)."""
    if not pairs or "$" in value:
        return "ENV with $ expansion (recipe env values are literal)"
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        return "ENV sets one name twice"
    for name, text in pairs:
        if not ENV_NAME.fullmatch(name):
            return f"{name!r} is not a shell variable name"
        if SECRET_NAME.search(name) or name in PIP_SOURCE_ENV:
            return f"{name} looks like a secret or an index setting (recipes refuse it)"
        if any(ord(ch) < 32 for ch in text):
            return "ENV value with a control character"
    return ""


def _copy(value: str, line: int, state: _State) -> None:
    """``COPY src /abs/dest`` from the build context as a copy layer; anything else is kept."""
    try:
        words = json.loads(value) if value.lstrip().startswith("[") else shlex.split(value)
    except ValueError:
        words = []
    flags = [w for w in words if isinstance(w, str) and w.startswith("--")]
    paths = [w for w in words if isinstance(w, str) and not w.startswith("--")]
    source = paths[0] if paths else ""
    posix = PurePosixPath(source)
    reason = ""
    if flags:
        reason = f"COPY {' '.join(flags)} (another stage, owner or link) has no recipe key"
    elif len(paths) != 2:
        reason = "COPY of several sources (or none): one copy layer takes one"
    elif not paths[1].startswith("/"):
        reason = "COPY to a relative destination (depends on WORKDIR)"
    elif posix.is_absolute() or ".." in posix.parts or any(c in source for c in "*?["):
        reason = "COPY source outside the build context, or a wildcard"
    elif not state.context_has(posix.as_posix()):
        reason = f"{source} is not in the build context"
    if reason:
        _keep(line, f"COPY {value}", reason, state)
        return
    relative = posix.as_posix().strip("/") or "."
    target = f"context/{relative}" if relative.split("/")[0] in RESERVED_DIRS else relative
    state.copies[target] = relative
    toml = f"copy = {{ src = {_q(target)}, dest = {_q(paths[1])} }}"
    state.stages[-1].layers.append(Layer(line, toml, f"Dockerfile line {line}"))


def unmapped_lines(plan: ImportPlan) -> Iterator[str]:
    """The report's lines: one per unmapped instruction, with its Dockerfile line."""
    for item in plan.unmapped:
        yield f"line {item.line}: {item.instruction[:120]}: {item.reason}"
