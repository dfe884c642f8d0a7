"""uv's cache for one lock run: project pages private to the run, everything else shared.

The uv processes of one lock run (its layers, one after another, and the read-ahead beside
them) should reuse each other's answers, but a later run must see the index as it is then (a
release published a second ago included). uv keeps the caching policy of an answer with the
answer, so "fresh for this run only" cannot be said by a policy alone: the run gets its own
cache folder (:func:`open_run_cache`) whose project-page buckets (``simple-*``, and
``flat-index-*`` for find-links listings) are its own and are deleted with it
(:func:`close_run_cache`), while every other bucket (wheel metadata, built sdists, interpreter
facts) is a link to the shared cache, so what is worth keeping is kept across runs. A bucket
uv first creates during the run is moved into the shared cache at the end (unless another run
got there first). A run folder whose process is gone (a killed run) is removed by the next run.

The run's configuration (:func:`cache_policy`) lets uv take a page as fresh for the whole run
(:data:`PAGES_FOR`) and a wheel's metadata for :data:`FILES_FOR` seconds: a file on an index does
not change under its name (PyPI forbids it), so reusing its metadata for a minute across runs
is safe, and it spares a range request per wheel per layer when the index sends no caching
headers (PyPI behind a proxy that drops them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from audit.docker.run_label import alive

PRIVATE = ("simple-", "flat-index-")  # bucket name prefixes kept for one run only
PAGES_FOR = 3600  # seconds: longer than any run; the pages go when the run ends
FILES_FOR = 60  # seconds a wheel's metadata is reused, within and across runs
RUNS = "uv-runs"  # beside the shared cache: one folder per running lock


def cache_policy() -> str:
    """The ``cache-control`` value of every index of a run's configuration (TOML)."""
    return f'{{ api = "max-age={PAGES_FOR}", files = "max-age={FILES_FOR}" }}'


def open_run_cache(shared: Path) -> Path:
    """A new run folder for ``UV_CACHE_DIR``: every shared bucket that is not private linked."""
    shared.mkdir(parents=True, exist_ok=True)
    runs = shared.parent / RUNS
    runs.mkdir(exist_ok=True)
    _sweep(runs)
    run = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=runs))
    for bucket in sorted(shared.iterdir()):
        if bucket.is_dir() and not bucket.name.startswith(PRIVATE):
            (run / bucket.name).symlink_to(bucket, target_is_directory=True)
    return run


def private_bytes(run: Path) -> int:
    """Bytes in the run's own buckets so far (what uv fetched for its pages this run)."""
    buckets = [b for b in run.iterdir() if b.name.startswith(PRIVATE) and not b.is_symlink()]
    return sum(f.stat().st_size for b in buckets for f in b.rglob("*") if f.is_file())


def _sweep(runs: Path) -> None:
    """Remove what runs that were killed left (their process is gone)."""
    for folder in runs.iterdir():
        pid = folder.name.split("-", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def close_run_cache(run: Path, shared: Path) -> None:
    """Keep the buckets the run created (not private ones), then remove the run folder."""
    for bucket in sorted(run.iterdir()):
        if bucket.is_symlink() or not bucket.is_dir() or bucket.name.startswith(PRIVATE):
            continue
        if not (shared / bucket.name).exists():
            # another run may keep its own first: this one's copy then goes with the folder
            with contextlib.suppress(OSError):
                bucket.rename(shared / bucket.name)
    shutil.rmtree(run, ignore_errors=True)
