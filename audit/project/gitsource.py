"""Project files at a git commit, read straight from the object store (no checkout).

The gate compares two refs, so it reads recipes, requirements, base snapshots and locks at
each through this :class:`audit.project.sources.Source`. A ref is resolved once, up front, to a
commit (``git rev-parse --verify --end-of-options REF^{commit}``), so a branch name full of shell
characters is only ever an argument, never code, and later reads all see one commit.

Reads are batched and streamed: one ``git ls-tree`` lists the whole commit, and one
``git cat-file --batch`` per ref (:class:`audit.host.process.Pipe`, bytes exactly as
committed) answers every read; the first read in a folder fetches all of that folder's small
files in one exchange. What was fetched is kept within a byte budget, oldest folder first out,
so a gate over hundreds of images holds a few images' files at a time, not two whole commits.

:func:`gate_refs` is the gate command's one call: both refs read this way, compared by
:func:`audit.gate.compare.gate`.
"""

from __future__ import annotations

import errno
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from functools import cached_property
from pathlib import Path, PurePosixPath

from audit.errors import GitError
from audit.gate.compare import GateResult, gate_result
from audit.host import process as commands
from audit.project.frontdoor import FrontDoor
from audit.project.memo import Memo
from audit.redact import public_source_url

# Blobs larger than this are left out of folder prefetches and read only when asked for.
PREFETCH_LIMIT = 8 * 1024 * 1024
HOLD_BYTES = 32 * 1024 * 1024  # fetched blobs kept for re-reads, oldest folder dropped first
BATCH_CHUNK = 256  # object ids per write: the requests always fit in the pipe to git
GIT_HINT = "check that git works in this repository (git status)"
SYMLINK_MODE = "120000"
FETCH_HINT = (
    "fetch it first (e.g. git fetch origin main) or check the name; "
    "in GitHub Actions use actions/checkout with fetch-depth: 0"
)
UTF8_HINT = "the gate reads recipes, requirements, snapshots and locks as UTF-8 text"


@dataclass(frozen=True)
class TreeEntry:
    """One path in a commit: ``kind`` is blob, tree or commit (a submodule)."""

    mode: str
    kind: str
    oid: str
    size: int


class GitSource:
    """Read-only project files at ``ref`` in the git repository at ``repo``.

    Invariant: every blob returned is the committed bytes (git's own object, no decoding); a
    file that is not UTF-8 text, a link, a folder or a submodule is :class:`GitError` naming
    ``REF:path``. :meth:`close` (or ``with``) ends the ``cat-file`` process; collection does too.

    ``share``: another ref of the same repository whose ``cat-file`` process, fetched blobs
    and memo this one uses too (blobs are named by content, whatever the ref): a file the pull
    request leaves alone, such as an image's base snapshot, is then read and parsed once for
    both refs. ``memo``: the command's (without ``share``; default: a new one).
    """

    def __init__(
        self, repo: Path, ref: str, share: GitSource | None = None, memo: Memo | None = None
    ) -> None:
        self.repo = repo
        self.ref = ref
        own = memo if memo is not None else Memo()
        self.memo: Memo = share.memo if share is not None else own
        self.commit = resolve_commit(repo, ref)
        self._entries = _list_tree(repo, self.commit)
        self._children = _children(self._entries)
        self._store: _Store = share._store if share is not None else _Store(repo)

    @cached_property
    def front(self) -> FrontDoor:
        """The repository's: its work tree's noxfile (the gated checkout's commands)."""
        return FrontDoor.of(self.repo)

    @property
    def _blobs(self) -> OrderedDict[str, bytes]:
        return self._store.blobs

    @property
    def _pipe(self) -> commands.Pipe | None:
        return self._store.pipe

    def __enter__(self) -> GitSource:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """End the ``git cat-file`` process (reads after this start a new one)."""
        pipe, self._store.pipe = self._store.pipe, None
        if pipe is not None:
            pipe.close()

    def read_bytes(self, relpath: str) -> bytes:
        path = _normal(relpath)
        entry = self._entries.get(path)
        if entry is None:
            raise FileNotFoundError(errno.ENOENT, "no such file at this ref", self.describe(path))
        self._check_readable(path, entry)
        data = self._blobs.get(entry.oid)
        if data is None:
            self._fetch(self._folder_mates(path, entry))
            data = self._blobs[entry.oid]
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GitError(f"{self.describe(path)}: is not UTF-8 text", UTF8_HINT) from exc
        return data

    def exists(self, relpath: str) -> bool:
        path = _normal(relpath)
        return path == "" or path in self._entries

    def listdir(self, relpath: str) -> list[str]:
        return list(self._children.get(_normal(relpath), ()))

    def describe(self, relpath: str) -> str:
        return f"{self.ref}:{_normal(relpath)}"

    def _check_readable(self, path: str, entry: TreeEntry) -> None:
        if entry.kind == "tree":
            raise GitError(
                f"{self.describe(path)}: is a folder, not a file",
                "replace the folder with the file at that path, or fix the path that names it",
            )
        if entry.kind != "blob":
            raise GitError(f"{self.describe(path)}: is a git submodule, not a file")
        if entry.mode == SYMLINK_MODE:
            raise GitError(
                f"{self.describe(path)}: is a symbolic link",
                "commit the file itself: the gate does not follow links inside a commit",
            )

    def _folder_mates(self, path: str, entry: TreeEntry) -> list[str]:
        """``entry``'s object id and those of the other small files directly beside it."""
        parent = path.rpartition("/")[0]
        beside = (
            self._entries[f"{parent}/{name}" if parent else name]
            for name in self._children.get(parent, ())
        )
        mates = {e.oid for e in beside if _prefetchable(e) and e.oid not in self._blobs}
        return [entry.oid, *sorted(mates - {entry.oid})]

    def _fetch(self, oids: list[str]) -> None:
        self._store.fetch(oids)


