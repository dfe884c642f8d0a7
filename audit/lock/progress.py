"""Live progress of one layer's lock: what it is doing, for how long, and the resolver's last
line, so a long resolution never sits silent.

On a terminal a status line (rich) is redrawn in place; on a pipe (CI logs) one timestamped
line is printed per step and then every :data:`PIPE_EVERY` seconds while a step lasts. The
driver and the uv backend announce their steps with lines that start with :data:`STEP_MARK`
(``installing pip-tools``, ``resolving``, ``reading metadata``); every other line of output is
kept as "the last line". Progress goes to stderr; nothing of it is part of any result.

Invariant: the heartbeat thread only reads the state the output callback writes (one string and
one float, replaced whole), and it is stopped before :class:`LockProgress` leaves its ``with``.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import Any, TextIO

from audit.redact import redact

STEP_MARK = "layer-audit: "
PIPE_EVERY = 2.0
LAST_LINE_WIDTH = 90


class LockProgress:
    """Progress of one layer: ``with LockProgress(label) as progress: ... progress.feed(line)``."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.step = "starting"
        self.last = ""
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status: Any = None

    @property
    def interactive(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def feed(self, line: str) -> None:
        """One line of the resolver's output: a step announcement, or the new last line."""
        text = redact(line.strip())
        if text.startswith(STEP_MARK):
            self.step = text[len(STEP_MARK) :]
            if not self.interactive:
                self._print_line()
        elif text:
            self.last = text[:LAST_LINE_WIDTH]

    def describe(self) -> str:
        elapsed = time.monotonic() - self.started
        tail = f": {self.last}" if self.last else ""
        return f"{self.label}: {self.step} {elapsed:.0f}s{tail}"

    def _print_line(self) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] {self.describe()}", file=self.stream, flush=True)

    def _beat(self) -> None:
        while not self._stop.wait(PIPE_EVERY if not self.interactive else 0.5):
            if self._status is not None:
                from rich.markup import escape

                self._status.update(escape(self.describe()))
            else:
                self._print_line()

    def __enter__(self) -> LockProgress:
        if self.interactive:
            from rich.console import Console
            from rich.markup import escape

            console = Console(file=self.stream, highlight=False)
            self._status = console.status(escape(self.describe()))
            self._status.start()
        else:
            self._print_line()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._status is not None:
            self._status.stop()
