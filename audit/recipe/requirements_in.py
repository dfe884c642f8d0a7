"""Read a recipe's ``requirements/*.in`` files: PEP 508 lines, includes, declared index options.

Every line goes through ``packaging``; anything pip would accept but a hermetic, reviewable lock
must not (undeclared indexes, editables, environment variables, per-line options) is refused
with ``<file>:<line>: problem`` and a hint. Paths are project-relative POSIX paths read through a
:class:`audit.project.sources.Source`, so the gate reads the same files at a git ref.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from audit.errors import ProjectFileError, RecipeError
from audit.lock.format import logical_lines
from audit.project.memo import Kind
from audit.project.sources import Source
from audit.redact import redact

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
ALIASES = {"-r": "--requirement", "-c": "--constraint", "-i": "--index-url", "-f": "--find-links"}
INDEX_OPTIONS = ("--index-url", "--extra-index-url", "--find-links")
INCLUDE_OPTIONS = ("--requirement", "--constraint")
OPTION_HINTS = {
    "--pre": "set pre = true on the pip layer in image.toml instead",
    "--editable": "editable installs cannot be locked: use a 'name @ https://…' requirement",
    "-e": "editable installs cannot be locked: use a 'name @ https://…' requirement",
    "--hash": "hashes belong in the lock (the lock command writes them), not in the .in file",
}
DECLARE_HINT = (
    "declare the index under [indexes] in image.toml and name it on this pip layer with "
    'index = "<name>" (or make it the image\'s index_url)'
)


@dataclass(frozen=True)
class RequirementsFile:
    """One pip layer's requirements, with everything it includes, validated.

    ``files`` lists every file read (the layer's file first, then ``-r``/``-c`` includes), so a
    lock can digest exactly its inputs. ``index_urls``/``find_links``/``trusted_hosts`` are the
    (declared) index options the files name. Every line is validated when the file is read; the
    :class:`Requirement` objects are made on first use (most readers want only ``files``).
    """

    relpath: str
    requirement_lines: tuple[str, ...]
    constraint_lines: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        return tuple(parse_requirement(line) for line in self.requirement_lines)

    @property
    def constraints(self) -> tuple[Requirement, ...]:
        return tuple(parse_requirement(line) for line in self.constraint_lines)


def normalise_index_url(url: str) -> str:
    """Compare index URLs without caring about a trailing slash or the host's case."""
    parts = urlsplit(url.strip())
    return (
        parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower())
        .geturl()
        .rstrip("/")
    )


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an index URL (no scheme, credentials inside), or None."""
    shown = redact(url)  # the URL as quoted in the message: never its credentials
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return f"not a URL: {shown!r} ({redact(str(exc))})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"not an http(s) URL: {shown!r}"
    if "@" in parts.netloc:
        return "index URL carries credentials (user:password@): use a BuildKit secret"
    if re.search(r"\s", url) or CONTROL.search(url):
        return f"URL contains whitespace or control characters: {shown!r}"
    return None


def parse_requirement(line: str) -> Requirement:
    """``Requirement(line)``."""
    return Requirement(line)


# The plainest requirement line: a name, then release-only versions behind comparison operators
# (``torch>=2.9,<2.10``). Every such line is valid PEP 508, so it is checked without parsing.
_PLAIN_SPEC = r"(?:(?:==|!=|<=|>=|<|>)[0-9]+(?:\.[0-9]+)*|~=[0-9]+(?:\.[0-9]+)+)"
_PLAIN_LINE = re.compile(
    rf"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?:{_PLAIN_SPEC}(?:,{_PLAIN_SPEC})*)?"
)


# Files without includes, validated, by their text and the declared indexes, in the command's
# memo: without it callgrind counts 19 % more instructions for benchmarks/bench_gate.py's
# 40-image gate.
VALIDATED: Kind[tuple[str, tuple[str, ...]], RequirementsFile] = Kind("requirements files", 512)


def parse_requirements(
    source: Source, relpath: str, *, allowed_index_urls: Collection[str], origin: str = ""
) -> RequirementsFile:
    """Read and validate ``relpath`` and its includes; raise RecipeError on the first bad line.

    ``origin`` (``images/x/image.toml: stage[2].layer[1].pip``) is added to every error's hint,
    so the user sees which layer asked for the file. A file that includes nothing is validated
    once per ``source.memo`` for its bytes and the declared indexes, wherever it lies: a run
    reads each layer's file several times (recipe validation, every lock look, the gate's two
    refs), and a fleet's images ask for the same lines in files of their own. Errors are never
    remembered: a bad file fails every time; a file's path matters to its includes only.
    """
    reader = _Reader(source, _containment(relpath), allowed_index_urls, origin)
    text = reader.decoded(relpath)
    key = (text, tuple(allowed_index_urls))
    known = source.memo.table(VALIDATED).get(key)
    if known is not None:  # these very bytes passed every check below before
        return (
            known if known.relpath == relpath else replace(known, relpath=relpath, files=(relpath,))
        )
    reader.check_lines(relpath, text)
    reader.read(relpath, constraint=False, stack=(), text=text)
    parsed = reader.result(relpath)
    if parsed.files == (relpath,):
        source.memo.table(VALIDATED).made(key, lambda: parsed)
    return parsed


def _containment(relpath: str) -> str:
    """The folder includes must stay in: the recipe's ``requirements/`` folder."""
    parts = relpath.split("/")
    if len(parts) > 3 and parts[0] == "images" and parts[2] == "requirements":
        return "/".join(parts[:3])
    return posixpath.dirname(relpath)


