"""The wheels ``lock`` installs pip-tools from, made once and then served on 127.0.0.1.

``lock`` builds its pip-tools environment (pip and pip-tools at the versions of
:mod:`audit.lock.plan`) from ``$LAYER_AUDIT_TOOLS_INDEX_URL``, by default the public index. The
test session points that variable at a local index over a folder of those wheels (every
dependency included, for every Python a base image may run), so no test reaches the public
index for them. The folder is downloaded once, the one network use of the default suite, into
a cache keyed by the two versions (pytest's cache folder), and reused by later sessions.

The download itself is hermetic: no ``PIP_*`` variable and no pip configuration file of this
machine takes part (they may carry constraints, find-links and local indexes).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from audit.lock.plan import PIP_TOOLS_VERSION, PIP_VERSION, UV_VERSION
from audit.lock.resolvers.job import DEFAULT_TOOLS_INDEX, TOOLS_INDEX_ENV, ambient_ca_bundle

# Pythons of the base images a lock may run in (bullseye 3.9, bookworm 3.11, ...): their
# dependency sets differ (tomli, importlib-metadata and click only below some version).
PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13")
# pip download evaluates environment markers for the Python running it, not --python-version:
# what pip-tools and build need only below 3.11 (``tomli; python_version < "3.11"``, ...) is
# named here, and comes in whichever release each Python accepts.
OLD_PYTHON_NEEDS = ("tomli", "importlib-metadata", "zipp")
COMPLETE = ".complete"


def folder_name() -> str:
    """The cache key: the versions the wheels are for."""
    return f"pip-{PIP_VERSION}-pip-tools-{PIP_TOOLS_VERSION}-uv-{UV_VERSION}"


def _download_env() -> dict[str, str]:
    """This environment without pip's settings; pip reads no configuration file at all."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    return env | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def download_argv(dest: Path, python: str, index: str) -> list[str]:
    """``pip download`` of pip and pip-tools with every dependency, wheels only, for ``python``."""
    argv = [sys.executable, "-m", "pip", "download", "--isolated", "--no-input", "--quiet"]
    argv += ["--disable-pip-version-check"]
    argv += ["--only-binary", ":all:", "--python-version", python, "--index-url", index]
    ca_bundle = ambient_ca_bundle()
    if ca_bundle:
        argv += ["--cert", str(ca_bundle)]
    wanted = [f"pip=={PIP_VERSION}", f"pip-tools=={PIP_TOOLS_VERSION}", *OLD_PYTHON_NEEDS]
    wanted.append(f"uv=={UV_VERSION}")  # the uv backend runs on this machine: its wheel
    return [*argv, "--dest", str(dest), *wanted]


def source_index() -> str:
    """Where the wheels come from: the index ``lock`` itself would use outside the tests."""
    return os.environ.get(TOOLS_INDEX_ENV, DEFAULT_TOOLS_INDEX)


def ensure_wheels(cache: Path, index: str) -> Path:
    """``cache/<versions>/``, holding the wheels; downloaded from ``index`` when missing.

    Invariant: the folder exists only whole (a ``.complete`` marker inside, written last, and
    the folder renamed into place), so an interrupted download is never mistaken for a cache;
    parallel test workers sharing ``cache`` download it once (a file lock beside it).
    """
    target = cache / folder_name()
    if (target / COMPLETE).is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".download.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not (target / COMPLETE).is_file():
            _download(cache, target, index)
    return target


def _download(cache: Path, target: Path, index: str) -> None:
    """Every Python's wheels into a partial folder, renamed into ``target`` when whole."""
    partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=cache))
    try:
        for python in PYTHONS:
            argv = download_argv(partial, python, index)
            subprocess.run(argv, env=_download_env(), check=True, timeout=600)
        (partial / COMPLETE).write_text("")
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
