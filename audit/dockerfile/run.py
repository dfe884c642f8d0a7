"""``RUN`` of a Dockerfile as recipe layers.

A ``RUN`` is one run layer holding the command as written, with its ``--mount``s, except
where the recipe can lock it: a ``pip install`` (``python -m pip``, ``uv pip``) of requirement
lines in an audited stage is a pip layer, and an ``&&`` chain of such installs only is split
into one pip layer per install (each part then runs alone, as in the chain: nothing between
them). Any other chain stays whole: ``apt-get install … && rm -rf /var/lib/apt/lists/*`` in
one layer still shrinks it. An install the recipe keeps as a run layer (in a chain, behind an
``if``, inside a script the Dockerfile copied in, with an option a pip layer cannot say, in a
stage no base record describes) is listed as not locked: the build guard (in audited stages)
and the layer walk audit it. Build arguments stay ``$NAME`` in the command: the stage declares
them, and BuildKit hands them to the shell.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from pathlib import PurePosixPath

from audit.dockerfile.flags import MountSpec, mount_toml, read_flags, split_flags
from audit.dockerfile.heredoc import Heredoc
from audit.dockerfile.pip import PipPlan, add_pip_layer, pip_plan
from audit.dockerfile.state import (
    Layer,
    State,
    keep,
    q,
    runnable,
)
from audit.redact import redact

SHELL_UNSAFE = {"||", "|", ";", "&", "(", ")", ">", ">>", "<", "<<", "`"}
CONTROL_WORDS = ("if", "for", "while", "until", "case", "{")
AND = "&&"
INSTALLS = re.compile(
    r"\b(?:pip3?(?:\.\d+)?|uv\s+pip|python3?(?:\.\d+)?\s+-m\s+pip)\s+(?:[^\n;&|]*\s)?"
    r"(?:install|sync)\b|\b(?:conda|mamba|micromamba)\s+install\b|\bsetup\.py\s+(?:install|develop)\b"
    r"|\buv\s+sync\b|\bpip3?\s+install\b"
)
SCRIPT_NAME = re.compile(r"\.(?:sh|bash|py)$")
PYTHON_NAME = re.compile(r"^python3?(?:\.\d+)?$")
SCRIPT_WORD = re.compile(r"^[\w./+-]*\.(?:sh|bash|py)$|^\.?/[\w./+-]+$")


def run(value: str, line: int, state: State, heredocs: list[Heredoc]) -> None:
    """A RUN: its flags kept as mounts (or listed), exec form joined, then mapped."""
    flags, command = split_flags(value.strip())
    mounts = _mounts(flags, line, state)
    if command.startswith("["):
        with contextlib.suppress(ValueError, TypeError):
            command = shlex.join(json.loads(command))
    command = command.replace("\t", " ")
    first = len(state.stage.layers)
    if heredocs:
        _heredoc_run(command, line, state, heredocs, mounts)
    else:
        _run_command(command, value, line, state, mounts)
    runs_as_in_dockerfile(line, state, first)


def _mounts(flags: list[str], line: int, state: State) -> list[str]:
    """The RUN's mounts as TOML inline tables; a flag the recipe cannot keep is listed (the
    layer then runs without it)."""
    read = read_flags(flags, set(state.aliases))
    for problem in read.problems:
        state.list_unmapped(line, "RUN --", problem)
    rows = []
    for spec in read.mounts:
        row = _mount_row(spec, line, state)
        if row:
            rows.append(row)
    return rows


def _mount_row(spec: MountSpec, line: int, state: State) -> str:
    """One mount, its stage named ``vK`` and its context source copied into the recipe."""
    origin = state.aliases[spec.stage] if spec.stage is not None else None
    if spec.context is None:
        return mount_toml(spec, None, origin)
    relative = PurePosixPath(spec.context).as_posix().strip("/") or "."
    if relative.startswith("..") or not state.context_has(relative):
        state.list_unmapped(
            line,
            f"RUN --mount=type=bind,source={spec.context}",
            "its source is not in the build context (the layer runs without the mount)",
        )
        return ""
    target = recipe_path(relative)
    state.copies[target] = relative
    mount_target = spec.values.get("target", "")
    _remember_files(state, mount_target, relative)
    return mount_toml(spec, target, None)


RESERVED_DIRS = ("requirements", "templates", "image.toml", "locks", "heredocs", "context")


def recipe_path(relative: str) -> str:
    """Where a build-context path lives in the recipe folder (``context`` for the whole)."""
    top = relative.split("/", maxsplit=1)[0]
    if relative == ".":
        return "context"
    return f"context/{relative}" if top in RESERVED_DIRS else relative


def _remember_files(state: State, target: str, relative: str) -> None:
    """Remember that ``target`` in the image holds the context's ``relative`` (for scripts)."""
    if target:
        absolute = _absolute(target, state)
        if absolute:
            state.scope.files[absolute] = relative


