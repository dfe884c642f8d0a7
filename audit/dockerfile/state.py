"""What ``import`` decides while it walks a Dockerfile: the recipe layers so far, what could
not be mapped (with its line and reason), the variables in force, and the helpers that add
layers. Shared by :mod:`audit.dockerfile.importer` and the instruction modules.

Invariant: every text a layer holds has passed :func:`audit.redact.redact`.
"""

from __future__ import annotations

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


def q(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


@dataclass
class State:
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


def unquote(text: str) -> str:
    """An ARG value as Docker reads it (quotes removed), or as written if it does not parse."""
    try:
        words = shlex.split(text)
    except ValueError:
        return text
    return " ".join(words)


def substitute(value: str, args: dict[str, str]) -> str:
    """``${NAME}`` / ``$NAME`` of known variables replaced by their values."""
    for name, default in args.items():
        value = value.replace("${" + name + "}", default)
        pattern = r"\$" + re.escape(name) + r"(?![A-Za-z0-9_])"
        value = re.sub(pattern, default.replace("\\", "\\\\"), value)
    return value


def keep(line: int, instruction: str, reason: str, state: State, command: str = "") -> None:
    """Record an unmapped instruction and keep it as a run layer (a no-op naming it, or
    ``command`` when it is a shell command that can still run)."""
    if redact(command) != command:
        state.notes.append(Unmapped(line, "a credential", "removed: pass it as a BuildKit secret"))
    instruction, command = redact(instruction), redact(command)
    state.unmapped.append(Unmapped(line, instruction, reason))
    clean = re.sub(r"<(?=<)", "< ", " ".join(instruction.split()))  # a no-op, never a heredoc
    if command and runnable(command):
        body = command
    else:
        body = ": " + shlex.quote(f"UNMAPPED Dockerfile line {line}: {clean}"[:300])
    note = f"UNMAPPED Dockerfile line {line}: {reason}"
    state.stages[-1].layers.append(Layer(line, f"run = {q(body)}", note))


def add_layer(state: State, line: int, toml: str, note: str = "") -> None:
    state.stages[-1].layers.append(Layer(line, toml, note or f"Dockerfile line {line}"))


def variables(state: State) -> dict[str, str]:
    """What ``$NAME`` means in an ENV, COPY, WORKDIR … line here: the stage's ARGs, then ENVs."""
    return {**state.stage_args, **state.envs}


def runnable(command: str) -> bool:
    """Whether a shell command passes the recipe's run-layer rules as it is."""
    return (
        bool(command.strip())
        and not any(ord(ch) < 32 for ch in command)
        and not HEREDOC.search(command)
        and not command.rstrip().endswith("\\")
    )
