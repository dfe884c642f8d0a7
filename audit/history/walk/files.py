"""Images given as files: a ``docker save`` tarball, an OCI layout (a tarball or a folder).

A tarball on disk is first indexed (its headers only: :func:`tar_index` seeks past every
member's data), its documents read by offset, and then only the layers whose deltas are not
known yet are read, each once, front to back: a second walk of a tarball reads a few
kilobytes. A stream that cannot seek (a pipe) is read once through
:class:`~audit.history.walk.archive.ArchiveReader`. A layout folder is read by name:
``index.json``, then the manifest and config blobs it points at, then the layers not known yet.
Nothing is extracted. Layer names are only ever ``blobs/sha256/<64 hex>``
(checked by :func:`~audit.history.walk.layout.descriptor`), so nothing outside the folder is
opened.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from audit.errors import BadInput, ImageFormatError
from audit.history.walk.archive import ArchiveError, ArchiveReader, ArchiveResult, NeedsRescan
from audit.history.walk.blobs import LayerBlob
from audit.history.walk.layout import (
    JSON_LIMIT,
    Incomplete,
    LayoutError,
    Selection,
    missing_text,
    select_image,
)
from audit.history.walk.source import Fetched, Known, SourceSettings, pair_layers
from audit.history.walk.tarstream import FILE, TarFormatError, TarMember, TarReader, read_seekable

CHUNK = 1 << 20


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def fetch_file(path: str, tag: str, settings: SourceSettings, known: Known) -> Fetched:
    """The image in the tarball or layout folder at ``path``."""
    where = Path(path)
    if where.is_dir():
        return _fetch_folder(where, tag, settings, known)
    if not where.exists():
        raise BadInput(f"{path}: no such file or folder", "give the path of a docker save "
                       "tarball or an OCI layout (a folder or a tarball)")  # fmt: skip
    if where.is_file():
        return _fetch_tarball(where, tag, settings, known)
    try:  # a pipe or a device: read once, it cannot be read again
        result = _read_tarball(where, tag, settings, known, plan=True)
    except NeedsRescan:
        raise ImageFormatError(
            f"{path}: the archive changed its choice of image after the layers it needs had "
            "passed (a document such as manifest.json written twice), and a pipe cannot be "
            "read again",
            "write the archive to a file and give that file",
        ) from None
    return pair_layers(result.selection, result.blobs, known, str(path), result.size)


def tar_index(handle: BinaryIO) -> dict[str, tuple[int, int]]:
    """TarMember name -> (data offset, size) of every regular file of a seekable tarball, read
    from its headers alone; :class:`ArchiveError` when it is not a (whole) tar archive."""
    found: dict[str, tuple[int, int]] = {}
    reader = TarReader(lambda m: _note(found, reader, m))
    try:
        read_seekable(handle, reader)
    except TarFormatError as exc:
        raise ArchiveError(f"not an image archive: {exc}") from None
    end = handle.seek(0, 2)
    if reader.offset > end or any(at + size > end for at, size in found.values()):
        raise ArchiveError(f"the archive ends inside a member after {end} bytes (truncated)")
    return found


def _note(found: dict[str, tuple[int, int]], reader: TarReader, member: TarMember) -> None:
    if member.kind == FILE:
        found[member.name.removeprefix("./")] = (reader.data_offset, member.size)


def _fetch_tarball(path: Path, tag: str, settings: SourceSettings, known: Known) -> Fetched:
    with settings.errors(str(path)), path.open("rb") as handle:
        index = tar_index(handle)
        size = 0

        def read(name: str) -> bytes | None:
            nonlocal size
            at, length = index.get(name, (0, JSON_LIMIT + 1))
            if length > JSON_LIMIT:
                return None
            handle.seek(at)
            size += length
            return handle.read(length)

        try:
            selection = select_image(read, tag, settings.platform, settings.host)
        except Incomplete as missing:
            raise ArchiveError(missing_text(missing, "archive")) from None
        blobs: dict[str, LayerBlob] = {}
        for (name, _), diff_id in zip(selection.layers, settings.diff_ids(selection), strict=True):
            if name not in blobs and not known.has(diff_id):
                blobs[name] = _read_member(handle, index, name, settings)
                size += blobs[name].size
    return pair_layers(selection, blobs, known, str(path), size)


def _read_member(
    handle: BinaryIO, index: dict[str, tuple[int, int]], name: str, settings: SourceSettings
) -> LayerBlob:
    if name not in index:
        raise LayoutError(f"{name} is named by the manifest but not in the archive")
    at, length = index[name]
    handle.seek(at)
    blob = LayerBlob(True, settings.elf_reader, settings.families)
    while length:
        data = handle.read(min(CHUNK, length))
        if not data:
            raise ArchiveError(f"{name}: the archive ends inside it (truncated)")
        blob.write(memoryview(data))
        length -= len(data)
    blob.close()
    return blob


def _read_tarball(
    path: Path, tag: str, settings: SourceSettings, known: Known, *, plan: bool
) -> ArchiveResult:
    reader = ArchiveReader(
        tag=tag, platform=settings.platform, host=settings.host, known=known.has, plan=plan,
        elf_reader=settings.elf_reader, families=settings.families,
    )  # fmt: skip
    with settings.errors(str(path)):
        for chunk in _chunks(path):
            reader.feed(chunk)
        return reader.finish()


def _fetch_folder(folder: Path, tag: str, settings: SourceSettings, known: Known) -> Fetched:
    if not any((folder / name).is_file() for name in ("index.json", "manifest.json")):
        raise ImageFormatError(
            f"{folder}: a folder with neither index.json nor manifest.json is not an OCI "
            "image layout nor an extracted docker save",
            "give an OCI layout folder (skopeo copy ... oci:DIR), an extracted docker save, "
            "or a tarball",
        )

    def read(name: str) -> bytes | None:
        target = folder / name
        try:
            if target.stat().st_size > JSON_LIMIT:
                return None
            return target.read_bytes()
        except OSError:
            return None

    with settings.errors(str(folder)):
        try:
            selection = select_image(read, tag, settings.platform, settings.host)
        except Incomplete as missing:  # a folder is whole: what is not there never comes
            raise LayoutError(missing_text(missing, "folder")) from None
        blobs, size = _read_layers(folder, selection, settings, known)
    return pair_layers(selection, blobs, known, str(folder), size)


def _read_layers(
    folder: Path, selection: Selection, settings: SourceSettings, known: Known
) -> tuple[dict[str, LayerBlob], int]:
    """Each layer blob whose delta is not known, streamed from its file."""
    diff_ids = settings.diff_ids(selection)
    blobs: dict[str, LayerBlob] = {}
    size = 0
    for (name, _), diff_id in zip(selection.layers, diff_ids, strict=True):
        if name in blobs or known.has(diff_id):
            continue
        blob = LayerBlob(True, settings.elf_reader, settings.families)
        path = folder / name
        if not path.is_file():
            raise ImageFormatError(f"{folder}: {name} is missing", "the layout is incomplete")
        for chunk in _chunks(path):
            blob.write(memoryview(chunk))
            size += len(chunk)
        blob.close()
        blobs[name] = blob
    return blobs, size


def exists(path: str) -> bool:
    return Path(path).exists()
