"""``ENV``, ``COPY``, ``ADD`` (and ``COPY <<EOF``) of a Dockerfile as env and copy layers:
variables substituted where Docker substitutes them, ``--chmod``/``--chown`` kept, relative
destinations placed under the WORKDIR, context paths checked.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import PurePosixPath

from audit.dockerfile.heredoc import Heredoc
from audit.dockerfile.state import (
    State,
    Unmapped,
    add_layer,
    keep,
    q,
    substitute,
    variables,
)
from audit.recipe.build_args import SECRET_NAME
from audit.recipe.parse import (
    CONTAINER_PATH,
    ENV_NAME,
    ENV_REFERENCE,
    FILE_MODE,
    OWNER,
    PIP_SOURCE_ENV,
)
from audit.redact import redact

RESERVED_DIRS = ("requirements", "templates", "image.toml", "locks", "heredocs", "context")
ARCHIVE = re.compile(r"\.(tar|tgz|tbz2?|txz|tzst|gz|bz2|xz|zst|lz4)$", re.IGNORECASE)


# --- ENV, COPY, ADD ------------------------------------------------------------------------


def env(value: str, line: int, state: State) -> None:
    """``ENV A=1 B="x y"`` (or the legacy ``ENV A value``) as one env layer; variables the
    import knows (ARGs, earlier ENVs) are substituted, others (the base image's ``$PATH``)
    are left to Docker with ``expand = true``."""
    try:
        words = shlex.split(value)
    except ValueError:
        keep(line, f"ENV {value}", "ENV that does not parse", state)
        return
    known = variables(state)
    pairs = _without_secrets([(n, substitute(t, known)) for n, t in _env_pairs(words)], line, state)
    problem = _env_problem(pairs)
    if problem:
        keep(line, f"ENV {value}", problem, state)
        return
    expand = any("$" in text for _, text in pairs)
    for name, text in pairs:
        state.envs.pop(name, None)
        if "$" not in text:
            state.envs[name] = text
    body = ", ".join(f"{name} = {q(text)}" for name, text in pairs)
    add_layer(state, line, f"env = {{ {body} }}" + ("\nexpand = true" if expand else ""))


def _without_secrets(
    pairs: list[tuple[str, str]], line: int, state: State
) -> list[tuple[str, str]]:
    """The pairs a recipe may hold; secret-looking ones beside them are listed (by name only)
    and left out, so ``ENV HF_TOKEN=… HF_HOME=/models`` still sets HF_HOME."""
    secret = [name for name, _ in pairs if SECRET_NAME.search(name) or name in PIP_SOURCE_ENV]
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


def copy_heredoc(kind: str, value: str, line: int, state: State, heredocs: list[Heredoc]) -> None:
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
        keep(line, f"{kind} {value}", reason, state)
        return
    stage = state.stages[-1]
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
    """``COPY [--chmod] [--chown] src… dest`` from the build context: one copy layer per source,
    a relative destination placed under the WORKDIR the Dockerfile set."""
    try:
        text = substitute(value, variables(state))
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
        keep(line, f"{kind} {value}", reason, state)
        return
    for source in sources:
        relative = PurePosixPath(source).as_posix().strip("/") or "."
        top = relative.split("/")[0]
        target = "context" if relative == "." else relative
        target = f"context/{relative}" if top in RESERVED_DIRS else target
        state.copies[target] = relative
        toml = f"copy = {{ src = {q(target)}, dest = {q(dest)}{options} }}"
        add_layer(state, line, toml)


def _copy_flags(flags: list[str], line: int, state: State) -> tuple[str, str]:
    """(the copy table's extra keys, '') or ('', why a flag has no recipe key)."""
    options = ""
    for flag in flags:
        name, _, setting = flag.partition("=")
        if name == "--chmod" and FILE_MODE.fullmatch(setting):
            options += f", mode = {q(setting)}"
        elif name == "--chown" and OWNER.fullmatch(setting):
            options += f", owner = {q(setting)}"
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


def _copy_dest(dest: str, state: State) -> str:
    """An absolute destination: relative ones under the WORKDIR the Dockerfile set ('' when
    it set none: the base image's is not known here)."""
    if dest.startswith("/"):
        return dest
    if not state.workdir:
        return ""
    joined = str(PurePosixPath(state.workdir) / dest)
    return joined + "/" if dest.endswith("/") or dest in (".", "./") else joined


def _copy_problem(sources: list[str], dest: str, text: str, state: State) -> str:
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
            return f"{source} is not in the build context (missing, or left out by .dockerignore)"
    return ""
