"""Snapshot the Python environment of the interpreter running this script.

Standalone on purpose: standard library only, Python 3.9+, imports nothing from ``audit``, starts
no subprocess. The build guard copies it into images that have nothing but Python and runs it
after every layer, so it avoids ``importlib.metadata`` (slow) and reads only what it needs: the
header block of each METADATA/PKG-INFO (up to the first blank line), INSTALLER, and the bytes of
RECORD for the digest.

Usage: ``python3 snapshot.py [--no-system] [--libraries=libfoo,...] [--output FILE]``, or
``python3 - < snapshot.py``
(one sealed document on standard output; how a base image on another machine is snapshotted).
It also records what lies below Python (``system``: OS packages from the package database,
CUDA-family native libraries and the facts the host's loader model resolves which copy loads
with), unless ``--no-system``. The JSON
format is documented in ``audit/history/snapshot.py``, which reads and verifies it.
"""

from __future__ import annotations

import os
import sys

# Imports are a large share of this script's run time, so it avoids the heavy modules (re,
# typing, argparse, tempfile, platform, json, hashlib's OpenSSL binding) and uses the C pieces
# they are built on. Every fallback below produces the same bytes.
try:
    from _json import encode_basestring_ascii as _quote
except ImportError:  # pragma: no cover - every CPython has _json
    from json.encoder import encode_basestring_ascii as _quote
# RECORD digests are most of the bytes hashed (4 MB on a 178-distribution environment): OpenSSL's
# SHA-256 (hardware-accelerated where the CPU has it) is 20x faster there than the builtin one,
# and its import (the C module alone, not hashlib) costs less than it saves. Same digests either
# way; the builtin serves Pythons built without OpenSSL. benchmarks/bench_snapshot.py measures it.
try:
    from _hashlib import openssl_sha256 as sha256  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - depends on how Python was built
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            from hashlib import sha256

SCHEMA = "layer-audit.snapshot/2"
_METADATA_SUFFIXES = {".dist-info": "dist-info", ".egg-info": "egg-info"}
# Files whose bytes change when the same version is reinstalled from other files, best first.
_DIGEST_SOURCES = ("RECORD", "installed-files.txt")
_IMPLEMENTATIONS = {"cpython": "CPython", "pypy": "PyPy", "ironpython": "IronPython"}
_HEADER_CHUNK = 8192
_READ_CHUNK = 1 << 15  # small enough for malloc to serve without mmap


def canonical_name(name: str) -> str:
    """PEP 503: runs of ``-``, ``_`` and ``.`` become one ``-``, lower case.

    The one place we cannot use ``packaging`` (images need not have it); ``re`` costs more to
    import than this whole function costs on a big environment.
    """
    text = name.lower().replace("_", "-").replace(".", "-")
    while "--" in text:
        text = text.replace("--", "-")
    return text


def _full_version(major: int, minor: int, micro: int, level: str, serial: int) -> str:
    """``implementation_version`` as PEP 508 defines it (e.g. ``3.12.0b1``)."""
    version = "%d.%d.%d" % (major, minor, micro)
    return version if level == "final" else version + level[0] + str(serial)


def _uname() -> tuple[str, str, str, str]:
    """(system, release, version, machine) as ``platform`` reports them."""
    if hasattr(os, "uname"):
        u = os.uname()
        return u.sysname, u.release, u.version, u.machine
    import platform  # pragma: no cover - not on the Linux images this runs in

    return platform.system(), platform.release(), platform.version(), platform.machine()


# platform_machine -> the architecture (and variant) of an image platform (the host's
# audit/history/snapshot.py holds the same table)
ARCHITECTURES = {
    "x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
    "armv7l": "arm/v7", "armv6l": "arm/v6", "i386": "386", "i686": "386",
    "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64",
}  # fmt: skip


def platform_of(markers: dict[str, str]) -> str:
    """``linux/arm64`` from the markers; "" for a machine no image platform names."""
    arch = ARCHITECTURES.get(markers.get("platform_machine", ""))
    if arch is None:
        return ""
    return "%s/%s" % ((markers.get("platform_system") or "Linux").lower(), arch)


def python_version() -> str:
    return sys.version.split()[0]


def environment_markers() -> dict[str, str]:
    """The PEP 508 environment marker values of this interpreter."""
    system, release, version, machine = _uname()
    name = sys.implementation.name
    return {
        "implementation_name": name,
        "implementation_version": _full_version(*sys.implementation.version),
        "os_name": os.name,
        "platform_machine": machine,
        "platform_python_implementation": _IMPLEMENTATIONS.get(name, name),
        "platform_release": release,
        "platform_system": system,
        "platform_version": version,
        "python_full_version": python_version(),
        "python_version": "%d.%d" % sys.version_info[:2],
        "sys_platform": sys.platform,
    }