def _absolute(path: str, state: State) -> str:
    if path.startswith("/"):
        return str(PurePosixPath(path))
    return str(PurePosixPath(state.scope.workdir) / path) if state.scope.workdir else ""


def runs_as_in_dockerfile(line: int, state: State, first: int) -> None:
    """A RUN after a USER or SHELL (of this stage or the one it builds on) runs as root with
    /bin/sh in the recipe: every such RUN is listed (each may need that user or shell: a
    ``[[ … ]]`` test is bash's), and said beside the first layer it became."""
    layers = state.stage.layers
    for attribute, what in (("user_line", "USER"), ("shell_line", "SHELL")):
        since = getattr(state.scope, attribute)
        if since and len(layers) > first:
            reason = (
                f"a RUN after {what} (line {since}): the recipe runs it as root with /bin/sh "
                f"(the guard needs both) and keeps {what} for the image"
            )
            state.list_unmapped(line, f"RUN after {what}", reason)
            layers[first].note = f"UNMAPPED Dockerfile line {line}: {reason}; {layers[first].note}"


# --- a command ------------------------------------------------------------------------------


def _run_command(command: str, value: str, line: int, state: State, mounts: list[str]) -> None:
    if not runnable(command):
        keep(line, f"RUN {value}", "not a one-line shell command", state)
        return
    segments = segments_of(command)
    plans = [pip_plan(words, state) for words, _ in segments or []]
    if plans and state.stage.audited and all(isinstance(p, PipPlan) for p in plans):
        for plan in plans:
            assert isinstance(plan, PipPlan)
            add_pip_layer(plan, line, state, mounts)
        if len(plans) > 1:
            state.note(line, "RUN … && …", f"split into {len(plans)} pip layers (installs only)")
        return
    reasons = [p for p in plans if isinstance(p, str) and p]
    _run_layer(command, line, state, mounts, reasons[0] if reasons else "")


def _run_layer(command: str, line: int, state: State, mounts: list[str], reason: str) -> None:
    """The whole command as one run layer; its installs listed as not locked."""
    if redact(command) != command:
        state.list_unmapped(
            line, f"RUN {command}", "a credential in the command was removed: pass it as a secret"
        )
    toml = f"run = {q(redact(command))}" + (f"\nmounts = [{', '.join(mounts)}]" if mounts else "")
    state.stage.layers.append(Layer(line, toml, f"Dockerfile line {line}"))
    why = install_reason(command, state, reason)
    if why:
        state.list_unlocked(line, f"RUN {command}", why)


def install_reason(command: str, state: State, reason: str = "") -> str:
    """Why an install in this run layer is not a pip layer ('' when it holds none)."""
    script = _script_with_installs(command, state)
    if not INSTALLS.search(command) and not script:
        return ""
    segments = segments_of(command)
    if script:
        where = script
    elif not state.stage.audited:
        where = state.stage.unaudited
    elif segments is None and segments_of(_substituted(command)) is not None:
        where = "an argument the shell computes ($(…) or `…`): a lock needs it written out"
    elif segments is None:
        where = "inside shell control flow (if, ||, ;, a pipe or a subshell)"
    elif len(segments) > 1:
        where = "in an && chain with other commands: split, it would mean something else"
    else:
        where = reason or "an install a pip layer cannot say"
    return f"not locked: {where}; audited by the layer walk"


def _script_with_installs(command: str, state: State) -> str:
    """Why a script the command runs is listed ('' when none is): one the Dockerfile brought
    from the build context and that installs packages, or one the context does not hold."""
    for word in executed(command):
        relative = _context_file(_absolute(word, state) or word, state)
        text = state.context_read(relative) if relative else None
        if text is not None and INSTALLS.search(text):
            return f"inside {word}, a script from the build context"
        if text is None and not relative and SCRIPT_NAME.search(word):
            return f"in {word}, which the build context does not hold (whatever it installs)"
    return ""


def _substituted(command: str) -> str:
    """``command`` with each ``$(…)`` and `` `…` `` (and what they hold) as one plain word."""
    out, depth = "", 0
    for index, char in enumerate(command):
        if depth == 0 and command.startswith("$(", index):
            out, depth = out + "SUBSTITUTED", 1
        elif depth and char == "(":
            depth += 1
        elif depth and char == ")":
            depth -= 1
        elif not depth:
            out += char
    return re.sub(r"`[^`]*`", "SUBSTITUTED", out)


