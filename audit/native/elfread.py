"""ELF facts read with pyelftools: from a path, or from a stream that cannot seek.

HOST side (pyelftools). Both readers decode the same way, as the dynamic loader reads a file:
the ELF header, the program headers, the dynamic segment (PT_DYNAMIC), and through its tags
the dynamic string table, the dynamic symbols (counted with DT_GNU_HASH or DT_HASH), the symbol
versions (DT_VERSYM), the versions needed (DT_VERNEED) and defined (DT_VERDEF). Section
headers are never read: a stripped section table changes nothing, and in a stream they come
last. pyelftools parses every structure (headers, tags, symbols, version records, hash
tables); this module only walks them.

:func:`read_path` reads a file where it lies, only the bytes the decoding asks for.

:func:`read_stream` reads a non-seekable stream of known size (a member of an image layer's
tar) in ONE forward pass, in memory bounded by ``cap`` whatever the file's size (cuDNN's
engines library is hundreds of MB). It keeps only the byte ranges the decoding needs, known
before they pass by: the ELF header, the program headers, the first PT_LOAD segment's file
range (``.dynsym``, ``.dynstr``, ``.gnu.hash``, ``.gnu.version*`` lie there in every layout
GNU ld, gold and lld produce: read-only data before the code) up to half of ``cap``, the
PT_DYNAMIC range, and, once the dynamic tags are read, the later PT_LOAD segments that hold a
table they point at (``patchelf``, which NVIDIA's cuDNN wheels went through, moves
``.dynstr`` and ``.dynsym`` to a segment it appends at the end of the file). Anything the
decoding then asks for outside those ranges, or a plan over the cap, gives
``Unreadable(..., invalid=False)``: this reader could not tell, the loader might map the file.
It reads up to the end of the last range it keeps; the caller skips the rest.

Outcomes are never exceptions: a file that is not ELF, is cut short or is damaged gives an
:class:`~audit.native.elf.Unreadable` whose reason names the file and what is wrong; a wrong
architecture is a valid :class:`~audit.native.elf.ElfFacts` whose ``machine`` says so.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from elftools.common.exceptions import ELFError, ELFParseError
from elftools.common.utils import parse_cstring_from_stream, struct_parse
from elftools.elf.elffile import ELFFile
from elftools.elf.hash import ELFHashTable, GNUHashTable

from audit.native.catalog import family_of
from audit.native.elf import (
    UNVERSIONED,
    ElfFacts,
    NeededVersion,
    Unreadable,
    VersionDefinition,
    VersionNeed,
    sorted_unique,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from audit.native.elf import FileFacts

DEFAULT_CAP = 64 << 20  # bytes one streamed file may keep in memory
_MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_386": "i386", "EM_ARM": "arm",
             "EM_RISCV": "riscv64", "EM_PPC64": "ppc64"}  # fmt: skip
_SKIP_CHUNK = 1 << 20
DF_1_NODEFLIB = 0x800
VER_FLG_BASE, VER_FLG_WEAK = 0x1, 0x2
BASE_INDEX = -1  # where the base definition's name is kept (no symbol has this index)
_INDEX = 0x7FFF  # the version index bits of a .gnu.version entry (0x8000: hidden)
SHN_UNDEF, STB_WEAK = 0, 2


@dataclass(frozen=True)
class Trim:
    """What of a file's symbols to keep: the imports from the DT_NEEDED files ``imports_from``
    accepts (None: every file) and the defined symbols when ``defines`` (the version names
    always). Symbols left out are never decoded: a big library costs its kept symbols only."""

    imports_from: Callable[[str], bool] | None = None
    defines: bool = True


class Uncaptured(Exception):
    """The decoding asked for bytes a streamed read did not keep (or could not keep)."""


# ----------------------------------------------------------------------------- decoding


def program_headers(elf: ELFFile, stream: IO[bytes]) -> list[Any]:
    """Every program header, parsed by pyelftools (no section header is read)."""
    header = elf.header
    return [
        struct_parse(elf.structs.Elf_Phdr, stream, header["e_phoff"] + i * header["e_phentsize"])
        for i in range(header["e_phnum"])
    ]


class _Decoder:
    """One file's dynamic facts, read through the dynamic tags of PT_DYNAMIC."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.elf = ELFFile(stream)
        self.structs = self.elf.structs
        self.loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz) of PT_LOAD
        self.dynamic: tuple[int, int] | None = None  # (offset, filesz) of PT_DYNAMIC
        for header in program_headers(self.elf, stream):
            if header["p_type"] == "PT_LOAD":
                self.loads.append((header["p_vaddr"], header["p_offset"], header["p_filesz"]))
            elif header["p_type"] == "PT_DYNAMIC":
                self.dynamic = (header["p_offset"], header["p_filesz"])
        self.tags = self._tags()
        self._strings: bytes | None = None  # the dynamic string table, once read

    def _tags(self) -> list[tuple[str, int]]:
        if self.dynamic is None:
            return []
        offset, size = self.dynamic
        step = self.structs.Elf_Dyn.sizeof()
        found = []
        for at in range(offset, offset + size - step + 1, step):
            tag = struct_parse(self.structs.Elf_Dyn, self.stream, at)
            if tag["d_tag"] == "DT_NULL":
                break
            found.append((str(tag["d_tag"]), int(tag["d_val"])))
        return found

    def first(self, name: str) -> int | None:
        return next((value for tag, value in self.tags if tag == name), None)

    def offset(self, address: int) -> int:
        for vaddr, offset, filesz in self.loads:
            if vaddr <= address < vaddr + filesz:
                return address - vaddr + offset
        raise ELFError(f"address {address:#x} lies in no PT_LOAD segment")

    def string(self, index: int) -> str:
        """The dynamic string at ``index``: from the whole table, read once (DT_STRSZ), else
        from the stream where the table's size is not given."""
        table = self.first("DT_STRTAB")
        if table is None:
            raise ELFError("a dynamic string is named but there is no DT_STRTAB")
        if self._strings is None:
            size = self.first("DT_STRSZ")
            self._strings = self._read(self.offset(table), size) if size else b""
        if index < len(self._strings):
            end = self._strings.find(b"\0", index)
            raw = self._strings[index : end if end >= 0 else len(self._strings)]
        else:
            raw = parse_cstring_from_stream(self.stream, self.offset(table) + index) or b""
        return raw.decode("utf-8", "replace")

    def strings(self, name: str) -> list[str]:
        return [self.string(value) for tag, value in self.tags if tag == name]

    def optional_string(self, name: str) -> str | None:
        value = self.first(name)
        return None if value is None else self.string(value)

    def facts(self, trim: Trim | None = None) -> ElfFacts:
        header = self.elf.header
        machine = _MACHINES.get(str(header["e_machine"]), str(header["e_machine"]))
        flags_1 = self.first("DT_FLAGS_1") or 0
        imports, defines = self.versions(trim or Trim())
        return ElfFacts(
            machine=machine, bits=self.elf.elfclass, soname=self.optional_string("DT_SONAME") or "",
            needed=tuple(self.strings("DT_NEEDED")), rpath=self.optional_string("DT_RPATH"),
            runpath=self.optional_string("DT_RUNPATH"), imports=imports, defines=defines,
            nodeflib=bool(flags_1 & DF_1_NODEFLIB),
        )  # fmt: skip

    # ------------------------------------------------------------------ versions

    def versions(self, trim: Trim) -> tuple[tuple[VersionNeed, ...], tuple[VersionDefinition, ...]]:
        """The versions needed (from the files ``trim`` keeps) with the symbols bound to each,
        and the versions defined (their symbols only when ``trim.defines``)."""
        needed = self.version_needs()  # index -> (file, version, weak)
        if trim.imports_from is not None:
            needed = {i: need for i, need in needed.items() if trim.imports_from(need[0])}
        defined = self.version_definitions()  # index -> name
        imported: dict[int, list[str]] = {index: [] for index in needed}
        exported: dict[str, list[str]] = {name: [] for name in defined.values()}
        wanted = set(needed)
        if trim.defines and defined:
            wanted |= {1, *defined}
        for name, undefined, weak, index in self.versioned_symbols(wanted):
            if undefined:
                if index in imported and not weak:
                    imported[index].append(name)
            elif index == 1 or index in defined:  # a hidden definition binds a reference too
                exported.setdefault(UNVERSIONED if index == 1 else defined[index], []).append(name)
        return _needs(needed, imported), tuple(
            VersionDefinition(name, sorted_unique(symbols))
            for name, symbols in sorted(exported.items())
        )

    def version_needs(self) -> dict[int, tuple[str, str, bool]]:
        start, count = self.first("DT_VERNEED"), self.first("DT_VERNEEDNUM") or 0
        found: dict[int, tuple[str, str, bool]] = {}
        at = self.offset(start) if start is not None else 0
        for _ in range(count if start is not None else 0):
            need = struct_parse(self.structs.Elf_Verneed, self.stream, at)
            file, aux = self.string(need["vn_file"]), at + need["vn_aux"]
            for _ in range(need["vn_cnt"]):
                entry = struct_parse(self.structs.Elf_Vernaux, self.stream, aux)
                weak = bool(entry["vna_flags"] & VER_FLG_WEAK)
                found[entry["vna_other"] & _INDEX] = (file, self.string(entry["vna_name"]), weak)
                aux += entry["vna_next"]
            at += need["vn_next"]
        return found

    def version_definitions(self) -> dict[int, str]:
        """index -> version name. The base definition (the file's own name, index 1) is kept
        under its name for the version-node check (glibc's ``match_symbol`` accepts it), while
        symbols at index 1 count as unversioned (``check_match``)."""
        start, count = self.first("DT_VERDEF"), self.first("DT_VERDEFNUM") or 0
        found: dict[int, str] = {}
        at = self.offset(start) if start is not None else 0
        for _ in range(count if start is not None else 0):
            entry = struct_parse(self.structs.Elf_Verdef, self.stream, at)
            aux = struct_parse(self.structs.Elf_Verdaux, self.stream, at + entry["vd_aux"])
            name = self.string(aux["vda_name"])
            found[BASE_INDEX if entry["vd_flags"] & VER_FLG_BASE else entry["vd_ndx"] & _INDEX] = (
                name
            )
            at += entry["vd_next"]
        return found

    def versioned_symbols(self, wanted: set[int]) -> list[tuple[str, bool, bool, int]]:
        """(name, undefined, weak, version index) of every dynamic symbol whose version index
        is in ``wanted``. The table is read in one piece and its entries unpacked with the
        layout of pyelftools' ``Elf_Sym`` (a parse per symbol costs 30 µs: 1 s for LLVM)."""
        table, versym = self.first("DT_SYMTAB"), self.first("DT_VERSYM")
        if table is None or versym is None or not wanted:
            return []
        count = self.symbol_count()
        order = "<" if self.elf.little_endian else ">"
        indexes = struct.unpack(f"{order}{count}H", self._read(self.offset(versym), 2 * count))
        size = self.structs.Elf_Sym.sizeof()
        raw = self._read(self.offset(table), size * count)
        layout = f"{order}IBBH" if self.elf.elfclass == 64 else f"{order}I8xBBH"
        found = []
        for number, value in enumerate(indexes):
            index = value & _INDEX
            if number and index in wanted:
                name, info, _, shndx = struct.unpack_from(layout, raw, number * size)
                found.append((self.string(name), shndx == SHN_UNDEF, info >> 4 == STB_WEAK, index))
        return found

    def _read(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` (a sparse stream answers a range at a time)."""
        self.stream.seek(offset)
        parts, left = [], size
        while left > 0:
            chunk = self.stream.read(left)
            if not chunk:
                raise ELFParseError(f"a table at byte {offset} is cut short")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def symbol_count(self) -> int:
        gnu, plain = self.first("DT_GNU_HASH"), self.first("DT_HASH")
        if gnu is not None:
            return GNUHashTable(self.elf, self.offset(gnu), None).get_number_of_symbols()  # type: ignore[arg-type]
        if plain is not None:
            return ELFHashTable(self.elf, self.offset(plain), None, None).get_number_of_symbols()  # type: ignore[arg-type]
        return 0


def _needs(
    needed: dict[int, tuple[str, str, bool]], imported: dict[int, list[str]]
) -> tuple[VersionNeed, ...]:
    files: dict[str, list[NeededVersion]] = {}
    for index, (file, name, weak) in needed.items():
        files.setdefault(file, []).append(
            NeededVersion(name, weak, sorted_unique(imported.get(index, [])))
        )
    return tuple(
        VersionNeed(file, tuple(sorted(versions, key=lambda v: v.name)))
        for file, versions in sorted(files.items())
    )


def _elf_error(name: str, error: ELFError) -> str:
    if "Magic number" in str(error):
        return f"{name}: not an ELF file (no \\x7fELF magic)"
    return f"{name}: damaged ELF file ({error})"


def _decode(stream: IO[bytes], name: str, trim: Trim | None = None) -> FileFacts:
    """The facts of one file, or why not, in words that name the file."""
    try:
        return _Decoder(stream).facts(trim)
    except Exception as error:  # a damaged file is an outcome, never a traceback
        missed = getattr(stream, "missed", "")
        if isinstance(error, Uncaptured) or missed:
            return Unreadable(f"{name}: {missed or error}", invalid=False)
        return _damaged(name, error)


def _damaged(name: str, error: Exception) -> Unreadable:
    if isinstance(error, ELFParseError):
        return Unreadable(f"{name}: cut short or damaged ELF file ({error})")
    if isinstance(error, ELFError):
        return Unreadable(_elf_error(name, error))
    return Unreadable(f"{name}: damaged ELF file ({type(error).__name__}: {error})")


def read_path(path: str | Path, trim: Trim | None = None) -> FileFacts:
    """The facts of the file at ``path``; an :class:`Unreadable` naming it when it cannot be
    opened (``invalid=False``) or is no usable ELF file."""
    try:
        with Path(path).open("rb") as handle:
            return _decode(handle, str(path), trim)
    except OSError as error:
        return Unreadable(f"{path}: cannot be read ({error.strerror or error})", invalid=False)


# ----------------------------------------------------------------------------- streams


class _Sparse(io.RawIOBase):
    """A read-only, seekable view of the byte ranges a streamed read kept. A read that starts
    in a kept range returns what that range holds (short at its end, as a file at its end:
    pyelftools reads strings in 64-byte chunks); one that starts elsewhere raises
    :class:`Uncaptured`."""

    def __init__(self, ranges: list[tuple[int, bytearray]], size: int) -> None:
        super().__init__()
        self.ranges, self.size, self.position = ranges, size, 0
        self.missed = ""  # why a read failed (pyelftools' construct rewraps the exception)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def read(self, size: int = -1) -> bytes:
        end = self.size if size < 0 else min(self.size, self.position + size)
        if end <= self.position:
            return b""
        for start, data in self.ranges:
            if start <= self.position < start + len(data):
                chunk = bytes(data[self.position - start : end - start])  # short at its end
                self.position += len(chunk)
                return chunk
        self.missed = (
            f"needs bytes {self.position}..{end}, outside what a streamed read keeps "
            "(the ELF and program headers, the first PT_LOAD segment, PT_DYNAMIC, the segments "
            "of the tables it names)"
        )
        raise Uncaptured(self.missed)


class _Capture:
    """Reads a stream forward once, keeping the ranges asked for, within ``cap`` bytes."""

    def __init__(self, stream: IO[bytes], size: int, cap: int) -> None:
        self.stream, self.size, self.cap = stream, size, cap
        self.position = 0
        self.ranges: list[tuple[int, bytearray]] = []

    def kept(self) -> int:
        return sum(len(data) for _, data in self.ranges)

    def take(self, start: int, length: int) -> None:
        end = min(start + length, self.size)
        if end <= start:
            return
        covered = max(start, min(end, self.position))  # what passed by is kept or lost:
        if end <= self.position:  # the decoding says so if it needs it
            return
        if self.kept() + (end - covered) > self.cap:
            raise Uncaptured(f"keeping bytes {covered}..{end} would pass the cap of {self.cap}")
        self._skip(covered - self.position)
        self._read_into(self._range_at(covered), end - covered)
        if self.position < end:
            raise ELFParseError(f"the stream ended at byte {self.position} of {self.size}")

    def _range_at(self, start: int) -> bytearray:
        """The kept range that continues at ``start`` (a new one when none does)."""
        if self.ranges and self.ranges[-1][0] + len(self.ranges[-1][1]) == start:
            return self.ranges[-1][1]
        self.ranges.append((start, bytearray()))
        return self.ranges[-1][1]

    def _skip(self, count: int) -> None:
        skip = getattr(self.stream, "skip", None)
        if skip is not None and count > 0:
            skipped = int(skip(count))
            self.position += skipped
            if skipped < count:
                raise ELFParseError(f"the stream ended at byte {self.position} of {self.size}")
            return
        while count > 0:
            chunk = self.stream.read(min(count, _SKIP_CHUNK))
            if not chunk:
                raise ELFParseError(f"the stream ended at byte {self.position} of {self.size}")
            count -= len(chunk)
            self.position += len(chunk)

    def _read_into(self, target: bytearray, count: int) -> None:
        """Append up to ``count`` bytes to ``target`` piece by piece: a big range grows in
        place (glibc remaps it), never held twice."""
        left = count
        while left > 0:
            chunk = self.stream.read(min(left, _SKIP_CHUNK))
            if not chunk:
                return
            target += chunk
            left -= len(chunk)
            self.position += len(chunk)


def _sparse(capture: _Capture) -> IO[bytes]:
    """The bytes kept so far, as the seekable file pyelftools reads."""
    return cast("IO[bytes]", _Sparse(capture.ranges, capture.size))


_TABLES = ("DT_STRTAB", "DT_SYMTAB", "DT_GNU_HASH", "DT_HASH", "DT_VERSYM", "DT_VERNEED",
           "DT_VERDEF")  # fmt: skip


def _plan(capture: _Capture) -> None:
    """Take the header, the program headers, then in file order the first PT_LOAD range (up to
    half the cap: the rest stays for tables found later) and the PT_DYNAMIC range; once
    PT_DYNAMIC is in, also the rest of every later PT_LOAD segment that holds a table its tags
    point at (``patchelf`` moves ``.dynstr`` and ``.dynsym`` to a segment it appends after
    PT_DYNAMIC: NVIDIA's cuDNN wheels are so built)."""
    capture.take(0, 64)
    elf = ELFFile(_sparse(capture))
    header = elf.header
    capture.take(0, header["e_phoff"] + header["e_phentsize"] * header["e_phnum"])
    headers = program_headers(elf, _sparse(capture))
    loads = sorted((h["p_offset"], h["p_filesz"]) for h in headers if h["p_type"] == "PT_LOAD")
    dynamic = [(h["p_offset"], h["p_filesz"]) for h in headers if h["p_type"] == "PT_DYNAMIC"]
    first = [(loads[0][0], min(loads[0][1], _room(capture, dynamic) // 2))] if loads else []
    pending = sorted(
        dynamic + first + _before_dynamic(loads, dynamic, _room(capture, dynamic) // 4)
    )
    while pending:
        offset, size = pending.pop(0)
        capture.take(offset, size)
        if (offset, size) in dynamic:
            pending = sorted(pending + _table_ranges(capture))


def _before_dynamic(
    loads: list[tuple[int, int]], dynamic: list[tuple[int, int]], room: int
) -> list[tuple[int, int]]:
    """The part of PT_DYNAMIC's own PT_LOAD segment before it, up to ``room`` bytes: where
    ``patchelf`` writes ``.dynstr`` when it moves ``.dynamic`` too (cuSPARSELt's wheel)."""
    found = []
    for offset, _ in dynamic:
        for start, size in loads[1:]:
            if start <= offset < start + size:
                found.append((max(start, offset - room), offset - max(start, offset - room)))
    return found


def _room(capture: _Capture, reserved: list[tuple[int, int]]) -> int:
    return max(0, capture.cap - capture.kept() - sum(size for _, size in reserved))


_STRING_TAGS = ("DT_NEEDED", "DT_SONAME", "DT_RPATH", "DT_RUNPATH")


def _table_ranges(capture: _Capture) -> list[tuple[int, int]]:
    """(offset, size) from each dynamic table still ahead of the stream to the end of the
    PT_LOAD segment that holds it."""
    decoder = _Decoder(_sparse(capture))
    ends: dict[int, int] = {}
    strings = decoder.first("DT_STRTAB")
    addresses = [decoder.first(name) for name in _TABLES]
    if strings is not None:  # a string patchelf appended may lie past the table's own segment
        addresses += [strings + v for tag, v in decoder.tags if tag in _STRING_TAGS]
    for address in addresses:
        for vaddr, offset, filesz in decoder.loads if address is not None else ():
            if vaddr <= address < vaddr + filesz:  # type: ignore[operator]
                start = address - vaddr + offset  # type: ignore[operator]
                if start >= capture.position:
                    ends[offset + filesz] = min(start, ends.get(offset + filesz, start))
    return [(start, end - start) for end, start in sorted(ends.items())]


def read_stream(
    stream: IO[bytes],
    size: int,
    name: str,
    *,
    cap: int = DEFAULT_CAP,
    kept: list[int] | None = None,
    trim: Trim | None = None,
) -> FileFacts:
    """The facts of a file read from a forward-only ``stream`` of ``size`` bytes, keeping at
    most ``cap`` bytes (``kept`` gets how many it kept); never raises for what the bytes are.
    A stream with a ``skip(count)`` method is asked to skip what is not kept (the walk's
    stream then drops those bytes unread, see :mod:`audit.history.walk.layer`)."""
    capture = _Capture(stream, size, cap)
    try:
        _plan(capture)
        if kept is not None:
            kept.append(capture.kept())
    except Uncaptured as gap:
        return Unreadable(f"{name}: {gap}", invalid=False)
    except ELFParseError as error:
        return Unreadable(f"{name}: cut short or damaged ELF file ({error})")
    except ELFError as error:
        return Unreadable(_elf_error(name, error))
    except OSError as error:
        return Unreadable(f"{name}: the stream failed ({error})", invalid=False)
    return _decode(_sparse(capture), name, trim)


def _in_family(name: str) -> bool:
    return family_of(name) is not None


def layer_facts(path: str, stream: IO[bytes], size: int) -> dict[str, Any]:
    """The layer walk's ELF hook (:data:`audit.history.walk.layer.ElfReader`): the facts of the
    member at ``path`` as JSON, read as it streams past with :func:`read_stream` (memory
    bounded by :data:`DEFAULT_CAP`, whatever the file's size). What the loader model needs and
    no more: the versions and symbols imported from CUDA-family libraries, the symbols defined
    by a CUDA-family library (a requester such as ``libtorch_cuda.so`` keeps none: its 100,000
    symbols are never decoded)."""
    trim = Trim(imports_from=_in_family, defines=_in_family(path))
    return read_stream(stream, size, path, trim=trim).to_json()