def site_directories(path: list[str], script_dir: str) -> list[str]:
    """Existing directories on ``path`` in order, without duplicates or this script's folder."""
    seen = {os.path.realpath(script_dir)}
    found = []
    for entry in path:
        real = os.path.realpath(entry or os.curdir)
        if real not in seen and os.path.isdir(real):
            seen.add(real)
            found.append(os.path.abspath(entry or os.curdir))
    return found


def _header_fields(block: bytes) -> tuple[str, str, list[str], str, bool]:
    """(Name, Version, Requires-Dist values, Requires-Python, header complete?) of a metadata
    file's start; the header ends at the first blank line (RFC 822, as pip reads it)."""
    name = version = python = ""
    requires: list[str] = []
    for raw in block.decode("utf-8", "replace").split("\n"):
        line = raw.rstrip("\r")
        if not line:
            return name, version, requires, python, True
        if line[0] in " \t":
            continue  # a folded continuation (long License: texts); no field we read folds
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "name" and not name:
            name = value.strip()
        elif key == "version" and not version:
            version = value.strip()
        elif key == "requires-dist":
            requires.append(value.strip())
        elif key == "requires-python" and not python:
            python = value.strip()
    return name, version, requires, python, False


def _read(path: str, limit: int = 0) -> bytes | None:
    """The file's bytes (at most ``limit`` when given), or None when it cannot be read.

    Raw ``os.open``/``os.read`` skip the buffered file object: on hundreds of small files that
    is a measurable part of the run.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunk = os.read(fd, limit or _READ_CHUNK)
        if limit or len(chunk) < _READ_CHUNK:
            return chunk
        chunks = [chunk]
        while chunk:
            chunk = os.read(fd, _READ_CHUNK)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_header(path: str) -> tuple[str, str, list[str], str] | None:
    """Name, Version, Requires-Dist and Requires-Python from a metadata file's header block
    (read whole only when the block is longer than one chunk); None if unreadable."""
    block = _read(path, _HEADER_CHUNK)
    if block is None:
        return None
    name, version, requires, python, complete = _header_fields(block)
    if not complete and len(block) == _HEADER_CHUNK:
        name, version, requires, python, _ = _header_fields(_read(path) or b"")
    return name, version, requires, python


def egg_requires(data: bytes | None) -> list[str]:
    """``requires.txt`` (the bytes of an ``.egg-info`` folder's) as PEP 508 strings: ``[extra]``
    and ``[extra:marker]``/``[:marker]`` sections become markers."""
    found, marker = [], ""
    for raw in (data or b"").decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            extra, _, condition = line[1:-1].partition(":")
            parts = ["(%s)" % condition] if condition else []
            parts += ['extra == "%s"' % extra] if extra else []
            marker = " and ".join(parts)
        elif line and not line.startswith("#"):
            found.append(line + ("; " + marker if marker else ""))
    return found


def _metadata_file(entry: str, kind: str, is_folder: bool) -> str:
    if not is_folder:  # a distutils .egg-info is the PKG-INFO file itself
        return entry
    return entry + ("/METADATA" if kind == "dist-info" else "/PKG-INFO")


def sha256_digest(data: bytes) -> str:
    text: str = sha256(data).hexdigest()
    return "sha256:" + text


def _digest(folder: str | None, metadata_file: str) -> str:
    sources = [folder + "/" + name for name in _DIGEST_SOURCES] if folder else []
    for source in [*sources, metadata_file]:
        data = _read(source)
        if data is not None:
            return sha256_digest(data)
    return ""


def installer_text(data: bytes | None) -> str:
    """What an ``INSTALLER`` file's bytes say (``pip``, ``uv``), "" when absent or empty."""
    return data.decode("utf-8", "replace").strip() if data else ""


def _name_from_folder(folder: str) -> str:
    """``foo_bar-1.0.dist-info`` -> ``foo_bar``: used when the metadata names nothing."""
    return folder.rsplit(".", 1)[0].partition("-")[0]


def describe(site: str, folder: str, kind: str, is_folder: bool) -> dict[str, object]:
    """One distribution record; unreadable metadata gives an empty version (reported later)."""
    entry = site + "/" + folder
    metadata_file = _metadata_file(entry, kind, is_folder)
    header = read_header(metadata_file)
    requires_txt = None
    if kind == "egg-info" and is_folder and not (header and header[2]):
        requires_txt = _read(entry + "/requires.txt")
    installer = installer_text(_read(entry + "/INSTALLER")) if is_folder else ""
    digest = _digest(entry if is_folder else None, metadata_file)
    return distribution_record(
        site, folder, kind, header=header, installer=installer, digest=digest,
        requires_txt=requires_txt,
    )  # fmt: skip


def distribution_record(
    site: str,
    folder: str,
    kind: str,
    *,
    header: tuple[str, str, list[str], str] | None,
    installer: str,
    digest: str,
    requires_txt: bytes | None,
) -> dict[str, object]:
    """The record of one distribution from what was read of it: ``header`` (None when the
    metadata file is missing), the INSTALLER text, the digest, and ``requires.txt`` (an
    ``.egg-info`` folder's, read only when the header names no requirement). The layer walk
    builds its records here too, so both producers agree field for field."""
    raw_name, version, requires, python = header or ("", "", [], "")
    raw_name = raw_name or _name_from_folder(folder)
    if kind == "egg-info" and not requires and requires_txt is not None:
        requires = egg_requires(requires_txt)
    return {
        "name": canonical_name(raw_name),
        "raw_name": raw_name,
        "version": version,
        "location": site,
        "installer": installer,
        "digest": digest,
        "metadata": kind,
        "requires_dist": requires,
        "requires_python": python,
    }


def metadata_entries(site: str) -> list[tuple[str, str, bool]]:
    """(folder, kind, is a folder) of each ``.dist-info``/``.egg-info`` in ``site``, sorted."""
    found = []
    try:
        with os.scandir(site) as entries:
            for entry in entries:
                kind = _METADATA_SUFFIXES.get(entry.name[entry.name.rfind(".") :])
                if kind:
                    found.append((entry.name, kind, entry.is_dir()))
    except OSError:
        return []
    return sorted(found)


def _sort_key(record: dict[str, object]) -> tuple[str, str, str]:
    return str(record["name"]), str(record["raw_name"]), str(record["version"])


def described(sites: list[str]) -> list[tuple[dict[str, object], str]]:
    """(record, metadata folder) of every distribution in ``sites``, in path order, then by
    name within one site."""
    found = []
    for site in sites:
        pairs = [(describe(site, *entry), entry[0]) for entry in metadata_entries(site)]
        found.extend(sorted(pairs, key=lambda pair: _sort_key(pair[0])))
    return found


def distributions(sites: list[str]) -> list[dict[str, object]]:
    """Every distribution in ``sites``, in path order, then by name within one site."""
    return [record for record, _ in described(sites)]


# ----------------------------------------------------------------------------- the system
# OS packages and the CUDA-family native libraries, recorded once per snapshot under "system"
# (see audit/history/system.py, which reads and judges it). Everything is read from files: no
# dpkg, apk, rpm or ldconfig runs.

DPKG_STATUS = "var/lib/dpkg/status"
APK_INSTALLED = "lib/apk/db/installed"
RPM_DATABASES = ("var/lib/rpm/rpmdb.sqlite", "usr/lib/sysimage/rpm/rpmdb.sqlite",
                 "var/lib/rpm/Packages", "usr/lib/sysimage/rpm/Packages")  # fmt: skip
_DPKG_FIELDS = ("Status", "Version", "Architecture", "Source")
_GONE = ("not-installed", "config-files")
# The CUDA family (file name prefixes): a copy of audit/native/catalog.py's NAME_PREFIXES,
# which this script cannot import (tests/test_system_snapshot.py keeps the two equal).
NATIVE_FAMILIES = (
    "libcheckpoint", "libcublas", "libcublasLt", "libcudart", "libcudnn", "libcudnn_adv",
    "libcudnn_adv_infer", "libcudnn_adv_train", "libcudnn_cnn", "libcudnn_cnn_infer",
    "libcudnn_cnn_train", "libcudnn_engines_precompiled", "libcudnn_engines_runtime_compiled",
    "libcudnn_graph", "libcudnn_heuristic", "libcudnn_ops", "libcudnn_ops_infer",
    "libcudnn_ops_train", "libcufft", "libcufftw", "libcufile", "libcufile_rdma", "libcupti",
    "libcurand", "libcusolver", "libcusolverMg", "libcusparse", "libcusparseLt", "libnccl",
    "libnvJitLink", "libnvToolsExt", "libnvblas", "libnvperf_host", "libnvperf_target",
    "libnvrtc", "libnvrtc-builtins", "libnvrtc-builtins.alt", "libnvrtc.alt", "libnvshmem",
    "libnvshmem_host", "libnvtx3interop", "libpcsamplingutil", "nvshmem_bootstrap_",
    "nvshmem_transport_",
)  # fmt: skip
_DEFAULT_LIB_DIRS = ("lib", "usr/lib", "lib64", "usr/lib64")
LD_CACHE = "etc/ld.so.cache"
_LD_CACHE_MAGIC = b"glibc-ld.so.cache1.1"


def _block_field(block: str, key: str) -> str:
    """The value of ``key`` in one dpkg/apk paragraph (at its start or after a newline)."""
    if block.startswith(key):
        start = len(key)
    else:
        start = block.find("\n" + key)
        if start < 0:
            return ""
        start += len(key) + 1
    end = block.find("\n", start)
    return block[start : end if end >= 0 else len(block)].strip()


def dpkg_packages(text: str) -> list[dict[str, str]]:
    """Installed packages of a dpkg ``status`` file (name, version, architecture, source)."""
    found = []
    for block in text.split("\n\n"):
        name = _block_field(block, "Package:")
        status = _block_field(block, "Status:").split()
        if not name or (status and status[-1] in _GONE):
            continue
        source = _block_field(block, "Source:").split(" ")[0]
        found.append({
            "name": name,
            "version": _block_field(block, "Version:"),
            "architecture": _block_field(block, "Architecture:"),
            "source": source or name,
        })  # fmt: skip
    return found


def apk_packages(text: str) -> list[dict[str, str]]:
    """Installed packages of Alpine's ``installed`` database (P:, V:, A:, o: lines)."""
    found = []
    for block in text.split("\n\n"):
        name = _block_field(block, "P:")
        if name:
            found.append({
                "name": name,
                "version": _block_field(block, "V:"),
                "architecture": _block_field(block, "A:"),
                "source": _block_field(block, "o:") or name,
            })  # fmt: skip
    return found


def os_release(root: str) -> str:
    """``debian-12``, ``ubuntu-24.04``, ``alpine-3.20.3``: ID and VERSION_ID of os-release."""
    return distro_of(_read(root + "etc/os-release") or _read(root + "usr/lib/os-release") or b"")


def distro_of(data: bytes) -> str:
    """:func:`os_release` of an os-release file's bytes."""
    fields = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition("=")
        fields[key.strip()] = value.strip().strip("\"'")
    name, version = fields.get("ID", ""), fields.get("VERSION_ID", "")
    return name + ("-" + version if name and version else "")


def os_packages(root: str) -> dict[str, object]:
    """``{"manager", "distro", "note", "packages"}`` of the first package database under
    ``root``."""
    distro = os_release(root)
    for relpath, manager, reader in (
        (DPKG_STATUS, "dpkg", dpkg_packages),
        (APK_INSTALLED, "apk", apk_packages),
    ):
        data = _read(root + relpath)
        if data is not None:
            items = sorted(reader(data.decode("utf-8", "replace")), key=_package_key)
            return {"manager": manager, "distro": distro, "note": "", "packages": items}
    for relpath in RPM_DATABASES:
        if os.path.exists(root + relpath):
            note = "/%s: an RPM database; RPM packages are not read (not recorded)" % relpath
            return {"manager": "rpm", "distro": distro, "note": note, "packages": []}
    note = "no package database found"
    return {"manager": "", "distro": distro, "note": note, "packages": []}


def _package_key(item: dict[str, str]) -> tuple[str, str, str]:
    return item["name"], item["architecture"], item["version"]


def _unpack(fmt: str, data: bytes, offset: int) -> tuple[int, ...]:
    import struct

    return struct.unpack_from(fmt, data, offset)


def _elf_header(head: bytes) -> tuple[str, bool, int, int, int] | None:
    """(byte order, 64-bit?, program header offset, entry size, count) of an ELF file."""
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] not in (1, 2):
        return None
    order = "<" if head[5] == 1 else ">"
    wide = head[4] == 2
    if wide:
        (phoff,) = _unpack(order + "Q", head, 32)
        size, count = _unpack(order + "HH", head, 54)
    else:
        (phoff,) = _unpack(order + "I", head, 28)
        size, count = _unpack(order + "HH", head, 42)
    return order, wide, phoff, size, count


