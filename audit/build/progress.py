"""BuildKit's ``--progress=plain`` output, parsed: vertices (build steps) and guard markers.

Pure parsing plus a small rich view. Plain progress prints, per vertex ``#N``::

    #6 [v1 2/3] RUN --mount=... pip install ...
    #6 0.412 Collecting alpha==1.0
    #6 12.80 Downloading torch-2.9.0-cp311-cp311-manylinux_2_28_aarch64.whl (526.0 MB)
    #6 31.02    ━━━━━━━━━━━━━━╸━━━━━━━ 412.0/526.0 MB 45.1 MB/s eta 0:00:03
    #6 DONE 3.1s            (or: #6 CACHED, or: #6 ERROR: ...)

Each vertex keeps when it started (the view's clock), its elapsed time (BuildKit's ``DONE``
seconds once finished) and its last output line, cleaned (no ANSI escapes, the text after the
last carriage return, redacted) and, for pip's progress bar, joined to the file it downloads:
``Downloading torch-2.9.0-….whl 412.0/526.0 MB``. A line without a ``#N`` prefix (a carriage
return the pipe turned into a line break) belongs to the vertex that printed last.

The guard prints ``LAYER-AUDIT-VIOLATION {json}`` lines, which arrive as vertex output.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from audit.redact import redact
from audit.recipe.model import ArgLayer, EnvLayer, Recipe

VIOLATION = "LAYER-AUDIT-VIOLATION"
GUARD_ERROR = "LAYER-AUDIT-GUARD-ERROR"
_TITLE = re.compile(r"^#(?P<id>\d+) \[(?P<stage>[^\] ]+) (?P<n>\d+)/(?P<total>\d+)\] (?P<op>.*)$")
_STATUS = re.compile(r"^#(?P<id>\d+) (?P<status>DONE (?P<secs>[\d.]+)s|CACHED|ERROR: .*|CANCELED)$")
_OUTPUT = re.compile(r"^#(?P<id>\d+) (?P<at>[\d.]+) (?P<text>.*)$")
_OTHER = re.compile(r"^#\d+ ")  # BuildKit's own lines (other vertices, sha256 transfers)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DOWNLOADING = re.compile(r"^Downloading (?P<what>\S+)")
_BAR = re.compile(r"(?P<amount>[\d.]+/[\d.]+ [kMG]?i?B)\b")
_RUNNING = "running"
_STYLES = {"done": "green", "cached": "dim", "error": "bold red", _RUNNING: "yellow"}
LAST_WIDTH = 90  # characters of a step's last output line shown
HEARTBEAT = 5.0  # seconds: on a pipe, a running step is reported at least this often


@dataclass
class Vertex:
    """One build step of a stage: ``[v2 3/5] RUN ...``; ``started`` is the view's clock when
    it first showed, ``seconds`` BuildKit's own time once it finished."""

    stage: str
    position: str
    operation: str
    status: str = _RUNNING
    started: float = 0.0
    seconds: float | None = None
    last: str = ""
    downloading: str = ""
    offset: float = 0.0  # BuildKit's time of its latest output line, from the step's start

    def elapsed(self, now: float) -> float:
        """Seconds since it started (never less than BuildKit's own offset of its latest
        line); BuildKit's ``DONE`` time once it has finished."""
        if self.seconds is not None:
            return self.seconds
        return max(0.0, now - self.started, self.offset)

    def take(self, text: str) -> None:
        """One line of this step's output, cleaned; pip's progress bar names its file."""
        line = clean(text)
        if not line:
            return
        if match := _DOWNLOADING.match(line):
            self.downloading = f"Downloading {short_name(match['what'])}"
        bar = _BAR.search(line)
        if bar and ("━" in line or " eta " in line) and self.downloading:
            line = f"{self.downloading} {bar['amount']}"
        self.last = line[:LAST_WIDTH]


def clean(text: str) -> str:
    """The text a terminal would show last: after the last carriage return, no ANSI escape
    sequences, no credentials (:func:`audit.redact.redact`), trimmed."""
    shown = _ANSI.sub("", text).rsplit("\r", 1)[-1]
    return redact(shown.strip())


def short_name(what: str) -> str:
    """A URL's file name (``https://host/x/torch-2.9.0….whl`` -> ``torch-2.9.0….whl``)."""
    return what.rstrip("/").rsplit("/", 1)[-1] if "://" in what else what


