"""An image archive read as it streams: a ``docker save`` tarball or an OCI layout tarball.

PURE: standard library and the walk's own modules. The archive's bytes come in through
:meth:`ArchiveReader.feed` (from a file, or from the engine's export as it is produced); each
member is routed as it starts:

- small JSON documents (``manifest.json``, ``index.json``, configs, manifests) are kept;
- layers (``<id>/layer.tar``, ``*.tar(.gz)``, and ``blobs/sha256/*`` that do not start with
  ``{``) go to a :class:`~audit.history.walk.blobs.LayerBlob`: digested and scanned;
- everything else is skipped without a copy.

Order does not matter: ``docker save`` writes ``manifest.json`` last, so layers are read before
anyone knows which is which, keyed by their member name, and paired with the config's diff-ids
at the end (:meth:`ArchiveReader.finish`). When the documents that choose the image have
already passed (:func:`~audit.history.walk.layout.select_image` no longer answers
``Incomplete``), a layer the image does not use, or whose delta ``known`` says is already
known, is skipped unread (``planned``); if the final choice then needs a layer that was skipped,
:class:`NeedsRescan` tells the caller to read the archive again without planning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from audit.history.walk.blobs import LayerBlob
from audit.history.walk.config import ConfigError, parse_config
from audit.history.walk.layer import CUDA_FAMILIES, ElfReader
from audit.history.walk.layout import (
    JSON_LIMIT,
    Incomplete,
    LayoutError,
    Selection,
    missing_text,
    select_image,
)
from audit.history.walk.tarstream import FILE, Sink, TarFormatError, TarMember, TarReader

_DOCUMENTS = ("manifest.json", "index.json", "oci-layout", "repositories")
_LAYER_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", "/layer")


class ArchiveError(ValueError):
    """Not an image archive, or a damaged one (the caller names the file)."""


class NeedsRescan(Exception):
    """The archive must be read again without planning (a skipped layer turned out needed)."""


@dataclass(frozen=True)
class ArchiveResult:
    """The chosen image, and what was read of each layer member (by member name)."""

    selection: Selection
    blobs: dict[str, LayerBlob]
    skipped: frozenset[str]
    size: int


class _Keep:
    """A small member kept whole (a JSON document)."""

    def __init__(self, name: str, into: dict[str, bytes], done: Callable[[], None]) -> None:
        self._name, self._into, self._done = name, into, done
        self._parts: list[bytes] = []

    def write(self, data: memoryview) -> None:
        self._parts.append(bytes(data))

    def close(self) -> None:
        self._into[self._name] = b"".join(self._parts)
        self._done()


class _Sniff:
    """A ``blobs/sha256/*`` member: a JSON document when it starts with ``{`` and is small,
    else a layer."""

    def __init__(self, reader: ArchiveReader, name: str, size: int) -> None:
        self._reader, self._name, self._size = reader, name, size
        self._target: Sink | None = None
        self._chosen = False

    def write(self, data: memoryview) -> None:
        if not self._chosen:
            self._chosen = True
            if bytes(data[:1]) == b"{" and self._size <= JSON_LIMIT:
                self._target = self._reader.keep(self._name)
            else:
                self._target = self._reader.layer(self._name)
        if self._target is not None:
            self._target.write(data)

    def close(self) -> None:
        if self._target is not None:
            self._target.close()


class ArchiveReader:
    """Feed an archive's bytes; :meth:`finish` gives the image and its layers' blobs."""

    def __init__(
        self,
        *,
        tag: str = "",
        platform: str | None = None,
        host: str = "linux/amd64",
        known: Callable[[str], bool] = lambda _: False,
        plan: bool = True,
        elf_reader: ElfReader | None = None,
        families: tuple[str, ...] = CUDA_FAMILIES,
    ) -> None:
        self._tar = TarReader(self._member)
        self._tag, self._platform, self._host = tag, platform, host
        self._known, self._planning = known, plan
        self._elf_reader, self._families = elf_reader, families
        self._documents: dict[str, bytes] = {}
        self._blobs: dict[str, LayerBlob] = {}
        self._skipped: set[str] = set()
        self._plan: dict[str, str] | None = None  # member name -> diff-id, once known
        self._open: tuple[str, LayerBlob] | None = None
        self.size = 0

    # ------------------------------------------------------------------ feeding

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self.size += len(data)
        try:
            self._tar.feed(data)
        except TarFormatError as exc:
            raise ArchiveError(f"not an image archive: {exc}") from None

    def finish(self) -> ArchiveResult:
        """The chosen image; :class:`ArchiveError`/:class:`LayoutError` when there is none,
        :class:`NeedsRescan` when planning skipped a layer it needs."""
        try:
            self._tar.finish()
        except TarFormatError as exc:
            raise ArchiveError(f"not a whole image archive: {exc}") from None
        try:
            selection = select_image(self._read, self._tag, self._platform, self._host)
        except Incomplete as missing:
            raise ArchiveError(missing_text(missing, "archive")) from None
        wanted = {name for name, _ in selection.layers}
        if any(not self._plan_skip_ok(name) for name in wanted & self._skipped):
            raise NeedsRescan
        return ArchiveResult(selection, dict(self._blobs), frozenset(self._skipped), self.size)

    def _plan_skip_ok(self, name: str) -> bool:
        plan = self._plan or {}
        return name in plan and self._known(plan[name])

    def _read(self, name: str) -> bytes | None:
        return self._documents.get(name)

    # ------------------------------------------------------------------ routing

    def _member(self, member: TarMember) -> Sink | None:
        name = member.name.removeprefix("./")
        if member.kind != FILE:
            return None
        if name in _DOCUMENTS or (name.endswith(".json") and member.size <= JSON_LIMIT):
            return self.keep(name)
        if name.startswith("blobs/"):
            return _Sniff(self, name, member.size)
        if name.endswith(_LAYER_SUFFIXES):
            return self.layer(name)
        return None

    def keep(self, name: str) -> Sink:
        return _Keep(name, self._documents, self._replan)

    def layer(self, name: str) -> Sink | None:
        """A layer member's sink, or None (skipped) when the plan says it is not needed."""
        if self._plan is not None and (name not in self._plan or self._known(self._plan[name])):
            self._skipped.add(name)
            return None
        blob = LayerBlob(True, self._elf_reader, self._families)
        self._blobs[name] = blob
        return blob

    def _replan(self) -> None:
        """Once the documents choose the image, remember which member is which layer."""
        if not self._planning or self._plan is not None:
            return
        try:
            selection = select_image(self._read, self._tag, self._platform, self._host)
            diff_ids = parse_config(selection.config).diff_ids
        except (Incomplete, LayoutError, ConfigError):
            return  # not yet (or never: finish() says why)
        if len(diff_ids) == len(selection.layers):
            self._plan = {name: diff_ids[i] for i, (name, _) in enumerate(selection.layers)}