def _segments(fd: int, header: tuple[str, bool, int, int, int]) -> list[tuple[int, ...]]:
    """(type, offset, vaddr, filesz) of every program header."""
    order, wide, phoff, size, count = header
    table = os.pread(fd, size * count, phoff)
    found: list[tuple[int, ...]] = []
    for index in range(count):
        at = index * size
        if wide:
            kind, _, offset, vaddr, _, filesz = _unpack(order + "IIQQQQ", table, at)
        else:
            kind, offset, vaddr, _, filesz = _unpack(order + "IIIII", table, at)
        found.append((kind, offset, vaddr, filesz))
    return found


def _file_offset(segments: list[tuple[int, ...]], vaddr: int) -> int:
    for kind, offset, start, filesz in segments:
        if kind == 1 and start <= vaddr < start + filesz:  # PT_LOAD
            return vaddr - start + offset
    return -1


def _dynamic_entries(
    fd: int, order: str, wide: bool, segments: list[tuple[int, ...]]
) -> list[tuple[int, int]]:
    for kind, offset, _, filesz in segments:
        if kind == 2:  # PT_DYNAMIC
            data = os.pread(fd, filesz, offset)
            step, fmt = (16, order + "qQ") if wide else (8, order + "iI")
            return [_unpack(fmt, data, at) for at in range(0, len(data) - step + 1, step)]  # type: ignore[misc]
    return []


