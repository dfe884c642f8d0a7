"""``ENV``, ``COPY``, ``ADD`` (and ``COPY <<EOF``) of a Dockerfile as env and copy layers.

ENV values are kept as written: a ``$NAME`` in them (an ARG of the stage, an earlier ENV, the
base image's ``PATH``) is expanded by Docker at build time (``expand = true``), so a build
argument given at build still reaches them. COPY and ADD paths are resolved here (the recipe
holds plain paths); one that takes an ARG's value is listed as fixed at that value. ``COPY
--from`` of a stage or an image is a copy layer with ``from``; ``--chmod``/``--chown`` are
kept, relative destinations placed under the WORKDIR, context paths checked.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import PurePosixPath

from audit.dockerfile.heredoc import Heredoc
from audit.dockerfile.run import recipe_path
from audit.dockerfile.state import (
    State,
    add_layer,
    from_args,
    keep,
    q,
    referenced,
    substitute,
    variables,
)
from audit.recipe.build_args import SECRET_NAME
from audit.recipe.mounts import IMAGE_SOURCE
from audit.recipe.parse import (
    CONTAINER_PATH,
    ENV_NAME,
    ENV_REFERENCE,
    FILE_MODE,
    FROM_PATH,
    OWNER,
    PIP_SOURCE_ENV,
)
from audit.redact import redact

ARCHIVE = re.compile(r"\.(tar|tgz|tbz2?|txz|tzst|gz|bz2|xz|zst|lz4)$", re.IGNORECASE)
# ENV settings that tell pip or uv where to look: pip layers after them use the same index
PRIMARY_ENV = ("PIP_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX")
EXTRA_ENV = ("PIP_EXTRA_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX")


# --- ENV -----------------------------------------------------------------------------------


def env(value: str, line: int, state: State) -> None:
    """``ENV A=1 B="x y"`` (or the legacy ``ENV A value``) as one env layer, values as
    written (``expand = true`` when one names a variable)."""
    try:
        words = shlex.split(value)
    except ValueError:
        keep(line, f"ENV {value}", "ENV that does not parse", state)
        return
    pairs = _without_secrets(_env_pairs(words), line, state)
    problem = _env_problem(pairs)
    if problem:
        keep(line, f"ENV {value}", problem, state)
        return
    _remember(pairs, state)
    expand = any("$" in text for _, text in pairs)
    body = ", ".join(f"{name} = {q(text)}" for name, text in pairs)
    add_layer(state, line, f"env = {{ {body} }}" + ("\nexpand = true" if expand else ""))


def _remember(pairs: list[tuple[str, str]], state: State) -> None:
    """What each ENV is at import (when known), whether an ARG made it, and the index
    settings pip layers after it follow."""
    known = variables(state)
    for name, text in pairs:
        resolved = substitute(text, known)
        state.scope.envs.pop(name, None)
        state.scope.tainted.discard(name)
        if "$" not in resolved:
            state.scope.envs[name] = resolved
        if from_args(text, state):
            state.scope.tainted.add(name)
        _index_setting(name, resolved, state)


def _index_setting(name: str, value: str, state: State) -> None:
    if name in PRIMARY_ENV and value and "$" not in value:
        state.scope.index_env["primary"] = value
    elif name in EXTRA_ENV and value and "$" not in value and len(value.split()) == 1:
        state.scope.index_env["extra"] = value


def _without_secrets(
    pairs: list[tuple[str, str]], line: int, state: State
) -> list[tuple[str, str]]:
    """The pairs a recipe may hold; secret-looking ones beside them are listed (by name only)
    and left out, so ``ENV HF_TOKEN=… HF_HOME=/models`` still sets HF_HOME. An index setting
    pip layers follow is remembered before it is left out."""
    secret = [name for name, _ in pairs if SECRET_NAME.search(name) or name in PIP_SOURCE_ENV]
    for name, text in pairs:
        if name in PIP_SOURCE_ENV:
            _index_setting(name, substitute(text, variables(state)), state)
    if not secret or len(secret) == len(pairs):
        return pairs
    reason = f"{', '.join(secret)}: a secret or an index setting (pass it as a BuildKit secret)"
    keep(line, f"ENV {' '.join(secret)}", reason, state)
    return [(name, text) for name, text in pairs if name not in secret]


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


# --- COPY and ADD --------------------------------------------------------------------------


def copy_heredoc(kind: str, value: str, line: int, state: State, heredocs: list[Heredoc]) -> None:
    """``COPY <<EOF /dest`` (a file written from the Dockerfile): the body becomes a file of
    the recipe and a copy layer (variables expanded unless the delimiter is quoted)."""
    doc = heredocs[0]
    words = value.replace(doc.mark, "", 1).split()
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    options, origin, reason = _copy_flags(flags, line, state)
    dest = _copy_dest(paths[0], state) if len(paths) == 1 else ""
    if len(heredocs) != 1 or not doc.closed or not dest or reason or origin or dest.endswith("/"):
        reason = reason or f"{kind} of several heredocs, or to a folder or unknown destination"
        keep(line, f"{kind} {value}", reason, state)
        return
    _list_frozen(line, f"{kind} <<{doc.name}", "" if doc.quoted else doc.body, state)
    stage = state.stage
    relpath = f"heredocs/{stage.name}-{len(stage.layers) + 1:02d}"
    body = doc.body if doc.quoted else substitute(doc.body, variables(state))
    state.files[relpath] = redact(body).encode()
    add_layer(state, line, f"copy = {{ src = {q(relpath)}, dest = {q(dest)}{options} }}")


def add(value: str, line: int, state: State) -> None:
    """``ADD`` of a plain context file is a COPY; of a URL or an archive (which ADD unpacks)
    it has no recipe equivalent."""
    words = value.split()
    sources = [w for w in words[:-1] if not w.startswith("--")]
    if any(re.match(r"[a-z+]+://|git@", w) for w in sources):
        reason = "ADD from a URL: download the file into the build context and COPY it"
        keep(line, f"ADD {value}", reason, state)
    elif any(ARCHIVE.search(w) for w in sources):
        reason = "ADD of an archive, which Docker unpacks (a copy layer would not)"
        keep(line, f"ADD {value}", reason, state)
    else:
        copy(value, line, state, "ADD")


def copy(value: str, line: int, state: State, kind: str = "COPY") -> None:
    """``COPY [--from] [--chmod] [--chown] src… dest``: one copy layer per source, a relative
    destination placed under the WORKDIR the Dockerfile set."""
    try:
        text = substitute(value, variables(state))
        words = json.loads(text) if text.lstrip().startswith("[") else shlex.split(text)
    except ValueError:
        words = []
    words = [w for w in words if isinstance(w, str)]
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    options, origin, reason = _copy_flags(flags, line, state)
    dest = _copy_dest(paths[-1], state) if len(paths) >= 2 else ""
    sources = paths[:-1]
    check = _from_problem if origin else _copy_problem
    reason = reason or check(sources, dest, text if words else "", state)
    if reason:
        keep(line, f"{kind} {value}", reason, state)
        return
    _list_frozen(line, f"{kind} {value}", value, state)
    for source in sources:
        if origin:
            toml = f"copy = {{ from = {q(origin)}, src = {q(source)}, dest = {q(dest)}{options} }}"
        else:
            toml = _context_copy(source, dest, options, state)
        add_layer(state, line, toml)


def _context_copy(source: str, dest: str, options: str, state: State) -> str:
    relative = PurePosixPath(source).as_posix().strip("/") or "."
    target = recipe_path(relative)
    state.copies[target] = relative
    # a folder's contents land in dest, a file in dest/<name> when dest ends in /: both noted
    state.scope.files[dest.rstrip("/") or "/"] = relative
    if dest.endswith("/") and relative != ".":
        state.scope.files[dest + PurePosixPath(relative).name] = relative
    return f"copy = {{ src = {q(target)}, dest = {q(dest)}{options} }}"


def _list_frozen(line: int, instruction: str, text: str, state: State) -> None:
    names = from_args(text, state)
    if names:
        state.list_unmapped(
            line,
            instruction,
            f"takes the value of {', '.join(names)} here (a recipe path is plain): "
            f"--build-arg {names[0]} no longer changes it",
        )


def _copy_flags(flags: list[str], line: int, state: State) -> tuple[str, str, str]:
    """(the copy table's extra keys, ``from`` as the recipe names it, '') or ('', '', why a
    flag has no recipe key)."""
    options, origin = "", ""
    for flag in flags:
        name, _, setting = flag.partition("=")
        if name == "--chmod" and FILE_MODE.fullmatch(setting):
            options += f", mode = {q(setting)}"
        elif name == "--chown" and OWNER.fullmatch(setting):
            options += f", owner = {q(setting)}"
        elif name == "--link":
            state.note(line, flag, "dropped: it changes caching, not contents")
        elif name == "--from":
            origin = state.aliases.get(setting, setting)
            if origin == setting and not IMAGE_SOURCE.fullmatch(setting):
                return "", "", f"{flag}: neither a stage before it nor an image reference"
        else:
            return "", "", f"{flag} has no recipe key (copy layers take --from, --chmod, --chown)"
    return options, origin, ""


def _copy_dest(dest: str, state: State) -> str:
    """An absolute destination: relative ones under the WORKDIR the Dockerfile set ('' when
    it set none: the base image's is not known here)."""
    if dest.startswith("/"):
        return dest
    if not state.scope.workdir:
        return ""
    joined = str(PurePosixPath(state.scope.workdir) / dest)
    return joined + "/" if dest.endswith("/") or dest in (".", "./") else joined


def _dest_problem(sources: list[str], dest: str, text: str) -> str:
    checks = (
        (not text or not sources, "COPY without a source and a destination"),
        (not dest, "COPY to a relative destination before any WORKDIR (the base's is unknown)"),
        (
            not CONTAINER_PATH.fullmatch(dest.rstrip("/") or "/") or "$" in text,
            "COPY with spaces or variables in a path the import cannot resolve",
        ),
        (len(sources) > 1 and not dest.endswith("/"), "several sources need a folder ending in /"),
    )
    return next((reason for failed, reason in checks if failed), "")


def _from_problem(sources: list[str], dest: str, text: str, state: State) -> str:
    """Why a ``COPY --from`` is not copy layers ('' when it is)."""
    found = _dest_problem(sources, dest, text)
    bad = [s for s in sources if not FROM_PATH.fullmatch(s)]
    return found or (f"COPY --from source {bad[0]!r} with spaces or quotes" if bad else "")


def _copy_problem(sources: list[str], dest: str, text: str, state: State) -> str:
    """Why these context sources and destination are not copy layers ('' when they are)."""
    found = _dest_problem(sources, dest, text)
    if found:
        return found
    for source in sources:
        posix = PurePosixPath(source)
        if posix.is_absolute() or ".." in posix.parts or any(c in source for c in "*?["):
            return f"COPY source {source} is outside the build context, or a wildcard"
        if not state.context_has(posix.as_posix()):
            return f"{source} is not in the build context (missing, or left out by .dockerignore)"
    return ""


def names_in(text: str) -> set[str]:
    """The variables ``text`` names (for callers that list frozen ARGs)."""
    return referenced(text)