RUNNERS = ("bash", "sh", "source", ".", "exec", "python", "python3")
STARTS = ("&&", "||", ";", "|", "(", "then", "do", "else", "elif")


def executed(command: str) -> list[str]:
    """The scripts a command runs: a path in command position (``./x.sh``, ``/opt/x.sh``) or
    after a runner (``bash x.sh``, ``python3 tools/x.py``)."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return []
    found, start, runner = [], True, False
    for token in tokens:
        if token in STARTS:
            start, runner = True, False
            continue
        name = PurePosixPath(token).name
        if (start or runner) and SCRIPT_WORD.match(token) and name not in RUNNERS:
            found.append(token)
        if runner and not token.startswith("-"):
            runner = False
        elif start:
            runner = name in RUNNERS or bool(PYTHON_NAME.match(name))
        start = False
    return found


def _context_file(path: str, state: State) -> str:
    """The context path an image path holds: a file copied there, else one inside the longest
    copied folder it is under ('' when none)."""
    files = state.scope.files
    if path in files:
        return files[path]
    folders = [t for t in files if path.startswith(t.rstrip("/") + "/")]
    if not folders:
        return ""
    folder = max(folders, key=len)
    return str(PurePosixPath(files[folder]) / path[len(folder.rstrip("/")) + 1 :])


def segments_of(command: str) -> list[tuple[list[str], str]] | None:
    """The ``&&``-joined simple commands of ``command`` (words and text), or None when the
    command uses other shell syntax."""
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
        if token == AND:
            groups.append([])
        else:
            groups[-1].append(token)
    if any(not group or group[0] in CONTROL_WORDS for group in groups):
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


# --- heredocs -------------------------------------------------------------------------------


def _heredoc_run(
    command: str, line: int, state: State, heredocs: list[Heredoc], mounts: list[str]
) -> None:
    """``RUN <<EOF`` (the body run by the shell, or by its ``#!`` program) or ``RUN prog <<EOF``
    (the body on prog's standard input): a run layer whose ``stdin`` is the body's file."""
    doc = heredocs[0]
    program, _, after = command.partition(doc.mark)
    program = program.strip()
    problem = _heredoc_problem(heredocs, program, after)
    if problem:
        keep(line, f"RUN {command}", problem, state)
        return
    stage = state.stage
    relpath = f"heredocs/{stage.name}-{len(stage.layers) + 1:02d}"
    state.files[relpath] = redact(doc.body).encode()
    if not program:  # BuildKit runs such a body as `sh -c BODY`, or as a file when it has #!
        program = _shebang(doc.body) or 'sh -c "$(cat)"'
    toml = f"run = {q(program)}\nstdin = {q(relpath)}"
    toml += f"\nmounts = [{', '.join(mounts)}]" if mounts else ""
    state.stage.layers.append(Layer(line, toml, f"Dockerfile line {line}"))
    if INSTALLS.search(doc.body) or INSTALLS.search(program):
        state.list_unlocked(line, f"RUN {command}", "not locked (inside a heredoc script); "
                            "audited by the layer walk")  # fmt: skip


def _heredoc_problem(heredocs: list[Heredoc], program: str, after: str) -> str:
    """Why this RUN's heredoc cannot be a run layer's stdin file ('' when it can)."""
    doc = heredocs[0]
    segments = segments_of(program) if program else []
    checks = (
        (len(heredocs) != 1 or not doc.closed, "several heredocs in one RUN, or one never closed"),
        (bool(after.strip()), "a heredoc followed by more shell on its line"),
        (
            bool(program) and not doc.quoted and bool(re.search(r"[$`\\]", doc.body)),
            "a heredoc the shell would expand ($, ` or \\ without a quoted delimiter)",
        ),
        (
            bool(program) and (segments is None or len(segments) != 1 or not runnable(program)),
            "a heredoc fed to a compound shell command",
        ),
    )
    return next((reason for failed, reason in checks if failed), "")


def _shebang(body: str) -> str:
    """``/usr/bin/env python3 /dev/stdin`` for a body starting ``#!/usr/bin/env python3``."""
    first = body.split("\n", 1)[0]
    if not first.startswith("#!") or any(ord(ch) < 32 for ch in first):
        return ""
    return f"{first[2:].strip()} /dev/stdin"