@dataclass
class _Reader:
    """Accumulates the requirements of one file tree; one instance per parse."""

    source: Source
    folder: str
    allowed_index_urls: Collection[str]
    origin: str
    # name -> line, where (formatted only for the error that names it)
    requirements: dict[str, tuple[str, _Where]] = field(default_factory=dict)
    constraints: dict[str, tuple[str, _Where]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    trusted_hosts: list[str] = field(default_factory=list)

    def result(self, relpath: str) -> RequirementsFile:
        return RequirementsFile(
            relpath=relpath,
            requirement_lines=tuple(line for line, _ in self.requirements.values()),
            constraint_lines=tuple(line for line, _ in self.constraints.values()),
            files=tuple(self.files),
            index_urls=tuple(dict.fromkeys(self.index_urls)),
            find_links=tuple(dict.fromkeys(self.find_links)),
            trusted_hosts=tuple(dict.fromkeys(self.trusted_hosts)),
        )

    def read(
        self, relpath: str, *, constraint: bool, stack: tuple[str, ...], text: str | None = None
    ) -> None:
        if relpath in self.files:
            return  # included twice (a diamond, not a cycle): its lines count once
        self.files.append(relpath)
        described = self.source.describe(relpath)
        for number, line in logical_lines(self.text(relpath) if text is None else text):
            if line:
                where = _Where(described, number, self.origin)
                self._line(where, line, constraint, (*stack, relpath))

    def text(self, relpath: str) -> str:
        """The file's text; a missing, unreadable or non-UTF-8 file, or a control character in
        a line, is RecipeError."""
        text = self.decoded(relpath)
        self.check_lines(relpath, text)
        return text

    def decoded(self, relpath: str) -> str:
        """The file's text, lines not checked; missing, unreadable or not UTF-8: RecipeError."""
        start = _Where(self.source.describe(relpath), 0, self.origin)
        try:
            text = self.source.read_bytes(relpath).decode("utf-8")
        except FileNotFoundError:
            raise start.error("requirements file not found", "create it or fix the path") from None
        except ProjectFileError as exc:
            raise start.error(exc.problem, exc.hint) from exc
        except UnicodeDecodeError as exc:
            raise start.error(f"not UTF-8 text ({exc.reason})", "save it as UTF-8") from exc
        except OSError as exc:  # a directory or an unreadable file where a file should be
            raise start.error(f"cannot read ({exc.strerror})", "make it a plain file") from exc
        return text

    def check_lines(self, relpath: str, text: str) -> None:
        """RecipeError naming the first line that holds a control character."""
        if not CONTROL.search(text.replace("\n", "").replace("\r", "")):
            return  # the common case: one scan of the whole text
        for number, raw in enumerate(text.splitlines(), start=1):
            if CONTROL.search(raw):
                raise _Where(self.source.describe(relpath), number, self.origin).error(
                    "control character in line", "remove it: requirement lines are plain text"
                )

    def _line(self, where: _Where, line: str, constraint: bool, stack: tuple[str, ...]) -> None:
        if "${" in line:
            raise where.error(
                "environment variables are not expanded in recipes",
                "write the value out: a lock must not depend on the environment",
            )
        if line.startswith("-"):
            self._option(where, line, constraint, stack)
        else:
            self._requirement(where, line, constraint)

    def _requirement(self, where: _Where, line: str, constraint: bool) -> None:
        plain = _PLAIN_LINE.fullmatch(line)
        written = plain["name"] if plain else self._parsed(where, line).name
        seen = self.constraints if constraint else self.requirements
        name = _canonical(written)
        if name in seen:
            raise where.error(
                f"{written!r} is already listed at {seen[name][1]} "
                "(names that differ only in case, '-', '_' or '.' are one package)",
                "merge the two lines into one requirement",
            )
        seen[name] = (line, where)

    def _parsed(self, where: _Where, line: str) -> Requirement:
        """A line that is not plain, through packaging: valid PEP 508, no credentials."""
        try:
            requirement = parse_requirement(line)
        except InvalidRequirement as exc:
            raise where.error(
                f"not a PEP 508 requirement: {line!r} ({str(exc).splitlines()[0]})",
                "write one requirement per line, e.g. 'requests>=2.31' or 'name @ https://…'",
            ) from exc
        if requirement.url and "@" in urlsplit(requirement.url).netloc:
            raise where.error("requirement URL carries credentials", "use a BuildKit secret")
        return requirement

    def _option(self, where: _Where, line: str, constraint: bool, stack: tuple[str, ...]) -> None:
        name, value = _split_option(where, line)
        if name in INCLUDE_OPTIONS:
            self._include(where, value, constraint or name == "--constraint", stack)
        elif name in INDEX_OPTIONS:
            self._index_option(where, name, value)
        elif name == "--trusted-host":
            self._trusted_host(where, value)
        else:
            raise where.error(
                f"option {name} is not allowed in a recipe requirements file",
                OPTION_HINTS.get(name, "allowed: -r/-c includes and declared index options"),
            )

    def _include(self, where: _Where, value: str, constraint: bool, stack: tuple[str, ...]) -> None:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(stack[-1]), value))
        if value.startswith("/") or not target.startswith(self.folder + "/"):
            raise where.error(
                f"include {value!r} is outside {self.folder}/",
                "keep included files beside the layer's requirements file",
            )
        if target in stack:
            cycle = " -> ".join((*stack[stack.index(target) :], target))
            raise where.error(f"include cycle: {cycle}", "remove one of the -r/-c lines")
        if not self.source.exists(target):
            raise where.error(f"included file not found: {target}", "create it or fix the path")
        self.read(target, constraint=constraint, stack=stack)

    def _index_option(self, where: _Where, name: str, url: str) -> None:
        problem = url_problem(url)
        if problem:
            raise where.error(
                f"{name}: {problem}",
                "index credentials reach pip as BuildKit secrets only (see the README)",
            )
        allowed = {normalise_index_url(u) for u in self.allowed_index_urls}
        if normalise_index_url(url) not in allowed:
            raise where.error(f"{name} {redact(url)} is not declared for this layer", DECLARE_HINT)
        found = self.find_links if name == "--find-links" else self.index_urls
        found.append(url)

    def _trusted_host(self, where: _Where, host: str) -> None:
        hosts = {urlsplit(u).netloc.lower() for u in self.allowed_index_urls}
        hosts |= {urlsplit(u).hostname or "" for u in self.allowed_index_urls}
        if host.lower() not in hosts:
            raise where.error(
                f"--trusted-host {host} is not the host of a declared index", DECLARE_HINT
            )
        self.trusted_hosts.append(host)


def _canonical(name: str) -> str:
    """PEP 503 ``name``."""
    return canonicalize_name(name)


@dataclass(frozen=True)
class _Where:
    """A line of a requirements file (0: the whole file) and the layer that reads it."""

    file: str
    line: int
    origin: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def error(self, problem: str, hint: str) -> RecipeError:
        layer = f" (read for {self.origin})" if self.origin else ""
        return RecipeError(str(self), problem, hint + layer)


def _split_option(where: _Where, line: str) -> tuple[str, str]:
    """``("--index-url", "https://…")`` from ``-i URL``, ``--index-url=URL``, ``-rfile.in``…"""
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        raise where.error(f"cannot split option line: {exc}", "check its quotes") from exc
    first = tokens[0]
    if first.startswith("--"):
        name, _, attached = first.partition("=")
    else:
        name, attached = first[:2], first[2:]
    name = ALIASES.get(name, name)
    values = [attached] if attached else []
    values += tokens[1:]
    if name in (*INCLUDE_OPTIONS, *INDEX_OPTIONS, "--trusted-host") and len(values) != 1:
        raise where.error(
            f"option {name} takes exactly one value, got {len(values)}", "write one option per line"
        )
    return name, values[0] if values else ""
