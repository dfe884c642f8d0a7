"""Snapshot the Python environment of the interpreter running this script.

Standalone on purpose: standard library only, Python 3.9+, imports nothing from ``audit``, starts
no subprocess. The build guard copies it into images that have nothing but Python and runs it
after every layer, so it avoids ``importlib.metadata`` (slow) and reads only what it needs: the
header block of each METADATA/PKG-INFO (up to the first blank line), INSTALLER, and the bytes of
RECORD for the digest.

Usage: ``python3 snapshot.py [--output FILE]``, or ``python3 - < snapshot.py`` (one sealed
document on standard output; how a base image on another machine is snapshotted). The JSON
format is documented in ``audit/core/snapshot.py``, which reads and verifies it.
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
try:
    from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]  # Python <= 3.11
except ImportError:
    try:
        from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # 3.12+
    except ImportError:  # pragma: no cover
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


def _egg_requires(folder: str) -> list[str]:
    """``requires.txt`` of an ``.egg-info`` folder as PEP 508 strings: ``[extra]`` and
    ``[extra:marker]``/``[:marker]`` sections become markers."""
    data = _read(folder + "/requires.txt")
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


def _installer(entry: str) -> str:
    data = _read(entry + "/INSTALLER")
    return data.decode("utf-8", "replace").strip() if data else ""


def _name_from_folder(folder: str) -> str:
    """``foo_bar-1.0.dist-info`` -> ``foo_bar``: used when the metadata names nothing."""
    return folder.rsplit(".", 1)[0].partition("-")[0]


def describe(site: str, folder: str, kind: str, is_folder: bool) -> dict[str, object]:
    """One distribution record; unreadable metadata gives an empty version (reported later)."""
    entry = site + "/" + folder
    metadata_file = _metadata_file(entry, kind, is_folder)
    raw_name, version, requires, python = read_header(metadata_file) or ("", "", [], "")
    raw_name = raw_name or _name_from_folder(folder)
    if kind == "egg-info" and is_folder and not requires:
        requires = _egg_requires(entry)
    return {
        "name": canonical_name(raw_name),
        "raw_name": raw_name,
        "version": version,
        "location": site,
        "installer": _installer(entry) if is_folder else "",
        "digest": _digest(entry if is_folder else None, metadata_file),
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


def distributions(sites: list[str]) -> list[dict[str, object]]:
    """Every distribution in ``sites``, in path order, then by name within one site."""
    found = []
    for site in sites:
        records = [describe(site, *entry) for entry in metadata_entries(site)]
        found.extend(sorted(records, key=_sort_key))
    return found


def libc_version() -> str:
    """``glibc 2.36`` as the C library reports it (no ``platform`` import); "" elsewhere."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (AttributeError, ValueError, OSError):
        return ""


def snapshot(path: list[str], script_dir: str) -> dict[str, object]:
    sites = site_directories(path, script_dir)
    environment: dict[str, object] = {
        "interpreter": sys.executable,
        "python": python_version(),
        "markers": environment_markers(),
        "paths": sites,
        "distributions": distributions(sites),
    }
    libc = libc_version()
    if libc:
        environment["libc"] = libc
    return {"schema": SCHEMA, "environments": [environment]}


def canonical_json(value: object) -> str:
    """What ``json.dumps(value, sort_keys=True, separators=(",", ":"))`` gives for str/list/dict.

    Written out because importing ``json`` (and the ``re`` it pulls in) is slow.
    """
    if isinstance(value, str):
        return str(_quote(value))
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


USAGE = "usage: snapshot.py [--output FILE]\n"


def parse_output(argv: list[str]) -> str | None:
    """The ``--output`` file, or None for standard output; exits 2 on anything else."""
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


def main(argv: list[str] | None = None) -> int:
    output = parse_output(sys.argv[1:] if argv is None else argv)
    script_dir = _script_dir()
    data = seal(snapshot(list(sys.path), script_dir))
    if output:
        write_atomically(output, data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