class _Store:
    """One ``git cat-file --batch`` of a repository and the blobs it fetched, by object id,
    oldest first, within :data:`HOLD_BYTES` (the refs of one repository may share it)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.blobs: OrderedDict[str, bytes] = OrderedDict()
        self.held = 0  # bytes in blobs
        self.pipe: commands.Pipe | None = None

    def fetch(self, oids: list[str]) -> None:
        """Read ``oids`` through the one ``cat-file --batch`` (requests written, then answers
        read, in chunks that fit a pipe), then trim what is held to the budget."""
        if self.pipe is None:
            self.pipe = commands.Pipe(
                ["git", "-C", str(self.repo), "cat-file", "--batch"], hint=GIT_HINT
            )
        for start in range(0, len(oids), BATCH_CHUNK):
            chunk = oids[start : start + BATCH_CHUNK]
            self.pipe.ask("".join(f"{oid}\n" for oid in chunk).encode())
            for oid in chunk:
                data = _answer(self.pipe, oid)
                self.blobs[oid] = data
                self.held += len(data)
        while self.held > HOLD_BYTES and len(self.blobs) > len(oids):
            _, dropped = self.blobs.popitem(last=False)
            self.held -= len(dropped)


def _answer(pipe: commands.Pipe, oid: str) -> bytes:
    """One ``OID TYPE SIZE\\n`` header and its content; anything else is :class:`GitError`."""
    header = pipe.read_line().decode("utf-8", "replace").split()
    if len(header) != 3 or header[0] != oid or header[1] != "blob" or not header[2].isdigit():
        raise GitError(f"git cat-file --batch: unexpected answer {' '.join(header)!r} for {oid}")
    data = pipe.read_exactly(int(header[2]))
    pipe.read_exactly(1)  # the newline after the content
    return data


def resolve_commit(repo: Path, ref: str) -> str:
    """The commit id ``ref`` names in ``repo``; :class:`GitError` (exit 2) when it names none."""
    _check_ref_text(ref)
    verify = ("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    done = _git(repo, *verify, check=False)
    if done.returncode == 0:
        return done.stdout.strip()
    if "not a git repository" in done.stderr:
        raise GitError(f"{repo}: is not a git repository", "pass --repo with a git checkout")
    raise GitError(f"git ref {ref!r} does not name a commit in {repo}", FETCH_HINT)


def _check_ref_text(ref: str) -> None:
    if not ref or any(ord(char) < 32 or ord(char) == 127 for char in ref):
        raise GitError(f"git ref {ref!r}: empty or holds control characters", FETCH_HINT)


def _git(
    repo: Path, *args: str, check: bool = True, stdin: str | None = None
) -> commands.Completed:
    return commands.run(
        ["git", "-C", str(repo), *args],
        check=check,
        input_text=stdin,
        hint=GIT_HINT,
    )


def _list_tree(repo: Path, commit: str) -> dict[str, TreeEntry]:
    """Every path in ``commit``: ``ls-tree -r -t -l -z`` lines are ``MODE TYPE OID SIZE\\tPATH``."""
    try:
        listing = _git(repo, "ls-tree", "-r", "-t", "-l", "-z", "--full-tree", commit).stdout
    except UnicodeDecodeError as exc:
        raise GitError(f"{commit}: a path in this commit is not UTF-8", UTF8_HINT) from exc
    entries: dict[str, TreeEntry] = {}
    for record in listing.split("\0"):
        if record:
            meta, _, path = record.partition("\t")
            mode, kind, oid, size = meta.split()
            entries[path] = TreeEntry(mode, kind, oid, int(size) if size.isdigit() else 0)
    return entries


def _children(entries: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Folder path ("" for the root) -> the sorted names directly inside it."""
    found: dict[str, list[str]] = {}
    for path in entries:
        parent, _, name = path.rpartition("/")
        found.setdefault(parent, []).append(name)
    return {parent: tuple(sorted(names)) for parent, names in found.items()}


