"""Images given as files: a ``docker save`` tarball, an OCI layout (a tarball or a folder).

A tarball is read once, front to back, in chunks (:data:`CHUNK`), through
:class:`~audit.history.walk.archive.ArchiveReader`; nothing is extracted. A layout folder is
read by name: ``index.json``, then the manifest and config blobs it points at, then only the
layers whose deltas are not known yet. Layer names are only ever ``blobs/sha256/<64 hex>``
(checked by :func:`~audit.history.walk.layout.descriptor`), so nothing outside the folder is
opened.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from audit.errors import BadInput, ImageFormatError
from audit.history.walk.archive import ArchiveReader, ArchiveResult, NeedsRescan
from audit.history.walk.blobs import LayerBlob
from audit.history.walk.layout import JSON_LIMIT, Selection, select_image
from audit.history.walk.source import Fetched, Known, SourceSettings, pair_layers

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
    if not where.is_file():
        raise BadInput(f"{path}: not a regular file", "give a tarball or a layout folder")
    try:
        result = _read_tarball(where, tag, settings, known, plan=True)
    except NeedsRescan:
        result = _read_tarball(where, tag, settings, known, plan=False)
    return pair_layers(result.selection, result.blobs, known, str(path), result.size)


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
    if not (folder / "index.json").is_file():
        raise ImageFormatError(
            f"{folder}: a folder without index.json is not an OCI image layout",
            "give an OCI layout folder (skopeo copy ... oci:DIR), or a tarball",
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
        selection = select_image(read, tag, settings.platform, settings.host)
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
