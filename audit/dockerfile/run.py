"""``RUN`` of a Dockerfile as recipe layers: ``&&`` chains split, pip installs as pip layers
(their indexes declared, ``--no-deps`` re-pins as ``no_deps = true``), heredocs as files fed to
the command, ARG defaults written into the command where that keeps its meaning.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from packaging.requirements import InvalidRequirement, Requirement

from audit.dockerfile.heredoc import Heredoc
from audit.dockerfile.state import (
    Layer,
    State,
    Unmapped,
    add_layer,
    keep,
    q,
    runnable,
    substitute,
)
from audit.redact import redact

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
SHELL_WORD = re.compile(r"[A-Za-z0-9_./:,=+@%-]*")  # a value the shell takes as it is
PYTHON_WORD = re.compile(r"^(?:\S*/)?python(?:3(?:\.\d+)?)?$")
PIP_WORD = re.compile(r"^(?:\S*/)?pip(?:3(?:\.\d+)?)?$")


def runs_as_in_dockerfile(line: int, state: State, first: int) -> None:
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


# --- RUN ------------------------------------------------------------------------------------


def run(value: str, line: int, state: State, heredocs: list[Heredoc]) -> None:
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
        keep(line, f"RUN {value}", problem, state, command)
    else:
        _run_command(substitute(command, state.stage_args), value, line, state)
    runs_as_in_dockerfile(line, state, first)


def _arg_problem(command: str, state: State) -> str:
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


def _run_command(command: str, value: str, line: int, state: State) -> None:
    segments = _segments(command)
    if segments is None:
        reason = "a pip install inside a compound shell command (||, |, ;, a subshell or cd)"
        if _mentions_pip_install(command):
            keep(line, f"RUN {value}", reason, state, command)
        elif runnable(command):
            add_layer(state, line, f"run = {q(redact(command))}")
        else:
            keep(line, f"RUN {value}", "not a one-line shell command", state)
        return
    for words, text in segments:
        before = len(state.unmapped)
        if _pip_layer(words, line, state):
            continue
        if len(state.unmapped) > before:  # a pip install whose arguments did not map
            keep(line, f"RUN {text}", state.unmapped.pop().reason, state, text)
        elif _mentions_pip_install(text):
            keep(line, f"RUN {text}", "a pip install this import does not recognise", state, text)
        elif runnable(text):
            add_layer(state, line, f"run = {q(redact(text))}")
        else:
            keep(line, f"RUN {text}", "not a one-line shell command", state)


def _heredoc_run(command: str, line: int, state: State, heredocs: list[Heredoc]) -> None:
    """``RUN <<EOF`` (the body run by the shell, or by its ``#!`` program) or ``RUN prog <<EOF``
    (the body on prog's standard input): a run layer whose ``stdin`` is the body's file."""
    doc = heredocs[0]
    program, _, after = command.partition(doc.mark)
    program = substitute(program.strip(), state.stage_args)
    problem = _heredoc_problem(heredocs, program, after)
    if problem:
        keep(line, f"RUN {command}", problem, state)
        return
    stage = state.stages[-1]
    relpath = f"heredocs/{stage.name}-{len(stage.layers) + 1:02d}"
    # a shell script body sees the stage's ARGs in its environment: they are written into it
    body = doc.body if program else substitute(doc.body, state.stage_args)
    state.files[relpath] = redact(body).encode()
    if not program:  # BuildKit runs such a body as `sh -c BODY`, or as a file when it has #!
        program = _shebang(doc.body) or 'sh -c "$(cat)"'
    add_layer(state, line, f"run = {q(program)}\nstdin = {q(relpath)}")


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
            bool(program) and (segments is None or len(segments) != 1 or not runnable(program)),
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


def _pip_layer(words: list[str], line: int, state: State) -> bool:
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
    toml = f"pip = {q(relpath)}"
    if parsed.index:
        toml += f"\nindex = {q(parsed.index)}"
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


def _pip_arguments(args: list[str], line: int, state: State) -> _PipArgs | None:
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


def _repin(parsed: _PipArgs, line: int, state: State) -> bool:
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


def _pip_option(name: str, value: str, line: int, state: State, parsed: _PipArgs) -> bool:
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


def _public_url(url: str, line: int, state: State) -> str:
    """``url`` without credentials (noted: they belong in a BuildKit secret)."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        state.notes.append(Unmapped(line, "index credentials", "dropped: pass them as a secret"))
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _declare_index(url: str, state: State) -> str:
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
