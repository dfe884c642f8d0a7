"""A layer blob as it streams: its digest, decompressed, its diff-id, its delta.

PURE: standard library (``zstandard`` when installed). A layer arrives as a registry blob or an
OCI layout blob (gzip, zstd or a plain tar) or as a ``docker save`` ``layer.tar`` (plain). The
compression is told from the first bytes (gzip ``1f 8b``, zstd ``28 b5 2f fd``), never from a
media type alone. Invariants: :attr:`LayerBlob.digest` is the sha256 of the bytes as given,
:attr:`LayerBlob.diff_id` that of the uncompressed tar (the same value for a plain tar);
decompressed output is produced in bounded pieces (:data:`_OUT_PIECE`), so a small blob that
inflates to gigabytes never sits in memory.
"""

from __future__ import annotations

import queue
import threading
import zlib
from collections.abc import Callable
from hashlib import sha256
from typing import Any

from audit.history.walk.delta import LayerDelta
from audit.history.walk.layer import CUDA_FAMILIES, ElfReader, LayerFormatError, LayerScanner

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_OUT_PIECE = 1 << 22
_HASH_AHEAD = 16


class _BackgroundHash:
    """sha256 computed by a helper thread: hashlib lets go of the GIL while it hashes, so the
    walk parses one chunk while the last is hashed (a third of the walk's CPU on big layers).
    At most :data:`_HASH_AHEAD` chunks wait; a chunk handed over must not change afterwards
    (bytes, or a view of bytes)."""

    def __init__(self) -> None:
        self._hash = sha256()
        self._chunks: queue.Queue[memoryview | None] = queue.Queue(maxsize=_HASH_AHEAD)
        self._thread = threading.Thread(target=self._run, name="walk-hash", daemon=True)
        self._thread.start()
        self._digest = ""

    def _run(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            self._hash.update(chunk)

    def update(self, data: memoryview) -> None:
        if len(data):
            self._chunks.put(data)

    def hexdigest(self) -> str:
        if not self._digest:
            self._chunks.put(None)
            self._thread.join()
            self._digest = str(self._hash.hexdigest())
        return self._digest


class UnsupportedCompression(LayerFormatError):
    """A layer compressed in a way this Python cannot read (zstd without ``zstandard``)."""


def _zstd() -> Any:
    try:
        import zstandard  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return zstandard.ZstdDecompressor().decompressobj()


class _Gunzip:
    """gzip members one after another (a concatenated gzip is one stream), output bounded."""

    def __init__(self, out: Callable[[memoryview], None]) -> None:
        self._out = out
        self._inflate = zlib.decompressobj(wbits=31)

    def write(self, data: memoryview | bytes) -> None:
        pending: bytes | memoryview = data
        while pending:
            piece = self._inflate.decompress(pending, _OUT_PIECE)
            if piece:
                self._out(memoryview(piece))
            if self._inflate.eof:
                pending = self._inflate.unused_data
                if pending:
                    self._inflate = zlib.decompressobj(wbits=31)
            else:
                pending = self._inflate.unconsumed_tail

    def close(self) -> None:
        if not self._inflate.eof:
            try:
                tail = self._inflate.flush()
            except zlib.error as exc:
                raise LayerFormatError(f"gzip stream is damaged ({exc})") from None
            if tail:
                self._out(memoryview(tail))
            raise LayerFormatError("the gzip stream ends early (truncated layer)")


class _Unzstd:
    def __init__(self, out: Callable[[memoryview], None], engine: Any) -> None:
        self._out = out
        self._engine = engine

    def write(self, data: memoryview | bytes) -> None:
        piece = self._engine.decompress(bytes(data))
        if piece:
            self._out(memoryview(piece))

    def close(self) -> None:
        if not getattr(self._engine, "eof", True):
            raise LayerFormatError("the zstd stream ends early (truncated layer)")


class LayerBlob:
    """A sink for one layer blob. ``scan`` False: only digests are computed (a layer whose
    delta is already known). After :meth:`close`: :attr:`digest`, :attr:`diff_id`,
    :attr:`delta` (None when not scanned), :attr:`compression`.

    Threads: one hashes the blob as given; a second, the uncompressed tar, only once the blob
    turns out compressed (a plain tar's diff-id is its digest). :meth:`close` joins both, so
    no thread outlives its blob (an image of 100k layers starts and ends 100k, one at a
    time)."""

    def __init__(
        self,
        scan: bool = True,
        elf_reader: ElfReader | None = None,
        families: tuple[str, ...] = CUDA_FAMILIES,
    ) -> None:
        self._raw = _BackgroundHash()
        self._tar: _BackgroundHash | None = None  # made by _start for a compressed blob
        self._scanner = LayerScanner(elf_reader, families) if scan else None
        self._head = b""
        self._decoder: _Gunzip | _Unzstd | None = None
        self._started = False
        self.compression = ""
        self.size = 0
        self.digest = ""
        self.diff_id = ""
        self.delta: LayerDelta | None = None

    def write(self, data: memoryview) -> None:
        self.size += len(data)
        self._raw.update(data)
        if not self._started:
            self._head += bytes(data)
            if len(self._head) < 4:
                return
            self._start()
            data, self._head = memoryview(self._head), b""
        if self._decoder is not None:
            try:
                self._decoder.write(data)
            except zlib.error as exc:
                raise LayerFormatError(f"gzip stream is damaged ({exc})") from None
        else:
            self._plain(data)

    def _start(self) -> None:
        self._started = True
        if self._head.startswith(GZIP_MAGIC):
            self.compression = "gzip"
            self._tar = _BackgroundHash()
            self._decoder = _Gunzip(self._plain)
        elif self._head.startswith(ZSTD_MAGIC):
            self.compression = "zstd"
            engine = _zstd()
            if engine is None:
                raise UnsupportedCompression(
                    "a zstd-compressed layer, and this Python has no zstandard module"
                )
            self._tar = _BackgroundHash()
            self._decoder = _Unzstd(self._plain, engine)

    def _plain(self, data: memoryview) -> None:
        if self._tar is not None:
            self._tar.update(data)
        if self._scanner is not None:
            self._scanner.feed(data)

    def close(self) -> None:
        if not self._started and self._head:
            self._start()
            head, self._head = memoryview(self._head), b""
            self.write_started(head)
        if self._decoder is not None:
            self._decoder.close()
        self.digest = "sha256:" + str(self._raw.hexdigest())
        self.diff_id = self.digest if self._tar is None else "sha256:" + str(self._tar.hexdigest())
        if self._scanner is not None:
            self.delta = self._scanner.finish()

    def write_started(self, data: memoryview) -> None:
        """Bytes already hashed, passed on once the compression is known (a < 4-byte blob)."""
        if self._decoder is not None:
            self._decoder.write(data)
        else:
            self._plain(data)