@dataclass
class Progress:
    """Everything seen so far in one build's output; ``clock`` times the steps."""

    vertices: dict[str, Vertex] = field(default_factory=dict)
    violations: list[dict[str, Any]] = field(default_factory=list)
    guard_errors: list[str] = field(default_factory=list)
    clock: Callable[[], float] = time.monotonic
    current: str | None = None  # the vertex that printed last

    def feed(self, line: str) -> bool:
        """Take one output line; True when a step started or finished."""
        if match := _TITLE.match(line):
            known = self.vertices.get(match["id"])
            if known is None or known.status != _RUNNING:
                self.vertices[match["id"]] = Vertex(
                    match["stage"], f"{match['n']}/{match['total']}", match["op"],
                    started=self.clock(),
                )  # fmt: skip
                self.current = match["id"]
                return True
            return False
        if match := _STATUS.match(line):
            vertex = self.vertices.get(match["id"])
            if vertex is not None:
                vertex.status = match["status"].split(":")[0].lower()
                vertex.seconds = float(match["secs"]) if match["secs"] else None
                if vertex.seconds is None and vertex.status != "cached":
                    vertex.seconds = vertex.elapsed(self.clock())
                return True
            return False
        if match := _OUTPUT.match(line):
            self.current = match["id"]
            self._output(match["text"])
            if vertex := self.vertices.get(match["id"]):
                vertex.offset = max(vertex.offset, float(match["at"]))
                vertex.take(match["text"])
        elif not _OTHER.match(line) and self.current in self.vertices:
            self.vertices[self.current].take(line)  # a carriage return split pip's line
        return False

    def running(self) -> list[Vertex]:
        return [vertex for vertex in self.vertices.values() if vertex.status == _RUNNING]

    def _output(self, text: str) -> None:
        if text.startswith(VIOLATION + " "):
            try:
                self.violations.append(json.loads(text[len(VIOLATION) + 1 :]))
            except json.JSONDecodeError:
                self.guard_errors.append(text)
        elif text.startswith(GUARD_ERROR + " "):
            self.guard_errors.append(text[len(GUARD_ERROR) + 1 :])


def parse(lines: Iterable[str]) -> Progress:
    progress = Progress()
    for line in lines:
        progress.feed(line)
    return progress


def step_labels(recipe: Recipe) -> dict[tuple[str, str], str]:
    """(stage, BuildKit step number) -> the recipe layer it builds, e.g. ``v2 layer 1 (...)``.

    BuildKit numbers a stage's steps from its FROM when that pulls an image (a stage built on
    an image does; ``FROM v1 AS v2`` makes no step), then each RUN and COPY; ENV and ARG make
    no step, so env and arg layers are skipped when counting.
    """
    labels: dict[tuple[str, str], str] = {}
    number = 0
    for step in recipe.steps():
        if step.position == 1:  # a new stage: count its steps afresh
            on_image = recipe.parent(step.stage) is None
            number = 1 if on_image else 0
            if number:
                source = recipe.from_ref(step.stage)
                labels[(step.stage.name, "1")] = f"{step.stage.name} FROM {source}"
        if not isinstance(step.layer, EnvLayer | ArgLayer):
            number += 1
            labels[(step.stage.name, str(number))] = step.label
    return labels


def _label(vertex: Vertex, labels: Mapping[tuple[str, str], str]) -> str:
    number = vertex.position.split("/")[0]
    return labels.get((vertex.stage, number)) or vertex.operation[:90]


def duration(seconds: float) -> str:
    """``0.8s``, ``42s``, ``3m05s``, ``1h02m``: short enough for a table cell."""
    if seconds < 9.95:  # would round to 10.0
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _status(vertex: Vertex, now: float) -> str:
    """``running 1m12s``, ``done 3.1s``, ``cached``, ``error 12s``."""
    word = vertex.status.split(" ")[0]
    if word == "cached":
        return word
    return f"{word} {duration(vertex.elapsed(now))}"


def step_table(
    progress: Progress,
    title: str,
    labels: Mapping[tuple[str, str], str] | None = None,
    now: float | None = None,
) -> Table:
    """One row per step: stage, step, recipe layer, status with elapsed time, last output."""
    moment = progress.clock() if now is None else now
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for column in ("stage", "step", "layer", "status"):
        table.add_column(column, overflow="ellipsis", no_wrap=True)
    table.add_column("last output", overflow="ellipsis", no_wrap=True, ratio=1)
    for vertex in progress.vertices.values():
        style = _STYLES.get(vertex.status.split(" ")[0], "")  # "done 0.8s" -> "done"
        status = Text(_status(vertex, moment), style=style)
        last = Text(vertex.last if vertex.status == _RUNNING else "", style="dim")
        label = Text(_label(vertex, labels or {}))
        table.add_row(vertex.stage, vertex.position, label, status, last)
    return table


