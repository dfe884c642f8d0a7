"""The ``packaging`` the build guard carries into images: one that runs on the image's Python.

The guard's judge imports ``packaging`` inside the image, from a copy in ``_guard/lib``. The copy
is this machine's installed ``packaging`` when its ``Requires-Python`` admits every interpreter
the base record holds; otherwise (``packaging`` 26.4 needs Python 3.10, a bullseye base has 3.9)
it is :data:`FALLBACK`, a pinned release that supports every Python the guard runs on (3.9+),
read from its wheel: cached under the lock tools' cache, fetched once from the tools index
(``$LAYER_AUDIT_TOOLS_INDEX_URL``, the public index by default) and checked against its pinned
sha256. No code from the wheel runs here: it is unzipped, never installed or imported.

Invariant: the same installed ``packaging`` and base record give the same copy, byte for byte
(the fallback is one pinned file), so a render stays deterministic.
"""

from __future__ import annotations

import email.parser
import hashlib
import importlib.metadata
import io
import zipfile
from collections.abc import Iterable
from pathlib import Path

import packaging

from audit.errors import EnvironmentProblem
from audit.host import atomic
from audit.redact import redact
from audit.render.guard import PackagingCopy

# the newest packaging release whose Requires-Python (>=3.9) admits every Python the guard runs
# on; its wheel's sha256, as the index lists it
FALLBACK = ("26.3", "d7193f7c8e4e93f444fde0262bf90af30e16fa0ad0ad44cb553c87339b23cd1c")
FALLBACK_WHEEL = f"packaging-{FALLBACK[0]}-py3-none-any.whl"


def host_copy() -> PackagingCopy:
    """The ``packaging`` installed beside layer-audit."""
    folder = Path(packaging.__file__).parent
    files = {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    requires = importlib.metadata.metadata("packaging").get_all("Requires-Python") or [""]
    return PackagingCopy(packaging.__version__, str(requires[0]), files)


def copy_for(pythons: Iterable[str], host: PackagingCopy | None = None) -> PackagingCopy:
    """The copy for images whose interpreters run ``pythons``: the host's when it admits them
    all, else :data:`FALLBACK` (which render then checks the same way)."""
    own = host or host_copy()
    if all(own.admits(python) for python in pythons):
        return own
    return wheel_copy(fallback_wheel())


def wheel_copy(data: bytes) -> PackagingCopy:
    """The ``packaging/`` folder and Requires-Python of a packaging wheel's bytes."""
    with zipfile.ZipFile(io.BytesIO(data)) as wheel:
        names = sorted(wheel.namelist())
        files = {
            name.removeprefix("packaging/"): wheel.read(name)
            for name in names
            if name.startswith("packaging/") and not name.endswith("/")
        }
        metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
        message = email.parser.BytesParser().parsebytes(wheel.read(metadata))
    return PackagingCopy(str(message["Version"]), str(message.get("Requires-Python") or ""), files)


def fallback_wheel() -> bytes:
    """:data:`FALLBACK`'s wheel, from the cache or (once) the tools index; sha256 checked."""
    from audit.lock.resolvers.job import cache_root

    cached = cache_root() / "guard-packaging" / FALLBACK_WHEEL
    if cached.is_file() and _sha256(cached.read_bytes()) == FALLBACK[1]:
        return cached.read_bytes()
    data = _fetch()
    cached.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(cached, data)
    return data


def _fetch() -> bytes:
    from audit.lock.resolvers.job import TOOLS_INDEX_ENV, tools_index

    index = tools_index()
    try:
        data, why = _download(index)
    except EnvironmentProblem as exc:
        data, why = None, exc.message
    if data is None:
        raise EnvironmentProblem(
            f"the build guard needs {FALLBACK_WHEEL} for the base's Python (the installed "
            f"packaging {packaging.__version__} does not support it), and the tools index "
            f"{redact(index)} did not give it: {why}",
            f"check the network, or point {TOOLS_INDEX_ENV} at an index that has it",
        )
    return data


def _download(index: str) -> tuple[bytes | None, str]:
    """The pinned wheel's bytes from ``index`` (None and why when it has no such file)."""
    from audit.index.http import FetchStats, get
    from audit.index.simple import project_files
    from audit.lock.resolvers.job import tls_context

    context, stats = tls_context(), FetchStats()
    listed = [f for f in project_files(index, "packaging", context=context, stats=stats)
              if f.filename == FALLBACK_WHEEL]  # fmt: skip
    if not listed:
        return None, "not listed"
    answer = get(listed[0].url, {}, context=context, stats=stats)
    if answer.status != 200 or _sha256(answer.body) != FALLBACK[1]:
        return None, f"HTTP {answer.status}, or not the pinned sha256"
    return answer.body, ""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
