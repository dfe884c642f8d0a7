"""One member of a remote zip (a wheel's METADATA), read with HTTP range requests.

The way pip's lazy wheel and uv read metadata: one suffix request for the last
:data:`TAIL` bytes (which usually hold the end-of-central-directory record, its zip64 locator
and record, and the whole central directory), one request for the member's local header and
compressed data (none when the tail already holds it), more only for what is still missing.
The zip itself is parsed by :mod:`zipfile` over a sparse, seekable view of the remote file
(:class:`_Sparse`), so zip64, stored and deflated members and the CRC check are the standard
library's. A server that ignores ``Range`` (200 with the whole body) or refuses it (416, or a
206 without a usable ``Content-Range``) costs one whole download, counted in
``FetchStats.fallbacks``.
"""

from __future__ import annotations

import io
import re
import ssl
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

from audit.index.http import FetchStats, get, unreachable

TAIL = 64 * 1024
SLACK = 1024  # room for a local header's extra field, which may differ from the central one
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+)")


class NotAZip(ValueError):
    """The remote file is not a readable zip (truncated, corrupt), or lacks the member."""


@dataclass
class _Sparse(io.RawIOBase):
    """A seekable read-only view of ``size`` remote bytes; missing spans are fetched on read.

    Invariant: ``spans`` maps start offset -> bytes actually received for that offset;
    a read returns exactly the bytes asked for (short only at the end of the file).
    """

    size: int
    fetch: Callable[[int, int], bytes]
    spans: dict[int, bytes]
    position: int = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        start = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, start + offset)
        return self.position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        end = min(self.size, self.position + len(buffer))
        data = self.slice(self.position, end)
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)

    def slice(self, start: int, end: int) -> bytes:
        """Bytes ``start:end``, fetching each gap the spans do not cover."""
        out = bytearray()
        while start < end:
            piece = self._held(start, end)
            if not piece:
                gap_end = min((s for s in self.spans if s > start), default=end)
                piece = self.fetch(start, min(end, gap_end) - 1)
                if not piece:
                    break
                self.spans[start] = piece
                piece = piece[: end - start]
            out += piece
            start += len(piece)
        return bytes(out)

    def _held(self, start: int, end: int) -> bytes:
        for begin, data in self.spans.items():
            if begin <= start < begin + len(data):
                return data[start - begin : end - begin]
        return b""


def read_member(
    url: str,
    pick: Callable[[list[str]], str | None],
    *,
    context: ssl.SSLContext | None,
    stats: FetchStats,
) -> tuple[bytes, bytes | None]:
    """The member ``pick`` chooses from the archive's names, and the whole file's bytes when it
    had to be downloaded whole (for the caller's hash check), else None.

    Raises :class:`NotAZip` for a truncated or corrupt file or when ``pick`` finds nothing.
    """
    first = get(url, {"Range": f"bytes=-{TAIL}"}, context=context, stats=stats)
    tail = _tail(first)
    if tail is None:
        whole = _whole(url, first, context=context, stats=stats)
        return _member(_Sparse(len(whole), _no_fetch, {0: whole}), pick), whole
    size, start, data = tail
    stats.count("range_reads")
    fetch = _fetcher(url, context=context, stats=stats)
    return _member(_Sparse(size, fetch, {start: data}), pick, prefetch=True), None


def _tail(answer: object) -> tuple[int, int, bytes] | None:
    """(file size, tail start, tail bytes) of a usable 206 answer, else None."""
    status = getattr(answer, "status", 0)
    headers = getattr(answer, "headers", {})
    body: bytes = getattr(answer, "body", b"")
    found = _CONTENT_RANGE.match(headers.get("content-range", "")) if status == 206 else None
    if found is None:
        return None
    start, end, size = (int(g) for g in found.groups())
    return (size, start, body) if end - start + 1 == len(body) and end < size else None


def _whole(url: str, first: object, *, context: ssl.SSLContext | None, stats: FetchStats) -> bytes:
    """The whole file: the first answer's body when it was a plain 200, else a plain GET."""
    stats.count("fallbacks")
    if getattr(first, "status", 0) == 200:
        return bytes(getattr(first, "body", b""))
    answer = get(url, {}, context=context, stats=stats)
    if answer.status != 200:
        raise unreachable(url, f"HTTP {answer.status}")
    return answer.body


def _fetcher(
    url: str, *, context: ssl.SSLContext | None, stats: FetchStats
) -> Callable[[int, int], bytes]:
    def fetch(first: int, last: int) -> bytes:
        answer = get(url, {"Range": f"bytes={first}-{last}"}, context=context, stats=stats)
        found = _CONTENT_RANGE.match(answer.headers.get("content-range", ""))
        if answer.status != 206 or found is None or int(found.group(1)) != first:
            raise unreachable(url, f"range {first}-{last} answered HTTP {answer.status}")
        return answer.body

    return fetch


def _no_fetch(first: int, last: int) -> bytes:
    return b""


def _member(
    view: _Sparse, pick: Callable[[list[str]], str | None], prefetch: bool = False
) -> bytes:
    try:
        with zipfile.ZipFile(view) as archive:
            name = pick(archive.namelist())
            if name is None:
                raise NotAZip("no such member in the archive")
            info = archive.getinfo(name)
            if prefetch:
                _prefetch(view, info)
            return archive.read(info)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, NotAZip):
            raise
        raise NotAZip(f"not a readable zip ({exc})") from exc


def _prefetch(view: _Sparse, info: zipfile.ZipInfo) -> None:
    """One request for the member's local header and data, when the spans lack them."""
    length = 30 + len(info.filename.encode()) + len(info.extra) + info.compress_size + SLACK
    view.slice(info.header_offset, min(view.size, info.header_offset + length))