_LIVE_LOGS: set[Path] = set()  # live logs this process has started (then appended to)


class LiveView:
    """What a build shows while it runs. On a terminal: a live table of steps, redrawn four
    times a second (elapsed times move even when a step prints nothing). On a pipe (CI logs):
    one timestamped line per finished step, and a line per running step whenever nothing was
    printed for ``heartbeat`` seconds, with its elapsed time and last output, so a 10-minute
    CUDA layer is never silent. ``log_path`` is printed first; every line also goes, redacted,
    to ``log_path``'s live copy (``build.live.log``), which can be followed while it runs.
    """

    def __init__(
        self,
        console: Console,
        title: str,
        labels: Mapping[tuple[str, str], str] | None = None,
        *,
        log_path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        heartbeat: float | None = HEARTBEAT,
    ) -> None:
        self.console = console
        self.title = title
        self.labels = labels or {}
        self.progress = Progress(clock=clock)
        self.log_path = log_path
        self.wall = wall
        self.heartbeat = heartbeat
        self._live: Live | None = None
        self._printed: set[tuple[str, str]] = set()
        self._said = clock()  # when the pipe view last printed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._copy: IO[str] | None = None

    @property
    def live_log(self) -> Path | None:
        """Where the output goes while the build runs (beside the final log)."""
        return self.log_path.with_name("build.live.log") if self.log_path else None

    def __enter__(self) -> LiveView:
        self._open_copy()
        if self.log_path is not None:
            self.console.print(
                f"{self.title}: build log {self.log_path} (follow it live: tail -f "
                f"{self.live_log})",
                markup=False,
                highlight=False,
                soft_wrap=True,  # never break a path in two: it is copied into a shell
            )
        if self.console.is_terminal:
            self._live = Live(
                console=self.console,
                refresh_per_second=4,
                transient=False,
                get_renderable=self._table,
            )
            self._live.__enter__()
        elif self.heartbeat:
            self._ticker = threading.Thread(target=self._tick_loop, daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(None, None, None)
        if self._copy is not None:
            self._copy.close()

    def _table(self) -> Table:
        """The table, drawn under the lock: rich's refresh thread calls this while the build's
        lines are being fed."""
        with self._lock:
            return step_table(self.progress, self.title, self.labels)

    def feed(self, line: str) -> None:
        """One line of BuildKit's output."""
        with self._lock:
            self._copy_line(line)
            changed = self.progress.feed(line)
            if changed and self._live is None:
                self._print_steps()

    def _copy_line(self, line: str) -> None:
        """Append ``line``, redacted, to the live copy; a copy that fails (a full disk) is
        dropped, never the build: the final log is written at the end regardless."""
        if self._copy is None:
            return
        try:
            self._copy.write(redact(line) + "\n")
            self._copy.flush()
        except OSError:
            with contextlib.suppress(OSError):
                self._copy.close()
            self._copy = None

    def tick(self) -> None:
        """On a pipe: when nothing was printed for ``heartbeat`` seconds, a line per running
        step (elapsed time, last output). Called by the view's own thread once a second."""
        with self._lock:
            now = self.progress.clock()
            if self._live is not None or self.heartbeat is None:
                return
            if now - self._said < self.heartbeat:
                return
            for vertex in self.progress.running():
                tail = f": {vertex.last}" if vertex.last else ""
                self._say(vertex, f"{_status(vertex, now)}{tail}")

    def _tick_loop(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()

    def _print_steps(self) -> None:
        """A line for each step that finished since the last call (a running step is said by
        :meth:`tick`)."""
        now = self.progress.clock()
        for key, vertex in self.progress.vertices.items():
            if vertex.status != _RUNNING and (key, vertex.stage) not in self._printed:
                self._printed.add((key, vertex.stage))
                self._say(vertex, f"{_status(vertex, now)}: {_label(vertex, self.labels)}")

    def _say(self, vertex: Vertex, text: str) -> None:
        stamp = self.wall().strftime("%H:%M:%S")
        self.console.print(
            f"{stamp} [{vertex.stage} {vertex.position}] {text}", markup=False, highlight=False
        )
        self._said = self.progress.clock()

    def _open_copy(self) -> None:
        """The live copy of the output: emptied by the first view of this process, then
        appended to by the next stage's; a copy that cannot be written is skipped silently
        (the final log is written at the end regardless)."""
        live = self.live_log
        if live is None:
            return
        try:
            live.parent.mkdir(parents=True, exist_ok=True)
            self._copy = live.open("a" if live in _LIVE_LOGS else "w", encoding="utf-8")
        except OSError:
            self._copy = None
            return
        _LIVE_LOGS.add(live)
