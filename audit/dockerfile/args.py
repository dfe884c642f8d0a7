"""``ARG`` of a Dockerfile: global ones feed FROM, a stage's become an ``arg`` layer where they
stand, and their defaults become the recipe's ``[args]``.

Invariants: a build argument keeps working as one (``--build-arg`` at render and build reaches
every ``$NAME`` of a run layer and every ENV made from it); the platform arguments are declared,
never given a value; an argument the recipe refuses (a secret, an index setting, a reserved
name) is listed with what changes; where two declarations give one name different defaults,
``[args]`` keeps one and the other is listed.
"""

from __future__ import annotations

from collections import Counter

from audit.dockerfile.state import (
    State,
    add_layer,
    q,
    referenced,
    substitute,
    unquote,
    variables,
)
from audit.recipe.build_args import ARG_REFERENCE, arg_name_problem
from audit.recipe.located_toml import UNSAFE_TEXT
from audit.recipe.model import PLATFORM_ARGS
from audit.redact import redact

NOTE_ONLY = ("BUILDKIT_INLINE_CACHE",)  # changes the image's cache metadata, not its files


def global_arg(value: str, line: int, state: State) -> None:
    """``ARG NAME[=default]`` before the first FROM: its default, resolved for FROM."""
    for name, default in _declarations(value):
        text = unquote(default) if default is not None else None
        state.global_text[name] = text
        state.global_args[name] = substitute(text, _globals(state)) if text is not None else None


def _globals(state: State) -> dict[str, str]:
    return {name: text for name, text in state.global_args.items() if text is not None}


def _declarations(value: str) -> list[tuple[str, str | None]]:
    """``A B=1 C="x y"`` as (name, default text or None)."""
    found: list[tuple[str, str | None]] = []
    for word in _words(value):
        name, equals, default = word.partition("=")
        found.append((name.strip(), default if equals else None))
    return found


def _words(value: str) -> list[str]:
    words, current, quote = [], "", ""
    for char in value.strip():
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char.isspace():
            if current:
                words.append(current)
            current = ""
            continue
        current += char
    return [*words, current] if current else words


def stage_arg(value: str, line: int, state: State) -> None:
    """``ARG NAME[=default]`` in a stage: declared by an arg layer here (in scope for what
    follows, as in Docker); its value, resolved where it can be, serves COPY and WORKDIR."""
    names: list[str] = []
    for name, default in _declarations(value):
        text = unquote(default) if default is not None else None
        text = state.overrides.get(name, text)
        effective = substitute(text, variables(state)) if text is not None else None
        if effective is None:
            effective = state.global_args.get(name)
        if name in PLATFORM_ARGS:
            state.scope.args[name] = None  # BuildKit's, per platform: never a value here
            names.append(name)
            continue
        state.scope.args[name] = effective
        if _refused(name, line, state):
            continue
        written = text if text is not None else state.global_text.get(name)
        state.declared.setdefault(name, []).append((state.stage.name, written, line))
        names.append(name)
    if names:
        rows = q(names[0]) if len(names) == 1 else "[" + ", ".join(q(n) for n in names) + "]"
        add_layer(state, line, f"arg = {rows}")


def declarable(name: str) -> bool:
    """Whether an arg layer may declare ``name``: a refused one (listed where the Dockerfile
    declared it) stays undeclared wherever the recipe declares a stage's ARGs again."""
    return name in PLATFORM_ARGS or (name not in NOTE_ONLY and not arg_name_problem(name))


def _refused(name: str, line: int, state: State) -> bool:
    """Whether the recipe cannot declare ``name`` (listed with what changes)."""
    if name in NOTE_ONLY:
        state.note(line, f"ARG {name}", "dropped: it changes BuildKit's cache metadata only")
        return True
    problem = arg_name_problem(name)
    if not problem:
        return False
    state.list_unmapped(
        line,
        f"ARG {name}",
        f"{problem}; the recipe leaves it undeclared, so a layer reading ${name} sees it unset "
        "and --build-arg cannot set it",
    )
    return True


def args_table(state: State) -> list[str]:
    """``[args]`` rows (``NAME = "default"``) from every declaration; conflicts listed."""
    rows: list[str] = []
    kept: list[str] = []
    for name, declarations in state.declared.items():
        defaults = [text for _, text, _ in declarations]
        given = [text for text in defaults if text is not None]
        if not given:
            continue
        chosen = Counter(given).most_common(1)[0][0]
        _list_conflicts(name, chosen, declarations, state)
        line = next(line for _, text, line in declarations if text == chosen)
        text = _default_text(chosen, kept, state, line)
        if text is None:
            continue
        rows.append(f"{name} = {q(text)}")
        kept.append(name)
    return rows


def _list_conflicts(
    name: str, chosen: str, declarations: list[tuple[str, str | None, int]], state: State
) -> None:
    for stage, text, line in declarations:
        if text != chosen:
            state.list_unmapped(
                line,
                f"ARG {name}" + (f"={text}" if text is not None else ""),
                f"the recipe has one default per argument ({name} = {chosen!r}): in {stage} it "
                f"was {'unset' if text is None else repr(text)}",
            )


def _default_text(text: str, kept: list[str], state: State, line: int) -> str | None:
    """A default the recipe may hold: its ``$`` references name arguments above it; others
    are resolved here (None when one cannot be, or it holds a credential: listed)."""
    if redact(text) != text:
        state.list_unmapped(line, "ARG default", "holds a credential: dropped (use a secret)")
        return None
    names = referenced(text)
    if names <= set(kept) and "$" not in ARG_REFERENCE.sub("", text):
        return None if UNSAFE_TEXT.search(text) else text
    resolved = substitute(text, {**_globals(state), **state.scope.envs})
    if "$" in resolved or UNSAFE_TEXT.search(resolved):
        state.list_unmapped(line, f"ARG default {text}", "a default a recipe cannot hold: dropped")
        return None
    return resolved