def _normal(relpath: str) -> str:
    """``relpath`` as the listing names it: no ``.`` parts, doubled or outer slashes."""
    if _is_plain(relpath):  # already so: the usual case, without a PurePosixPath
        return relpath
    path = PurePosixPath(relpath).as_posix()
    return "" if path == "." else path.strip("/")


def _is_plain(relpath: str) -> bool:
    """No empty part (doubled or outer slash) and no ``.`` part."""
    if not relpath or relpath == "." or "//" in relpath or "/./" in relpath:
        return False
    return not relpath.startswith(("/", "./")) and not relpath.endswith(("/", "/."))


def _prefetchable(entry: TreeEntry) -> bool:
    return entry.kind == "blob" and entry.mode != SYMLINK_MODE and entry.size <= PREFETCH_LIMIT


def gate_refs(
    repo: Path,
    base_ref: str,
    head_ref: str,
    *,
    today: date,
    strict_waivers: bool = False,
    strict: bool = False,
    head_matrices: bool = True,
    memo: Memo | None = None,
) -> GateResult:
    """The dependency gate between two refs of ``repo``, read straight from git (no checkout):
    its report and every image's stage matrices (the head ref's only with ``head_matrices``);
    both refs read through the command's ``memo``."""
    with (
        GitSource(repo, base_ref, memo=memo) as base,
        GitSource(repo, head_ref, share=base) as head,
    ):
        title = f"dependency gate: {_label(base)} → {_label(head)}"
        return gate_result(
            base,
            head,
            today=today,
            title=title,
            strict_waivers=strict_waivers,
            strict=strict,
            head_matrices=head_matrices,
        )


def _label(source: GitSource) -> str:
    return f"{source.ref} ({source.commit[:12]})"


# ----------------------------------------------------------------------------- checkout facts


def _fact(repo: Path, *args: str) -> str:
    """One line of git output, or "" when git fails (not a repository, no remote, no HEAD)."""
    done = commands.run(["git", "-C", str(repo), *args], check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def public_remote(repo: Path, remote: str = "origin") -> str:
    """``remote``'s URL as public ``https://`` without credentials, or "" (local or none).

    The raw URL (a CI clone URL carries a token) is never returned, printed or stored.
    """
    return public_source_url(_fact(repo, "config", "--get", f"remote.{remote}.url"))


def head_commit(repo: Path) -> str:
    """The commit HEAD names, or "" outside a repository or before the first commit."""
    return _fact(repo, "rev-parse", "--verify", "-q", "HEAD")


def is_dirty(repo: Path, paths: Iterable[str]) -> bool:
    """True when any file under ``paths`` differs from HEAD: modified, staged or untracked.

    Git-ignored files do not count (they are not part of the build's committed inputs).
    """
    wanted = [path for path in paths if path]
    if not wanted:
        return False
    status = "status", "--porcelain", "--untracked-files=all", "--", *wanted
    done = commands.run(["git", "-C", str(repo), *status], check=False)
    return done.returncode == 0 and bool(done.stdout.strip())
