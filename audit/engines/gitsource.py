"""Project files at a git commit, read straight from the object store (no checkout).

The gate compares two refs, so it reads recipes, requirements, base snapshots and locks at
each through this :class:`audit.plan.sources.Source`. A ref is resolved once, up front, to a commit
(``git rev-parse --verify --end-of-options REF^{commit}``), so a branch name full of shell
characters is only ever an argument, never code, and later reads all see one commit.

Reads are batched: one ``git ls-tree`` lists the whole commit, and the first read under a
top-level folder (``images/``, ``locks/``) fetches every blob below it with one
``git cat-file --batch``. Programs run through :func:`audit.engines.process.run`, which decodes
output as text; every blob is checked against its object id after decoding, so bytes come back
exactly as committed or the read fails with an error naming the file, never silently altered.

:func:`gate_refs` is the gate command's one call: both refs read this way, compared by
:func:`audit.plan.gate.gate`.
"""

from __future__ import annotations

import errno
import hashlib
import locale
import secrets
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from pathlib import Path, PurePosixPath

from audit.core.errors import GitError
from audit.core.redact import public_source_url
from audit.engines import process as commands
from audit.plan.gate import GateResult, gate_result

# Blobs larger than this are left out of folder prefetches and read only when asked for.
PREFETCH_LIMIT = 8 * 1024 * 1024
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
    """Read-only project files at ``ref`` in the git repository at ``repo``."""

    def __init__(self, repo: Path, ref: str) -> None:
        self.repo = repo
        self.ref = ref
        self.commit = resolve_commit(repo, ref)
        self._entries = _list_tree(repo, self.commit)
        self._children = _children(self._entries)
        self._blobs: dict[str, bytes] = {}
        self._prefetched: set[str] = set()

    def read_bytes(self, relpath: str) -> bytes:
        path = _normal(relpath)
        entry = self._entries.get(path)
        if entry is None:
            raise FileNotFoundError(errno.ENOENT, "no such file at this ref", self.describe(path))
        self._check_readable(path, entry)
        if entry.oid not in self._blobs:
            self._prefetch_folder(path)
        if entry.oid not in self._blobs:
            self._blobs[entry.oid] = self._read_one(path, entry)
        return self._blobs[entry.oid]

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

    def _prefetch_folder(self, path: str) -> None:
        """Fetch every small blob under ``path``'s top-level folder in one process."""
        top = path.partition("/")[0] if "/" in path else ""
        if not top or top in self._prefetched:
            return
        self._prefetched.add(top)
        wanted = [
            entry
            for name, entry in self._entries.items()
            if name.startswith(top + "/") and _prefetchable(entry) and entry.oid not in self._blobs
        ]
        self._blobs.update(_read_batch(self.repo, wanted))

    def _read_one(self, path: str, entry: TreeEntry) -> bytes:
        try:
            text = _git(self.repo, "cat-file", "blob", entry.oid).stdout
        except UnicodeDecodeError as exc:
            raise GitError(f"{self.describe(path)}: is not UTF-8 text", UTF8_HINT) from exc
        data = _restore(text, entry.oid)
        if data is None:
            raise GitError(
                f"{self.describe(path)}: cannot be read exactly (stray carriage returns?)",
                "save the file with LF (or only CRLF) line ends and commit it again",
            )
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
        hint="check that git works in this repository (git status)",
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
    path = PurePosixPath(relpath).as_posix()
    return "" if path == "." else path.strip("/")


def _prefetchable(entry: TreeEntry) -> bool:
    return entry.kind == "blob" and entry.mode != SYMLINK_MODE and entry.size <= PREFETCH_LIMIT


def _read_batch(repo: Path, entries: list[TreeEntry]) -> dict[str, bytes]:
    """Object id -> bytes for every blob that decodes exactly; the rest are read one by one.

    A random token starts every header so object boundaries are found in decoded text, where
    byte sizes no longer apply; a binary file anywhere in the batch leaves the whole batch to
    the one-by-one path, which names the file if it is ever asked for.
    """
    oids = sorted({entry.oid for entry in entries})
    if not oids:
        return {}
    token = secrets.token_hex(16)
    batch_format = f"--batch={token} %(objectname) %(objecttype)"
    try:
        output = _git(repo, "cat-file", batch_format, stdin="\n".join(oids) + "\n").stdout
    except UnicodeDecodeError:
        return {}
    restored = {oid: _restore(text, oid) for oid, text in _split_batch(output, token).items()}
    return {oid: data for oid, data in restored.items() if data is not None}


def _split_batch(output: str, token: str) -> dict[str, str]:
    """Parse ``TOKEN OID TYPE\\nCONTENT\\n`` records into object id -> decoded content."""
    marker = f"{token} "
    if not output.startswith(marker) or not output.endswith("\n"):
        raise GitError(f"git cat-file --batch: unexpected output {output[:80]!r}")
    contents: dict[str, str] = {}
    for record in output[len(marker) : -1].split(f"\n{marker}"):
        header, _, content = record.partition("\n")
        oid, _, kind = header.partition(" ")
        if kind != "blob":
            raise GitError(f"git cat-file --batch: {header!r} is not a blob")
        contents[oid] = content
    return contents


def _restore(text: str, oid: str) -> bytes | None:
    """The committed bytes behind ``text`` (decoded, newline-translated), if recoverable.

    Text decoding turns CRLF into LF; an all-CRLF file is recovered by putting them back. The
    object id proves the result: anything else (a lone CR, mixed ends) returns None.
    """
    encoding = "utf-8" if sys.flags.utf8_mode else locale.getencoding()
    for candidate in (text, text.replace("\n", "\r\n")):
        data = candidate.encode(encoding)
        if _blob_id(data, len(oid)) == oid:
            return data
    return None


def _blob_id(data: bytes, hex_length: int) -> str:
    """The git object id of a blob holding ``data`` (SHA-1, or SHA-256 repositories)."""
    digest = hashlib.sha256() if hex_length == 64 else hashlib.sha1()  # noqa: S324 - git's id
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def gate_refs(
    repo: Path,
    base_ref: str,
    head_ref: str,
    *,
    today: date,
    strict_waivers: bool = False,
    strict: bool = False,
) -> GateResult:
    """The dependency gate between two refs of ``repo``, read straight from git (no checkout):
    its report and every image's stage matrices."""
    base = GitSource(repo, base_ref)
    head = GitSource(repo, head_ref)
    title = f"dependency gate: {_label(base)} → {_label(head)}"
    return gate_result(
        base, head, today=today, title=title, strict_waivers=strict_waivers, strict=strict
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
