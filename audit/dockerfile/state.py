"""What ``import`` decides while it walks a Dockerfile: the recipe stages and layers so far,
what it lists (not kept, not locked, notes; each with its Dockerfile line), the scope of the
stage being read, and the helpers that add layers. Shared by :mod:`audit.dockerfile.importer`
and the instruction modules.

Invariants: every text a layer holds has passed :func:`audit.redact.redact`; a change to what
the Dockerfile does is never made without an entry in :attr:`State.unmapped` (not kept) with
its line and reason; an install the recipe keeps as a run layer, not a pip layer, is in
:attr:`State.unlocked`.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from audit.dockerfile.config import FinalConfig
from audit.recipe.parse import HEREDOC
from audit.redact import redact


@dataclass(frozen=True)
class Unmapped:
    """One listed line: the instruction and why it is listed."""

    line: int  # 1-based first line in the Dockerfile (0: the file as a whole)
    instruction: str
    reason: str


@dataclass
class Layer:
    """One recipe layer: its TOML body and the Dockerfile line it came from."""

    line: int
    toml: str
    note: str = ""
    primary: str | None = None  # a pip layer's own --index-url, as a declared index name


@dataclass
class StagePlan:
    """One recipe stage: where it starts from, its layers and its configuration."""

    name: str
    description: str
    layers: list[Layer] = field(default_factory=list)
    parent: str | None = None  # an earlier recipe stage (vK)
    base: str | None = None  # or an image of its own (a digest pin in base_digest)
    base_digest: str | None = None
    target: str | None = None  # the Dockerfile's name for it
    config: FinalConfig = field(default_factory=FinalConfig)
    unaudited: str = ""  # why its installs cannot be locked ('' on the recorded base)

    @property
    def audited(self) -> bool:
        return not self.unaudited


@dataclass
class Scope:
    """What one Dockerfile stage carries from instruction to instruction; a stage built on
    another starts from a copy of that stage's scope (ENV, WORKDIR, USER, SHELL, files and
    index settings carry over, as in Docker; ARGs do not)."""

    envs: dict[str, str] = field(default_factory=dict)  # ENV values known at import
    tainted: set[str] = field(default_factory=set)  # ENVs whose value comes from an ARG
    workdir: str | None = None
    user_line: int = 0  # a USER other than root in force since this line
    shell_line: int = 0  # a SHELL in force since this line
    files: dict[str, str] = field(default_factory=dict)  # image path -> context path copied
    index_env: dict[str, str] = field(default_factory=dict)  # PIP_INDEX_URL … set by ENV
    args: dict[str, str | None] = field(default_factory=dict)  # declared ARGs: value or unset

    def inherit(self) -> Scope:
        """The scope a stage built on this one starts with."""
        child = copy.deepcopy(self)
        child.args = {}
        return child


def q(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


@dataclass
class State:
    """What the walk over the instructions has decided so far."""

    context_has: Callable[[str], bool]
    context_read: Callable[[str], str | None]
    interpreter: str | None
    platform: str | None
    index_url: str | None = None
    indexes: dict[str, str] = field(default_factory=dict)
    stages: list[StagePlan] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)  # Dockerfile name/index -> vK
    requirements: dict[str, bytes] = field(default_factory=dict)
    copies: dict[str, str] = field(default_factory=dict)  # recipe path -> context path
    files: dict[str, bytes] = field(default_factory=dict)  # heredoc bodies, by recipe path
    unmapped: list[Unmapped] = field(default_factory=list)  # not kept: the recipe differs
    unlocked: list[Unmapped] = field(default_factory=list)  # kept as run layers, not locked
    notes: list[Unmapped] = field(default_factory=list)
    global_args: dict[str, str | None] = field(default_factory=dict)  # before FROM, resolved
    global_text: dict[str, str | None] = field(default_factory=dict)  # …as written
    overrides: dict[str, str] = field(default_factory=dict)  # import --build-arg NAME=VALUE
    declared: dict[str, list[tuple[str, str | None, int]]] = field(default_factory=dict)
    scope: Scope = field(default_factory=Scope)
    ends: dict[str, Scope] = field(default_factory=dict)  # recipe stage -> scope at its end
    seen_interpreters: list[str] = field(default_factory=list)
    break_system_packages: bool = False
    where: str = "Dockerfile"  # how errors name the file

    @property
    def stage(self) -> StagePlan:
        return self.stages[-1]

    def list_unmapped(self, line: int, instruction: str, reason: str) -> None:
        self.unmapped.append(Unmapped(line, redact(instruction), reason))

    def list_unlocked(self, line: int, instruction: str, reason: str) -> None:
        self.unlocked.append(Unmapped(line, redact(instruction), reason))

    def note(self, line: int, instruction: str, reason: str) -> None:
        self.notes.append(Unmapped(line, redact(instruction), reason))


def unquote(text: str) -> str:
    """An ARG value as Docker reads it (quotes removed), or as written if it does not parse."""
    try:
        words = shlex.split(text)
    except ValueError:
        return text
    return " ".join(words)


REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def substitute(value: str, known: dict[str, str]) -> str:
    """``${NAME}`` / ``$NAME`` of known variables replaced by their values."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return known.get(name, match.group(0))

    return REFERENCE.sub(one, value)


def referenced(value: str) -> set[str]:
    """The names ``value`` references as ``$NAME`` or ``${NAME}``."""
    return {m.group(1) or m.group(2) for m in REFERENCE.finditer(value)}


def variables(state: State) -> dict[str, str]:
    """What ``$NAME`` means in an ENV, COPY, WORKDIR … line here: the stage's ARGs with a
    value, then ENVs (an ENV wins over an ARG of the same name, as in Docker)."""
    args = {name: value for name, value in state.scope.args.items() if value is not None}
    return {**args, **state.scope.envs}


def from_args(value: str, state: State) -> list[str]:
    """The ARGs (and ENVs made from ARGs) whose import-time value ``value`` would freeze."""
    names = referenced(value)
    args = {n for n in names if n in state.scope.args and n not in state.scope.envs}
    return sorted(args | (names & state.scope.tainted))


def keep(line: int, instruction: str, reason: str, state: State, command: str = "") -> None:
    """Record an instruction the recipe cannot keep, as a run layer: ``command`` when it is a
    shell command that can still run, else a no-op naming it."""
    if redact(command) != command:
        state.note(line, "a credential", "removed: pass it as a BuildKit secret")
    instruction, command = redact(instruction), redact(command)
    state.list_unmapped(line, instruction, reason)
    clean = re.sub(r"<(?=<)", "< ", " ".join(instruction.split()))  # a no-op, never a heredoc
    if command and runnable(command):
        body = command
    else:
        body = ": " + shlex.quote(f"UNMAPPED Dockerfile line {line}: {clean}"[:300])
    note = f"UNMAPPED Dockerfile line {line}: {reason}"
    state.stage.layers.append(Layer(line, f"run = {q(body)}", note))


def add_layer(state: State, line: int, toml: str, note: str = "") -> None:
    state.stage.layers.append(Layer(line, toml, note or f"Dockerfile line {line}"))


def runnable(command: str) -> bool:
    """Whether a shell command passes the recipe's run-layer rules as it is."""
    return (
        bool(command.strip())
        and not any(ord(ch) < 32 for ch in command)
        and not HEREDOC.search(command)
        and not command.rstrip().endswith("\\")
    )
