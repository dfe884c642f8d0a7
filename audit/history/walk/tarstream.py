"""A tar archive read as it streams past: headers parsed, member data handed on in pieces.

PURE: standard library only. Nothing is extracted and nothing is seeked: bytes arrive through
:meth:`TarReader.feed` in chunks of any size (a socket read, a decompressor's output) and each
member's data goes, slice by slice, to the sink that :data:`OnMember` chose for it, or is
skipped without a copy. Python's :mod:`tarfile` in stream mode does the same work ~2-3x slower
on layers of many small files (it builds a ``TarInfo`` per member and reads data through its own
10 KiB buffer: ``benchmarks/bench_walk.py`` measures both).

Formats: POSIX ustar (``prefix`` + ``name``), GNU (``L`` long names, ``K`` long link names,
base-256 sizes), PAX (``x`` per-member ``path``/``linkpath``/``size``; ``g`` global headers
skipped). A header without the ``ustar`` magic must have a valid checksum (garbage is refused
at its first block); the content of a layer is verified as a whole by its diff-id, which a
header checksum adds nothing to.

Invariants: a member reaches ``on_member`` with its final name (long-name and PAX records
applied); its sink receives exactly ``size`` bytes, then ``close()``; a stream that ends inside
a header or a member's data, or a damaged header, raises :class:`TarFormatError` (the caller
names the archive); data after the end-of-archive block is ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

BLOCK = 512
FILE, DIRECTORY, SYMLINK, HARDLINK, OTHER = "file", "dir", "symlink", "hardlink", "other"
_KINDS = {
    b"0": FILE, b"\0": FILE, b"7": FILE, b"1": HARDLINK, b"2": SYMLINK, b"5": DIRECTORY,
    b"3": OTHER, b"4": OTHER, b"6": OTHER,
}  # fmt: skip
# As tarfile reads them: only regular files and unknown types (GNU sparse, vendor types) are
# followed by data; links, folders and devices never are, whatever their size field says.
_DATALESS = frozenset((b"1", b"2", b"5", b"3", b"4", b"6"))
_GNU_LONGNAME, _GNU_LONGLINK, _PAX, _PAX_GLOBAL = b"L", b"K", b"x", b"g"
_META_LIMIT = 1 << 20  # a long name or PAX record set larger than this is not a real archive
_POSIX_MAGIC = b"ustar\x0000"
_USTAR = b"ustar"
_LINKS = (b"1", b"2")
_ZERO_BLOCK = bytes(BLOCK)


class TarFormatError(ValueError):
    """The bytes are not a (whole) tar archive; the message says what was wrong and where."""


class Sink(Protocol):
    """Where one member's data goes: ``write`` per piece, then ``close`` once."""

    def write(self, data: memoryview) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class TarMember:
    """One archive member as its header says: ``name`` as stored (not normalised), its kind,
    data size and link target (symlinks and hard links)."""

    name: str
    kind: str
    size: int
    linkname: str


OnMember = Callable[[TarMember], Sink | None]