def elf_dynamic(path: str) -> dict[str, object] | None:
    """SONAME, NEEDED, RPATH and RUNPATH of an ELF shared object (None: not ELF / unreadable).

    Reads the headers, the dynamic segment and only the strings those entries name: a big
    library's string table (libtorch_cpu.so's symbol names) is megabytes.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        header = _elf_header(os.pread(fd, 64, 0))
        if header is None:
            return None
        segments = _segments(fd, header)
        entries = _dynamic_entries(fd, header[0], header[1], segments)
        values = {tag: value for tag, value in entries if tag in (5, 10)}
        strtab = _file_offset(segments, values.get(5, -1))
        if strtab < 0:
            return None
        return _dynamic_strings(fd, entries, strtab, values.get(10, 0))
    except Exception:  # a damaged file is "not ELF", never a crash
        return None
    finally:
        os.close(fd)


_STRING_TAGS = {1: "needed", 14: "soname", 15: "rpath", 29: "runpath"}


def _string_at(fd: int, start: int, offset: int, size: int) -> str:
    """The NUL-terminated string at ``offset`` of the string table at file offset ``start``."""
    data = b""
    while offset + len(data) < size:
        chunk = os.pread(fd, min(256, size - offset - len(data)), start + offset + len(data))
        end = chunk.find(b"\0")
        if end >= 0 or not chunk:
            data += chunk[: end if end >= 0 else len(chunk)]
            break
        data += chunk
    return data.decode("utf-8", "replace")


def _dynamic_strings(
    fd: int, entries: list[tuple[int, int]], strtab: int, size: int
) -> dict[str, object]:
    needed: list[str] = []
    found: dict[str, object] = {"soname": "", "needed": needed, "rpath": "", "runpath": ""}
    for tag, value in entries:
        if tag in _STRING_TAGS:
            text = _string_at(fd, strtab, value, size)
            if tag == 1:
                needed.append(text)
            else:
                found[_STRING_TAGS[tag]] = text
    return found


def _cstring(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    return data[offset : end if end >= 0 else len(data)].decode("utf-8", "replace")


def library_version(path: str, soname: str) -> str:
    """``2.29.7`` of ``libnccl.so.2.29.7``: the digits after ``.so.`` beyond the SONAME's own
    (a file named only by its SONAME tells no version: "")."""
    name = os.path.basename(path)
    if ".so." not in name or name == soname:
        return ""
    return name.split(".so.", 1)[1]


def _family(name: str, families: tuple[str, ...]) -> bool:
    return ".so" in name and name.startswith(families)


def system_library_dirs(environ: dict[str, str], root: str = "/") -> list[tuple[str, str]]:
    """(directory, origin) of every folder the loader searches: ``LD_LIBRARY_PATH``, the default
    folders (``system``) and those ``/etc/ld.so.conf`` names (``ld.so.conf``)."""
    dirs = [(d, "LD_LIBRARY_PATH") for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    machine = _uname()[3]
    triplets = [machine + "-linux-gnu"] if machine else []
    for base in _DEFAULT_LIB_DIRS:
        dirs += [("/" + base + "/" + t, "system") for t in triplets] + [("/" + base, "system")]
    return dirs + [(d, "ld.so.conf") for d in ld_so_conf_dirs(root)]


def ld_so_conf_dirs(root: str) -> list[str]:
    """The folders ``/etc/ld.so.conf`` lists, with its ``include``d ``ld.so.conf.d/*.conf``."""
    found: list[str] = []
    files = [root + "etc/ld.so.conf"]
    try:
        folder = root + "etc/ld.so.conf.d"
        files += sorted(folder + "/" + n for n in os.listdir(folder) if n.endswith(".conf"))
    except OSError:
        pass
    for path in files:
        for line in (_read(path) or b"").decode("utf-8", "replace").splitlines():
            entry = line.split("#", 1)[0].strip()
            if entry.startswith("/") and entry not in found:
                found.append(entry)
    return found


def _copies_in(
    folder: str, origin: str, families: tuple[str, ...], seen: set[str]
) -> list[dict[str, object]]:
    found = []
    try:
        with os.scandir(folder) as entries:  # a system folder holds thousands of files
            names = sorted(
                e.name for e in entries if e.name.startswith(families) and ".so" in e.name
            )
    except OSError:
        return []
    for name in names:
        path = folder + "/" + name
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        found.append(_copy(real, origin, ""))
    return found


def _copy(real: str, origin: str, owner: str) -> dict[str, object]:
    dynamic = elf_dynamic(real) or {}
    soname = str(dynamic.get("soname") or os.path.basename(real))
    return {"path": real, "origin": origin, "owner": owner, "soname": soname,
            "version": library_version(real, soname)}  # fmt: skip


def wheel_copies(
    pairs: list[tuple[dict[str, object], str]], families: tuple[str, ...], seen: set[str]
) -> list[dict[str, object]]:
    """Library files that ``nvidia-*`` distributions installed (from their RECORD)."""
    found = []
    for dist, folder in pairs:
        if not str(dist["name"]).startswith("nvidia-") or dist["metadata"] != "dist-info":
            continue
        owner = "%s %s" % (dist["name"], dist["version"])
        site = str(dist["location"])
        for relpath in _record_paths(site, folder):
            if _family(relpath.rsplit("/", 1)[-1], families):
                real = os.path.realpath(site + "/" + relpath)
                if real not in seen and os.path.isfile(real):
                    seen.add(real)
                    found.append(_copy(real, "wheel", owner))
    return found


def _record_paths(site: str, folder: str) -> list[str]:
    data = _read(site + "/" + folder + "/RECORD") if folder else None
    lines = (data or b"").decode("utf-8", "replace").splitlines()
    return [line.rsplit(",", 2)[0] for line in lines if ".so" in line]


def native_libraries(
    pairs: list[tuple[dict[str, object], str]],
    root: str,
    environ: dict[str, str],
    families: tuple[str, ...],
) -> list[dict[str, object]]:
    """Per SONAME of the families, every copy: the ``nvidia-*`` wheels' (their RECORD), then
    those of the folders the loader searches. ``loads`` is left empty: which copy loads is
    the host's loader model's answer, from the loader facts (:func:`loader_facts`)."""
    seen: set[str] = set()
    copies = wheel_copies(pairs, families, seen)
    scanned: set[str] = set()
    for folder, origin in system_library_dirs(environ, root):
        real = os.path.realpath(folder)  # /lib is /usr/lib on a merged-/usr system
        if real not in scanned:
            scanned.add(real)
            copies += _copies_in(folder, origin, families, seen)
    by_soname: dict[str, list[dict[str, object]]] = {}
    for copy in copies:
        by_soname.setdefault(str(copy["soname"]), []).append(copy)
    return [{"soname": s, "copies": by_soname[s], "loads": []} for s in sorted(by_soname)]


def system_facts(
    pairs: list[tuple[dict[str, object], str]],
    root: str = "/",
    families: tuple[str, ...] = NATIVE_FAMILIES,
) -> dict[str, object]:
    """The ``system`` object of a snapshot: OS packages and native libraries."""
    environ = dict(os.environ)
    native = native_libraries(pairs, root, environ, families)
    found: dict[str, object] = {"os": os_packages(root), "native": native}
    if native:
        found["loader"] = loader_facts(pairs, root, environ, native, families)
    return found


# ----------------------------------------------------------------------------- loader facts
# The facts the host's loader model (audit/native, which resolves as ld.so does, with torch's,
# cupy's and jax's own loads) reads, recorded only where CUDA-family libraries are: a scene
# (audit/native/scene.py's JSON) of the package folders its rules name, the folders the loader
# searches (listed), the dynamic facts of their ELF files, the settings and the interpreter.
# Versioned symbols are not read here (the host reads them from the layers with pyelftools);
# an empty DT_RPATH/DT_RUNPATH reads as absent.

LOADER_TREES = ("torch", "torch/lib", "jax_plugins/xla_cuda13", "jax_plugins/xla_cuda12",
                "jax_cuda13_plugin", "jax_cuda12_plugin", "cupy/cuda",
                "cupy_backends/cuda/libs")  # fmt: skip
_MACHINES = {3: "i386", 40: "arm", 62: "x86_64", 183: "aarch64"}
_CACHE_FLAGS = {"x86_64": 0x0303, "aarch64": 0x0A03}


def _elf_identity(path: str) -> tuple[str, int]:
    """(machine, bits) from an ELF header; ("", 0) when unreadable."""
    head = _read(path, 20) or b""
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return "", 0
    (machine,) = _unpack("<H" if head[5] == 1 else ">H", head, 18)
    return _MACHINES.get(machine, str(machine)), 64 if head[4] == 2 else 32


def _file_facts(path: str) -> dict[str, object]:
    dynamic = elf_dynamic(path)
    machine, bits = _elf_identity(path)
    if dynamic is None or not machine:
        return {"unreadable": "%s: no ELF dynamic section read" % path, "invalid": True}
    return {"machine": machine, "bits": bits, "soname": dynamic["soname"],
            "needed": dynamic["needed"], "rpath": dynamic["rpath"] or None,
            "runpath": dynamic["runpath"] or None, "imports": [], "defines": [],
            "nodeflib": False}  # fmt: skip


class _View:
    """The files, links and listings recorded so far (one snapshot); ``families``: the names
    whose facts are read in a searched folder."""

    def __init__(self, families: tuple[str, ...]) -> None:
        self.families = families
        self.files: dict[str, dict[str, object]] = {}
        self.links: dict[str, str] = {}
        self.listings: dict[str, list[str]] = {}

    def real(self, path: str) -> str:
        """``path`` resolved, every symbolic link on it recorded ("" past 40 links)."""
        done, todo, hops = "/", [p for p in reversed(path.split("/")) if p not in ("", ".")], 0
        while todo:
            part = todo.pop()
            candidate = os.path.dirname(done) if part == ".." else os.path.join(done, part)
            try:
                target = os.readlink(candidate) if part != ".." else None
            except OSError:
                target = None
            if target is None:
                done = candidate
                continue
            self.links[candidate], hops = target, hops + 1
            if hops > 40:
                return ""
            done = "/" if target.startswith("/") else done
            todo.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
        return done

    def list(self, folder: str, read: bool) -> None:
        """List ``folder``'s ``.so`` names; ``read``: the facts of each (else the family's)."""
        real = self.real(folder)
        if not real or real in self.listings:
            return
        names = sorted(n for n in _names(real) if ".so" in n)
        self.listings[real] = names
        for name in names:
            path = real + "/" + name
            if os.path.islink(path):
                self.links[path] = os.readlink(path)
            elif (read or _family(name, self.families)) and os.path.isfile(path):
                self.files[path] = _file_facts(path)

    def requesters(self, site: str) -> None:
        """The package libraries of ``site`` that need a CUDA-family name (an extension such
        as ``flash_attn_2_cuda``, ``<package>/lib/libx_cuda.so``): their facts, for the host's
        model to import each; the other files of those folders are not recorded."""
        for folder in _requester_folders(site):
            for name in sorted(n for n in _names(folder) if ".so" in n):
                path = folder + "/" + name
                if path in self.files or os.path.islink(path) or not os.path.isfile(path):
                    continue
                facts = _file_facts(path)
                needed = facts.get("needed")
                if isinstance(needed, list) and any(_family(n, self.families) for n in needed):
                    self.list(folder, read=False)
                    self.files[path] = facts


_NOT_PACKAGES = ("nvidia", "__pycache__", *sorted({t.split("/")[0] for t in LOADER_TREES}))


def _requester_folders(site: str) -> list[str]:
    """``site`` and its package folders and their ``lib`` folders, but the rules' own."""
    packages = [n for n in _names(site) if "." not in n and n not in _NOT_PACKAGES]
    return [site] + [site + "/" + n + tail for n in sorted(packages) for tail in ("", "/lib")]


def _names(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _loader_cache(root: str, machine: str) -> object:
    """soname -> paths of the ld.so cache entries that fit ``machine``; None: no cache."""
    data = _read(root + LD_CACHE)
    start = data.find(_LD_CACHE_MAGIC) if data else -1
    if data is None or start < 0:
        return None
    (count,) = _unpack("=I", data, start + 20)
    found: dict[str, list[str]] = {}
    for index in range(count):
        at = start + 48 + 24 * index
        if at + 24 > len(data):
            break
        flags, key, value = _unpack("=iII", data, at)
        if flags == _CACHE_FLAGS.get(machine):
            found.setdefault(_cstring(data, start + key), []).append(_cstring(data, start + value))
    return found


def _search_folders(view: _View, environ: dict[str, str], cache: object, root: str) -> list[str]:
    folders = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
    folders += [d for d, origin in system_library_dirs({}, root) if origin != "LD_LIBRARY_PATH"]
    for soname, paths in sorted(cache.items()) if isinstance(cache, dict) else ():
        if _family(soname, view.families):
            folders += [os.path.dirname(p) for p in paths]
    for path, facts in sorted(view.files.items()):
        for key in ("rpath", "runpath"):
            for entry in str(facts.get(key) or "").split(":"):
                folder = entry.replace("${ORIGIN}", "$ORIGIN").replace(
                    "$ORIGIN", os.path.dirname(path)
                )
                folders += [os.path.normpath(folder)] if folder.startswith("/") else []
    return folders


def _ctypes_module() -> str:
    for entry in sys.path:
        if entry.endswith("lib-dynload"):
            for name in sorted(_names(entry)):
                if name.startswith("_ctypes.") and name.endswith(".so"):
                    return entry + "/" + name
    return ""


def loader_facts(
    pairs: list[tuple[dict[str, object], str]],
    root: str,
    environ: dict[str, str],
    native: list[dict[str, object]],
    families: tuple[str, ...] = NATIVE_FAMILIES,
) -> dict[str, object]:
    """The scene the host's loader model reads (see the comment above)."""
    view, machine = _View(families), _uname()[3]
    sites = sorted({str(dist["location"]) for dist, _ in pairs})
    for site in sites:
        for tree in LOADER_TREES:
            view.list(site + "/" + tree, read=True)
        for folder in _names(site + "/nvidia"):
            view.list(site + "/nvidia/" + folder + "/lib", read=True)
        view.requesters(site)
    executable, ctypes = os.path.realpath(sys.executable), _ctypes_module()
    for path in (executable, ctypes):
        real = view.real(path) if path else ""
        if real and os.path.isfile(real):
            view.files[real] = _file_facts(real)
    cache = _loader_cache(root, machine)
    for _ in range(3):  # RPATH/RUNPATH folders of what was read, to a fixed point
        for folder in _search_folders(view, environ, cache, root):
            view.list(folder, read=False)
    owners = {str(c["path"]): {"kind": "wheel", "name": str(c["owner"]).split(" ")[0],
                               "version": str(c["owner"]).partition(" ")[2]}
              for library in native for c in library["copies"]  # type: ignore[attr-defined]
              if c["origin"] == "wheel" and c["owner"]}  # fmt: skip
    multiarch = os.path.isdir(root + "usr/lib/" + machine + "-linux-gnu")
    settings = {"machine": machine, "bits": 64, "cache": cache, "system_folders": [],
                "ld_library_path": environ.get("LD_LIBRARY_PATH"), "hwcaps": [], "cwd": None,
                "conf_folders": ld_so_conf_dirs(root), "lib": "", "platform": "",
                "multiarch": multiarch}  # fmt: skip
    return {"view": {"files": view.files, "links": view.links, "listings": view.listings},
            "settings": settings, "owners": owners,
            "python": {"executable": executable, "sites": sites, "ctypes": ctypes}}  # fmt: skip


def libc_version() -> str:
    """``glibc 2.36`` as the C library reports it (no ``platform`` import); "" elsewhere."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return ""


def snapshot(
    path: list[str], script_dir: str, system: bool = True, libraries: tuple[str, ...] = ()
) -> dict[str, object]:
    """The document for this interpreter; ``system`` adds the OS packages and native libraries
    (the guard leaves them out for its second and later interpreters: they are one image's);
    ``libraries`` adds file name prefixes to the CUDA family's (a recipe's own libraries)."""
    sites = site_directories(path, script_dir)
    pairs = described(sites)
    markers = environment_markers()
    environment: dict[str, object] = {
        "interpreter": sys.executable,
        "python": python_version(),
        "markers": markers,
        "paths": sites,
        "distributions": [record for record, _ in pairs],
    }
    platform = platform_of(markers)
    if platform:
        environment["platform"] = platform
    libc = libc_version()
    if libc:
        environment["libc"] = libc
    if system:
        families = NATIVE_FAMILIES + tuple(p for p in libraries if p not in NATIVE_FAMILIES)
        environment["system"] = system_facts(pairs, "/", families)
    return {"schema": SCHEMA, "environments": [environment]}


def canonical_json(value: object) -> str:
    """What ``json.dumps(value, sort_keys=True, separators=(",", ":"))`` gives for str/list/dict
    (and None, booleans and integers, which the loader facts hold).

    Written out because importing ``json`` (and the ``re`` it pulls in) is slow.
    """
    if isinstance(value, str):
        return str(_quote(value))
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        items = (_quote(key) + ":" + canonical_json(value[key]) for key in sorted(value))
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(canonical_json(item) for item in value) + "]"
    raise TypeError("cannot serialise %r" % (value,))


def seal(document: dict[str, object]) -> bytes:
    """The file's bytes: canonical JSON with a digest over everything else, newline-terminated.

    ``document`` is :func:`snapshot`'s (keys ``environments`` and ``schema``): ``digest`` sorts
    before both, so it is spliced in front of the text already hashed instead of serialising twice.
    """
    text = canonical_json(document)
    digest = sha256_digest(text.encode("ascii"))
    return ('{"digest":' + _quote(digest) + "," + text[1:] + "\n").encode("ascii")


def write_atomically(target: str, data: bytes) -> None:
    """Write beside the target, then rename: a killed run never leaves half a snapshot.

    A device or pipe (``/dev/null``, ``/dev/stdout``) is written into: renaming over it would
    replace the device with a file.
    """
    if os.path.exists(target) and not os.path.isfile(target) and not os.path.isdir(target):
        with open(target, "wb") as handle:
            handle.write(data)
        return
    tmp = "%s.%d.tmp" % (target, os.getpid())
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


USAGE = "usage: snapshot.py [--no-system] [--libraries=PREFIX,...] [--output FILE]\n"


def parse_output(argv: list[str]) -> str | None:
    """The ``--output`` file, or None for standard output; exits 2 on anything else
    (``--no-system`` is taken out first by :func:`main`)."""
    if not argv:
        return None
    if len(argv) == 2 and argv[0] == "--output":
        return argv[1]
    if len(argv) == 1 and argv[0].startswith("--output="):
        return argv[0][len("--output=") :]
    if argv in (["-h"], ["--help"]):
        sys.stdout.write(USAGE + (__doc__ or ""))
        raise SystemExit(0)
    sys.stderr.write(USAGE + "snapshot.py: error: unexpected arguments: %s\n" % " ".join(argv))
    raise SystemExit(2)


def _script_dir() -> str:
    """The folder ``sys.path[0]`` adds for this script, left out of the snapshot.

    Read from standard input (``python3 - < snapshot.py``, the way to snapshot an image on
    another machine) there is no ``__file__`` and ``sys.path[0]`` is "" (the working folder):
    both ways leave out the same entry, so they give the same snapshot.
    """
    if "__file__" in globals():
        return os.path.dirname(os.path.abspath(__file__))
    return sys.path[0] if sys.path else ""


_LIBRARIES = "--libraries="


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    system = "--no-system" not in args
    named = [arg[len(_LIBRARIES) :] for arg in args if arg.startswith(_LIBRARIES)]
    libraries = tuple(p for text in named for p in text.split(",") if p)
    rest = [arg for arg in args if arg != "--no-system" and not arg.startswith(_LIBRARIES)]
    output = parse_output(rest)
    script_dir = _script_dir()
    data = seal(snapshot(list(sys.path), script_dir, system, libraries))
    if output:
        write_atomically(output, data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
