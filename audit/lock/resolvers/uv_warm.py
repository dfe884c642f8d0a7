"""The uv backend's read-ahead: what one lock run's layers will fetch, fetched while they run.

A cold lock of N layers is N ``uv pip compile`` runs one after another (each layer resolves
with the earlier ones installed, as given), each waiting on its own round trips to the index,
then a metadata read of what it moved. While the first layer resolves, one background
``uv pip compile`` of every stale layer's requirements together (the base's versions
preferred) fetches, into the same uv cache, the project pages and wheel metadata the later
layers will ask for, and the metadata of every pin it chooses (minus what the base already
has) is read for the layers to take, without a project page: uv's log (``-v``) names each
wheel whose metadata uv fetches, as it fetches it, and each is read at once, beside uv (its
PEP 658 file when uv took one, else range requests into the wheel); when the compile ends, its
``pylock.toml`` output says which wheels were chosen (URL and hashes), and only a chosen wheel
the log did not name is read then. A page a layer or the read-ahead still needs is read once
per run (:class:`ProjectPages`), by whichever asks first.

Invariants: the read-ahead only fetches, it never decides: each layer is still resolved by its
own ``uv pip compile`` with the earlier layers as given, and a pin's metadata is taken from the
read-ahead only for the same name, version, indexes and target (what the layer's own read would
have fetched); an early read (from the log, no hashes known) counts only if it was not a whole
download, which only the pylock's hashes could have checked. A layer of a group being read
ahead waits for the group's background compile (at most :data:`WAIT` seconds) before it reads
what the read-ahead does not hold: the compile started beside the first layer, so by then it
has usually ended, and reading the same pins twice costs more. Layers are grouped by their
indexes and ``pre`` (one background compile each); a read-ahead that fails (layers that
conflict when resolved together, a network hiccup) only costs its own time. Every uv process
of the run works in the run's own uv cache (:mod:`~audit.lock.resolvers.uv_cache`): what one
fetched, the others reuse. :meth:`ReadAhead.stop` ends it: reads not yet started are dropped,
and a background compile still running is killed (the layers are done: nothing will take what
it would fetch). The uv specifics (the command, its environment, how metadata is read) are
given by :mod:`~audit.lock.resolvers.uv`, which owns them.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import tempfile
import threading
import tomllib
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from audit.docker.run_label import work_prefix
from audit.errors import AuditError
from audit.history.snapshot import canonical_name
from audit.host import process as commands
from audit.index import http as http_fetch
from audit.index.http import FetchStats
from audit.index.simple import IndexFile, ProjectPages
from audit.index.wheel_metadata import Metadata
from audit.lock.plan import LayerInputs
from audit.lock.resolvers.job import WORK_PREFIX

# the read-ahead compile's argv for the group's first layer and the work folder
Command = Callable[[LayerInputs, Path], list[str]]


class Reader(Protocol):
    """One pin's metadata: from the wheel file uv chose (no project page), else the indexes."""

    def __call__(
        self,
        inputs: LayerInputs,
        pin: tuple[str, str],
        file: IndexFile | None,
        *,
        stats: FetchStats,
        pages: ProjectPages,
    ) -> Metadata | None: ...


OUTPUT = "pylock.read-ahead.toml"  # uv writes (and reads preferences from) pylock files

# (index URL, extra index URL or "", pre) -> the layers that resolve against them
Group = tuple[str, str, bool]
WORKERS = 16  # metadata reads at once
TIMEOUT = 300.0  # seconds a background compile may take
KEPT_LINES = 200  # of the background compile's log (-v: thousands of lines on a big stack)
WAIT = 60.0  # seconds a layer waits for the background compile before reading for itself
# a wheel (or its PEP 658 metadata file) uv's log names: "Sending fresh GET request for: URL"
_LOGGED_WHEEL = re.compile(r"(https?://[^\s\"'`]+?\.whl)(\.metadata)?(?=[\s\"'`]|$)")


def group_of(inputs: LayerInputs) -> Group:
    return (inputs.index_url, inputs.extra_index_url or "", inputs.pre)