class _Capture:
    """A small internal sink: the data of a long-name or PAX member."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: memoryview) -> None:
        self.parts.append(bytes(data))

    def close(self) -> None:
        pass

    def value(self) -> bytes:
        return b"".join(self.parts)


def _number(field: bytes, what: str, offset: int) -> int:
    """An octal field (NUL/space padded) or GNU base-256 (high bit of the first byte set)."""
    if field[:1] and field[0] & 0x80:
        value = int.from_bytes(field[1:], "big")
        return -value if field[0] & 0x40 else value
    text = field.split(b"\0", 1)[0].strip()
    if not text:
        return 0
    try:
        return int(text, 8)
    except ValueError:
        raise TarFormatError(
            f"header at byte {offset}: {what} {text[:20]!r} is not a number"
        ) from None


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _checksum_ok(block: bytes, offset: int) -> None:
    stored = _number(block[148:156], "checksum", offset)
    unsigned = sum(block) - sum(block[148:156]) + 8 * 32
    if stored != unsigned:
        signed = sum(b - 256 if b > 127 else b for b in block) - sum(
            b - 256 if b > 127 else b for b in block[148:156]
        )
        if stored != signed + 8 * 32:
            raise TarFormatError(f"header at byte {offset}: bad checksum (not a tar archive?)")


_COMPRESSED = ((b"\x1f\x8b", "gzip", "gunzip"), (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"))


def _not_compressed(block: bytes) -> None:
    """:class:`TarFormatError` naming the compression when the first block starts with a
    gzip or zstd magic (``docker save IMAGE | gzip``): a whole compressed file is no tar."""
    for magic, kind, tool in _COMPRESSED:
        if block.startswith(magic):
            raise TarFormatError(
                f"the file is {kind}-compressed, not a tar archive: decompress it first "
                f"({tool} -k FILE)"
            )


def parse_pax(data: bytes, offset: int) -> dict[str, str]:
    """``length key=value\\n`` records of a PAX extended header."""
    found: dict[str, str] = {}
    at = 0
    while at < len(data):
        space = data.find(b" ", at)
        if space < 0:
            break
        try:
            length = int(data[at:space])
        except ValueError:
            raise TarFormatError(f"PAX header at byte {offset}: bad record length") from None
        record = data[space + 1 : at + length]
        if length <= 0 or not record.endswith(b"\n"):
            raise TarFormatError(f"PAX header at byte {offset}: bad record")
        key, _, value = record[:-1].partition(b"=")
        found[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        at += length
    return found


class TarReader:
    """Feed bytes in; members come out through ``on_member`` (see the module's invariants)."""

    def __init__(self, on_member: OnMember) -> None:
        self._on_member = on_member
        self._header = bytearray()  # a header split across two chunks
        self._sink: Sink | None = None
        self._data_left = 0  # data bytes of the current member still to come
        self._pad_left = 0  # then padding to the next block
        self._offset = 0  # bytes consumed so far (for messages)
        self._pending: dict[str, str] = {}  # long name / PAX values for the next member
        self._meta: tuple[bytes, _Capture] | None = None  # a long-name or PAX member's data
        self.ended = False
        self.members = 0
        self.data_offset = 0  # where the current member's data starts in the archive

    @property
    def offset(self) -> int:
        """Bytes of the archive read so far."""
        return self._offset

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Consume one chunk (any size, including empty)."""
        view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
        at, size = 0, len(view)
        while at < size and not self.ended:
            if self._data_left or self._pad_left:
                at = self._member_bytes(view, at, size)
            elif self._header or size - at < BLOCK:
                take = min(BLOCK - len(self._header), size - at)
                self._header += view[at : at + take]
                at += take
                if len(self._header) == BLOCK:
                    block = bytes(self._header)
                    self._header.clear()
                    self._start(block, self._offset + at - BLOCK)
            else:
                self._start(bytes(view[at : at + BLOCK]), self._offset + at)
                at += BLOCK
        self._offset += size

    def _member_bytes(self, view: memoryview, at: int, size: int) -> int:
        if self._data_left:
            take = min(self._data_left, size - at)
            if self._sink is not None:
                self._sink.write(view[at : at + take])
            self._data_left -= take
            at += take
            if not self._data_left:
                self._end_member()
        if self._pad_left and at < size:
            take = min(self._pad_left, size - at)
            self._pad_left -= take
            at += take
        return at

    def _start(self, block: bytes, offset: int) -> None:
        """A header block at archive byte ``offset``."""
        if block == _ZERO_BLOCK:
            self.ended = True
            return
        if block[257:262] != _USTAR:  # POSIX and GNU headers say so; anything else must add up
            if offset == 0:
                _not_compressed(block)
            _checksum_ok(block, offset)
        flag = block[156:157]
        size = _number(block[124:136], "size", offset)
        if flag in (_GNU_LONGNAME, _GNU_LONGLINK, _PAX, _PAX_GLOBAL):
            self._begin_meta(flag, size, offset)
            return
        name = _text(block[0:100])
        if block[257:265] == _POSIX_MAGIC and block[345]:
            name = _text(block[345:500]) + "/" + name
        linkname = _text(block[157:257]) if flag in _LINKS else ""
        pending, self._pending = self._pending, {}
        name = pending.get("path", name)
        linkname = pending.get("linkpath", linkname)
        if "size" in pending:
            size = self._pax_size(pending["size"], offset)
        kind = _KINDS.get(flag, OTHER)
        if flag in _DATALESS:
            size = 0
        self.members += 1
        self.data_offset = offset + BLOCK
        self._sink = self._on_member(TarMember(name, kind, size, linkname))
        self._open(size)

    @staticmethod
    def _pax_size(text: str, offset: int) -> int:
        try:
            return int(text)
        except ValueError:
            raise TarFormatError(f"PAX header at byte {offset}: size {text!r}") from None

    def _begin_meta(self, flag: bytes, size: int, offset: int) -> None:
        if size > _META_LIMIT or size < 0:
            raise TarFormatError(f"header at byte {offset}: a {size}-byte extended header")
        capture = _Capture()
        self._meta = (flag, capture)
        self._sink = capture
        self._open(size)

    def _open(self, size: int) -> None:
        if size < 0:
            raise TarFormatError(f"header at byte {self._offset}: negative size")
        self._data_left = size
        self._pad_left = -size % BLOCK
        if not size:
            self._end_member()

    def _end_member(self) -> None:
        sink, self._sink = self._sink, None
        if sink is not None:
            sink.close()
        if self._meta is not None:
            flag, capture = self._meta
            self._meta = None
            self._apply_meta(flag, capture.value())

    def _apply_meta(self, flag: bytes, data: bytes) -> None:
        if flag == _GNU_LONGNAME:
            self._pending["path"] = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        elif flag == _GNU_LONGLINK:
            self._pending["linkpath"] = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        elif flag == _PAX:
            records = parse_pax(data, self._offset)
            self._pending.update({k: v for k, v in records.items() if k in _PAX_KEYS})

    def skippable(self) -> int:
        """Bytes ahead that nobody reads (a member without a sink, its padding): a reader of a
        seekable file may seek past them and call :meth:`skip` instead of feeding them."""
        if self._header or self.ended or self._meta is not None:
            return 0
        if self._data_left and self._sink is not None:
            return 0
        return self._data_left + self._pad_left

    def wanted(self) -> int:
        """Bytes to read next: the rest of a header, or of a member that has a sink."""
        if self._data_left or self._pad_left:
            return self._data_left + self._pad_left
        return BLOCK - len(self._header)

    def skip(self, count: int) -> None:
        """``count`` (at most :meth:`skippable`) bytes passed over without being read."""
        data = min(count, self._data_left)
        self._data_left -= data
        self._pad_left -= count - data
        self._offset += count
        if data and not self._data_left:
            self._end_member()

    def finish(self) -> None:
        """The stream ended: raise :class:`TarFormatError` unless it ended between members."""
        if self.ended:
            return
        if self._data_left or self._header or self._meta is not None:
            raise TarFormatError(
                f"the archive ends inside a member after {self._offset} bytes (truncated)"
            )
        if self._pad_left:
            raise TarFormatError(f"the archive ends inside padding after {self._offset} bytes")
        if not self.members:
            raise TarFormatError("an empty stream: not a tar archive")
        # a stream without the end-of-archive blocks: accepted (some writers omit them)


_PAX_KEYS = ("path", "linkpath", "size")


def read_seekable(handle: BinaryIO, reader: TarReader, chunk: int = 1 << 20) -> None:
    """Feed ``reader`` from a seekable file, seeking past every byte nobody reads (a member
    without a sink): an archive's headers and chosen members are all that is read."""
    while not reader.ended:
        ahead = reader.skippable()
        if ahead:
            handle.seek(ahead, 1)
            reader.skip(ahead)
            continue
        data = handle.read(min(chunk, reader.wanted()))
        if not data:
            break
        reader.feed(data)
    reader.finish()
