"""``pip install`` (``python -m pip install``, ``uv pip install``) read as a recipe pip layer.

:func:`pip_plan` decides without changing anything: a :class:`PipPlan`, or the reason the
install cannot be a pip layer ('' when the words are no install at all). Invariants: a plan's
requirements are PEP 508 lines and its indexes URLs without credentials; every option it drops
changes nothing a lock installs (verbosity, caches, ``--system``) and is noted; an option that
would change what pip installs (``-U``, ``--force-reinstall``, ``-r``, ``-e``, paths, a second
extra index …) is a reason, so the install stays a run layer, kept as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from packaging.requirements import InvalidRequirement, Requirement

from audit.dockerfile.state import Layer, State, from_args, q, substitute, variables
from audit.redact import redact

PYTHON_WORD = re.compile(r"^(?:\S*/)?python(?:3(?:\.\d+)?)?$")
PIP_WORD = re.compile(r"^(?:\S*/)?pip(?:3(?:\.\d+)?)?$")
QUIET_FLAGS = {
    "-q", "--quiet", "-qq", "-v", "--verbose", "--no-cache-dir", "--no-cache",
    "--disable-pip-version-check", "--system", "--no-input", "--no-warn-script-location",
    "--no-compile", "--compile", "--compile-bytecode",
}  # fmt: skip
QUIET_OPTIONS = {
    "--root-user-action", "--progress-bar", "--timeout", "--retries", "--cache-dir",
    "--trusted-host", "--python", "-p",
}  # fmt: skip
INDEX_OPTIONS = ("-i", "--index-url", "--extra-index-url", "--default-index", "--index")
REASONS = {
    "-U": "--upgrade moves installed packages to the newest (a lock keeps what satisfies)",
    "--upgrade": "--upgrade moves installed packages to the newest (a lock keeps what satisfies)",
    "--force-reinstall": "--force-reinstall reinstalls what a lock would keep",
    "-I": "--ignore-installed installs over what a lock would keep",
    "--ignore-installed": "--ignore-installed installs over what a lock would keep",
    "-e": "an editable install of a path in the image (a lock pins released versions)",
    "--editable": "an editable install of a path in the image (a lock pins released versions)",
    "-r": "a requirements file of the image (a lock reads the recipe's requirements)",
    "--requirement": "a requirements file of the image (a lock reads the recipe's requirements)",
    "-c": "a constraints file of the image",
    "--constraint": "a constraints file of the image",
}


@dataclass
class PipPlan:
    """One pip layer to be: its requirement lines and options, and where they came from."""

    words: list[str]
    lines: list[str] = field(default_factory=list)
    primary: str | None = None  # an --index-url for this layer
    extra: str | None = None  # one --extra-index-url
    pre: bool = False
    no_deps: bool = False
    dropped: list[str] = field(default_factory=list)  # options that change nothing locked
    frozen: list[str] = field(default_factory=list)  # ARGs written into the requirements


def pip_words(words: list[str]) -> tuple[str | None, list[str]] | None:
    """(the interpreter it names, the arguments after ``install``) of a pip install."""
    found: tuple[str | None, list[str]] | None = None
    if len(words) >= 4 and PYTHON_WORD.match(words[0]) and words[1:3] == ["-m", "pip"]:
        found = (words[0] if words[0].startswith("/") else None), words[3:]
    elif len(words) >= 3 and words[0] == "uv" and words[1] == "pip":
        found = None, words[2:]
    elif len(words) >= 2 and PIP_WORD.match(words[0]):
        found = None, words[1:]
    if found is None or not found[1] or found[1][0] != "install":
        return None
    return found[0], found[1][1:]


ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def pip_plan(words: list[str], state: State) -> PipPlan | str:
    """The pip layer ``words`` would be, or why it cannot be one ('' for no install)."""
    assignments = 0
    while assignments < len(words) and ASSIGNMENT.match(words[assignments]):
        assignments += 1
    found = pip_words(words[assignments:])
    if found is None:
        return ""
    if assignments:
        return f"{words[0].partition('=')[0]}=… before the install (a pip layer sets no variable)"
    interpreter, args = found
    plan = PipPlan(words)
    known = variables(state)
    todo = list(args)
    while todo:
        word = todo.pop(0)
        problem = _option(word, todo, plan, known, state)
        if problem:
            return problem
    if not plan.lines:
        return "no requirement to install"
    if plan.no_deps and not all(_exact_pin(line) for line in plan.lines):
        return "--no-deps with a requirement that is not one exact name==version"
    if interpreter:
        state.seen_interpreters.append(interpreter)
    return plan


def _option(word: str, todo: list[str], plan: PipPlan, known: dict[str, str], state: State) -> str:
    """Take one argument into ``plan``; the reason it cannot be a pip layer, else ''."""
    name, equals, inline = word.partition("=")
    if name in INDEX_OPTIONS:
        value = inline if equals else (todo.pop(0) if todo else "")
        return _index_option(name, value, plan)
    if word in ("--pre", "--prerelease=allow"):
        plan.pre = True
    elif word == "--no-deps":
        plan.no_deps = True
    elif word == "--break-system-packages":
        state.break_system_packages = True
        plan.dropped.append(word)
    elif word in QUIET_FLAGS or name in QUIET_OPTIONS:
        if name in QUIET_OPTIONS and not equals:
            _skip(todo)
        plan.dropped.append(name)
    elif name in REASONS:
        return REASONS[name]
    elif word.startswith("-"):
        return f"pip option {name} has no pip-layer key"
    else:
        return _requirement(word, plan, known, state)
    return ""


def _skip(todo: list[str]) -> None:
    if todo:
        todo.pop(0)


def _requirement(word: str, plan: PipPlan, known: dict[str, str], state: State) -> str:
    text = substitute(word, known)
    if "$" in text:
        return f"{word}: names a variable the import cannot resolve"
    try:
        Requirement(text)
    except InvalidRequirement:
        return f"{word}: not a PEP 508 requirement (a path, a URL or an archive)"
    plan.frozen += from_args(word, state)
    plan.lines.append(text)
    return ""


def _index_option(name: str, value: str, plan: PipPlan) -> str:
    if not value or "$" in value:
        return f"{name} {value or '(no value)'}: an index the import cannot resolve"
    if name in ("-i", "--index-url", "--default-index"):
        plan.primary = value
        return ""
    if plan.extra is not None:
        return "a second extra index in one install (a pip layer names one)"
    plan.extra = value
    return ""


def _exact_pin(line: str) -> bool:
    specs = list(Requirement(line).specifier)
    return len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version


def add_pip_layer(plan: PipPlan, line: int, state: State, mounts: list[str]) -> None:
    """Write the plan's requirements file and its pip layer (indexes declared as needed)."""
    stage = state.stage
    slug = f"{stage.name}-{len(stage.layers) + 1:02d}"
    relpath = f"requirements/{slug}.in"
    header = redact(f"# Dockerfile line {line}: {' '.join(plan.words)}")[:400]
    comments = ["# --no-deps in the Dockerfile: re-pinned with no_deps = true"] * plan.no_deps
    state.requirements[relpath] = ("\n".join([header, *comments, *plan.lines]) + "\n").encode()
    toml = f"pip = {q(relpath)}"
    primary = plan.primary or state.scope.index_env.get("primary")
    extra = plan.extra or state.scope.index_env.get("extra")
    index = _declare(public_url(primary, line, state), state) if primary else None
    if extra:
        toml += f"\nindex = {q(_declare(public_url(extra, line, state), state))}"
    toml += "\npre = true" if plan.pre else ""
    toml += "\nno_deps = true" if plan.no_deps else ""
    toml += f"\nmounts = [{', '.join(mounts)}]" if mounts else ""
    note = f"Dockerfile line {line}"
    note += " (pip install --no-deps: a re-pin, applied as an override)" if plan.no_deps else ""
    stage.layers.append(Layer(line, toml, note, primary=index))
    for option in sorted(set(plan.dropped)):
        state.note(line, f"pip {option}", "dropped: it changes nothing a lock installs")
    for name in plan.frozen:
        state.list_unmapped(
            line,
            f"ARG {name} in pip install",
            f"locked at the value of {name} here: --build-arg {name} no longer changes what this "
            f"layer installs (import again with --build-arg {name}=… for another)",
        )


def public_url(url: str, line: int, state: State) -> str:
    """``url`` without credentials (noted: they belong in a BuildKit secret)."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        state.note(line, "index credentials", "dropped: pass them as a BuildKit secret")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _declare(url: str, state: State) -> str:
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