@dataclass
class ReadAhead:
    """The background work of one lock run: pages and metadata read, or being read."""

    command: Command
    environment: Mapping[str, str]  # uv's, with the run's own cache (uv_cache.open_run_cache)
    reader: Reader
    installed: Collection[tuple[str, str]]  # (canonical name, version) the base already has
    cache: Path  # the run's uv cache folder
    pages: ProjectPages = field(default_factory=ProjectPages)
    stats: FetchStats = field(default_factory=FetchStats)
    _reads: dict[tuple[Group, str, str], Future[Metadata | None]] = field(default_factory=dict)
    # (group, name, version) -> (the wheel's URL, its read) for each pin uv's log named
    _early: dict[tuple[Group, str, str], tuple[str, Future[Metadata | None]]] = field(
        default_factory=dict
    )
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(WORKERS))
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _compiled: dict[Group, threading.Event] = field(default_factory=dict)  # set when scheduled

    def start(self, layers: Sequence[LayerInputs]) -> None:
        """Read ahead for every group of at least two layers (one layer alone is resolved by
        its own compile at once: nothing to read ahead)."""
        groups: dict[Group, list[LayerInputs]] = {}
        for inputs in layers:
            groups.setdefault(group_of(inputs), []).append(inputs)
        if any(len(members) > 1 for members in groups.values()):
            self._pool.submit(http_fetch.prepare)  # the first read does not wait for imports
        for members in groups.values():
            if len(members) > 1:
                self._compiled[group_of(members[0])] = threading.Event()
                thread = threading.Thread(target=self._run, args=(members,), daemon=True)
                self._threads.append(thread)
                thread.start()

    def stop(self) -> None:
        """Reads not yet started are dropped; a background compile still running is killed
        (its watchdog sees the stop) and its thread waited for."""
        self._stop.set()
        for compiled in self._compiled.values():
            compiled.set()  # nobody waits any more
        for thread in self._threads:
            thread.join()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def take(
        self, inputs: LayerInputs, pins: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], Metadata]:
        """The metadata read ahead for those of ``pins`` (canonical name, version) it holds or
        is reading (waited for: the background compile first, at most :data:`WAIT` seconds,
        unless uv's log already named a wheel of every pin, then the reads); a read that
        failed is left to the layer."""
        group = group_of(inputs)
        with self._lock:
            early = {pin: self._early.get((group, *pin), ("", None))[1] for pin in pins}
        compiled = self._compiled.get(group)
        if compiled is not None and not all(early.values()):
            compiled.wait(WAIT)
        with self._lock:
            held = {pin: self._reads.get((group, *pin)) or early[pin] for pin in pins}
        found = {pin: _result(read) for pin, read in held.items() if read is not None}
        return {pin: meta for pin, meta in found.items() if meta is not None and _checked(meta)}

    def _run(self, members: list[LayerInputs]) -> None:
        work = Path(tempfile.mkdtemp(prefix=work_prefix(WORK_PREFIX)))
        try:
            chosen = self._compile(work, members)
        except (AuditError, OSError):
            chosen = {}  # the layers fetch for themselves: a read-ahead only ever saves time
        finally:
            shutil.rmtree(work, ignore_errors=True)
        try:
            self._schedule(members[0], chosen)
        finally:
            self._compiled[group_of(members[0])].set()

    def _schedule(
        self, inputs: LayerInputs, chosen: Mapping[tuple[str, str], IndexFile | None]
    ) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            group = group_of(inputs)
            for pin, file in chosen.items():
                url, early = self._early.get((group, *pin), ("", None))
                self._reads[group, *pin] = (
                    self._confirmed(inputs, pin, file, early)
                    if early is not None and file is not None and file.url == url
                    else self._pool.submit(self._read, inputs, pin, file)
                )

    def _confirmed(
        self,
        inputs: LayerInputs,
        pin: tuple[str, str],
        file: IndexFile,
        early: Future[Metadata | None],
    ) -> Future[Metadata | None]:
        """The early read of ``file``, or (it failed, or was a whole download no hash checked)
        a read of it again, with the hashes the pylock output gives."""
        confirmed: Future[Metadata | None] = Future()

        def settle(done: Future[Metadata | None]) -> None:
            meta = _result(done)
            if meta is not None and meta.how != "download":
                confirmed.set_result(meta)
                return
            try:
                again = self._pool.submit(self._read, inputs, pin, file)
            except RuntimeError:  # the run is ending: nobody takes it
                confirmed.set_result(None)
                return
            again.add_done_callback(lambda read: confirmed.set_result(_result(read)))

        early.add_done_callback(settle)
        return confirmed

    def _logged(self, inputs: LayerInputs, line: str) -> None:
        """Start reading, at once, the metadata of a wheel uv's log line names (once per pin:
        the first wheel named): its PEP 658 file when uv fetched that, else by range requests,
        as uv does."""
        if ".whl" not in line or self._stop.is_set():
            return
        for match in _LOGGED_WHEEL.finditer(line):
            url, offered = match.group(1), match.group(2) is not None
            filename = url.rsplit("/", 1)[-1]
            try:
                name, version, _, _ = parse_wheel_filename(filename)
            except InvalidWheelFilename:
                continue
            pin = (str(name), str(version))
            key = (group_of(inputs), *pin)
            if key in self._early or pin in self.installed:
                continue
            file = IndexFile(filename, url, {}, metadata_hashes={} if offered else None)
            with self._lock:
                self._early[key] = (url, self._pool.submit(self._read, inputs, pin, file))

    def _compile(
        self, work: Path, members: list[LayerInputs]
    ) -> dict[tuple[str, str], IndexFile | None]:
        """Every member's requirements resolved together, base versions preferred: each pin
        chosen (canonical name, version) but the base's, with the wheel uv chose for it."""
        for inputs in members:
            for relpath, data in inputs.files.items():
                (work / "recipe" / relpath).parent.mkdir(parents=True, exist_ok=True)
                (work / "recipe" / relpath).write_bytes(data)
        union = "".join(f"-r {inputs.requirements}\n" for inputs in members)
        (work / "recipe" / "layer-audit-read-ahead.in").write_text(union)
        (work / OUTPUT).write_text(_preferences(self.installed))
        argv = self.command(members[0], work)
        on_line = functools.partial(self._logged, members[0])
        done = commands.stream(argv, on_line, cwd=work / "recipe", env=self.environment,
                               check=False, timeout=TIMEOUT, cancel=self._stop,
                               keep=KEPT_LINES)  # fmt: skip
        if done.returncode != 0 or self._stop.is_set():
            return {}
        chosen = _chosen((work / OUTPUT).read_text())
        return {pin: file for pin, file in chosen.items() if pin not in self.installed}

    def _read(
        self, inputs: LayerInputs, pin: tuple[str, str], file: IndexFile | None
    ) -> Metadata | None:
        if self._stop.is_set():
            return None
        return self.reader(inputs, pin, file, stats=self.stats, pages=self.pages)


