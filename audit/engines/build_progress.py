"""BuildKit's ``--progress=plain`` output, parsed: vertices (build steps) and guard markers.

Pure parsing plus a small rich view. Plain progress prints, per vertex ``#N``::

    #6 [v1 2/3] RUN --mount=... pip install ...
    #6 0.412 Collecting alpha==1.0
    #6 DONE 3.1s            (or: #6 CACHED, or: #6 ERROR: ...)

The guard prints ``LAYER-AUDIT-VIOLATION {json}`` lines, which arrive as vertex output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from audit.plan.recipe import EnvLayer, Recipe

VIOLATION = "LAYER-AUDIT-VIOLATION"
GUARD_ERROR = "LAYER-AUDIT-GUARD-ERROR"
_TITLE = re.compile(r"^#(?P<id>\d+) \[(?P<stage>[^\] ]+) (?P<n>\d+)/(?P<total>\d+)\] (?P<op>.*)$")
_STATUS = re.compile(r"^#(?P<id>\d+) (?P<status>DONE [\d.]+s|CACHED|ERROR: .*|CANCELED)$")
_OUTPUT = re.compile(r"^#\d+ [\d.]+ (?P<text>.*)$")
_RUNNING = "running"
_STYLES = {"done": "green", "cached": "dim", "error": "bold red", _RUNNING: "yellow"}


@dataclass
class Vertex:
    """One build step of a stage: ``[v2 3/5] RUN ...``."""

    stage: str
    position: str
    operation: str
    status: str = _RUNNING


@dataclass
class Progress:
    """Everything seen so far in one build's output."""

    vertices: dict[str, Vertex] = field(default_factory=dict)
    violations: list[dict[str, Any]] = field(default_factory=list)
    guard_errors: list[str] = field(default_factory=list)

    def feed(self, line: str) -> bool:
        """Take one output line; True when the step table changed."""
        if match := _TITLE.match(line):
            known = self.vertices.get(match["id"])
            if known is None or known.status != _RUNNING:
                self.vertices[match["id"]] = Vertex(
                    match["stage"], f"{match['n']}/{match['total']}", match["op"]
                )
                return True
            return False
        if match := _STATUS.match(line):
            vertex = self.vertices.get(match["id"])
            if vertex is not None:
                vertex.status = match["status"].split(":")[0].lower()
                return True
            return False
        if match := _OUTPUT.match(line):
            self._output(match["text"])
        return False

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

    BuildKit numbers a stage's steps from its FROM when that pulls an image (only v1's does:
    ``FROM v1 AS v2`` makes no step), then each RUN and COPY; ENV and ARG make no step, so env
    layers are skipped when counting.
    """
    labels: dict[tuple[str, str], str] = {}
    number = 0
    for step in recipe.steps():
        if step.position == 1:  # a new stage: count its steps afresh
            number = 1 if step.stage_number == 1 else 0
            if number:
                labels[(step.stage.name, "1")] = f"{step.stage.name} FROM {recipe.base_ref}"
        if not isinstance(step.layer, EnvLayer):
            number += 1
            labels[(step.stage.name, str(number))] = step.label
    return labels


def _label(vertex: Vertex, labels: Mapping[tuple[str, str], str]) -> str:
    number = vertex.position.split("/")[0]
    return labels.get((vertex.stage, number)) or vertex.operation[:90]


def step_table(
    progress: Progress, title: str, labels: Mapping[tuple[str, str], str] | None = None
) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for column in ("stage", "step", "layer", "status"):
        table.add_column(column, overflow="ellipsis", no_wrap=True)
    for vertex in progress.vertices.values():
        style = _STYLES.get(vertex.status.split(" ")[0], "")  # "done 0.8s" -> "done"
        status = Text(vertex.status, style=style)
        table.add_row(vertex.stage, vertex.position, Text(_label(vertex, labels or {})), status)
    return table


class LiveView:
    """A live table of steps on a terminal; one line per finished step otherwise (CI logs)."""

    def __init__(
        self, console: Console, title: str, labels: Mapping[tuple[str, str], str] | None = None
    ) -> None:
        self.console = console
        self.title = title
        self.labels = labels or {}
        self.progress = Progress()
        self._live: Live | None = None
        self._printed: set[tuple[str, str]] = set()

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(step_table(self.progress, self.title, self.labels))
            self._live.__exit__(None, None, None)

    def feed(self, line: str) -> None:
        changed = self.progress.feed(line)
        if not changed:
            return
        if self._live is not None:
            self._live.update(step_table(self.progress, self.title, self.labels))
            return
        for key, vertex in self.progress.vertices.items():
            if vertex.status != _RUNNING and (key, vertex.stage) not in self._printed:
                self._printed.add((key, vertex.stage))
                self.console.print(
                    f"  [{vertex.stage} {vertex.position}] {vertex.status}: "
                    f"{_label(vertex, self.labels)}",
                    markup=False,
                    highlight=False,
                )