def _result(read: Future[Metadata | None]) -> Metadata | None:
    """The read's metadata; None for any failure (the layer then reads the pin itself, and
    meets the failure there, in its own words)."""
    try:
        return read.result()
    except (Exception, CancelledError):  # a read-ahead only ever saves time
        return None


def _checked(meta: Metadata) -> bool:
    """Whether a read's metadata may be taken: a whole download counts only if its hashes were
    known to check it (an early read, from uv's log, knows none)."""
    return meta.how != "download" or bool(meta.file.hashes)


def _preferences(installed: Collection[tuple[str, str]]) -> str:
    """A pylock file of the base's versions: uv prefers what its output file already pins."""
    head = 'lock-version = "1.0"\ncreated-by = "layer-audit"\n'
    return head + "".join(
        f"\n[[packages]]\nname = {json.dumps(name)}\nversion = {json.dumps(version)}\n"
        for name, version in sorted(installed)
    )


def _chosen(text: str) -> dict[tuple[str, str], IndexFile | None]:
    """(canonical name, version) -> the wheel uv's pylock output names for the target (its
    URL and hashes), None when it names none (an sdist: the layer reads it its own way)."""
    try:
        packages = tomllib.loads(text).get("packages", [])
    except tomllib.TOMLDecodeError:
        return {}
    chosen: dict[tuple[str, str], IndexFile | None] = {}
    for package in packages:
        wheels = package.get("wheels") or [{}]
        url, hashes = wheels[0].get("url"), wheels[0].get("hashes") or {}
        file = IndexFile(url.rsplit("/", 1)[-1], url, dict(hashes)) if url else None
        chosen[canonical_name(str(package["name"])), str(package["version"])] = file
    return chosen
