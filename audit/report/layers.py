"""An image's layers, judged: the report and the matrix of what each layer changed.

Pure. The input is the one judge's verdicts over a :class:`~audit.history.model.History`
(:func:`audit.policy.judge.judge_history`), whoever produced it; the output is the report model
every renderer reads (:class:`~audit.report.findings.Report`: one section per layer that changed
something, titled with its history entry, with the loads of the native libraries whose loaded
copy it changed: which copy, whose, who asked and why) and, per Python environment, a matrix
of packages x the layers that changed it (:func:`audit.gate.matrix.columns_matrix`: the same
terminal, Markdown and HTML renderers as the stage matrix). Layers that changed nothing are left
out of both and counted in the title.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from io import StringIO

from rich.console import Console

from audit.errors import UsageError
from audit.gate.matrix import (
    OVERRIDE,
    WAIVED,
    StageMatrix,
    alarming_only,
    columns_matrix,
    matrix_html,
    matrix_markdown,
    matrix_tables,
)
from audit.history.model import History, LayerRef
from audit.history.snapshot import Distribution
from audit.policy.findings import INFO
from audit.policy.judge import LayerVerdict
from audit.redact import redact
from audit.report.findings import Report, Section, ordered, print_footer, render_text

INSTRUCTION_WIDTH = 100


@dataclass(frozen=True)
class JudgedImage:
    """One image's history and the verdict of each of its steps, in order."""

    name: str
    history: History
    verdicts: tuple[LayerVerdict, ...]
    labels: tuple[str, ...] = ()  # the matrix's column for each state, when not the layers'


# BuildKit's spelling of a RUN: ``RUN |2 A=1 B=2 /bin/sh -c CMD # buildkit``: the build args
# it saw and the shell, then the command as written.
_RUN_PREFIX = re.compile(r"^RUN (?:\|\d+ (?:\S+=\S* )*)?/bin/sh -c ")
_BUILDKIT_SUFFIX = " # buildkit"


def short(text: str, width: int = INSTRUCTION_WIDTH) -> str:
    """The instruction as a reader wrote it, on one line of at most ``width`` characters (an
    instruction can be a page of shell)."""
    line = _RUN_PREFIX.sub("RUN ", " ".join(text.split())).removesuffix(_BUILDKIT_SUFFIX)
    return line if len(line) <= width else line[: width - 1] + "…"


def layer_label(ref: LayerRef) -> str:
    """``layer 14 (runtime 3, Dockerfile:41)``: the history index, then what is known of it."""
    known = [f"{ref.stage} {ref.layer}" if ref.stage and ref.layer else ref.stage or ""]
    known.append(ref.origin)
    inside = ", ".join(part for part in known if part)
    return f"layer {ref.index}" + (f" ({inside})" if inside else "")


def section_title(image: str, ref: LayerRef) -> str:
    return f"{image} {layer_label(ref)}: {short(ref.instruction)}"


def layers_report(title: str, images: Sequence[JudgedImage]) -> Report:
    """A section per layer whose step found anything or changed which native copy loads, in
    build order, image after image."""
    sections = tuple(
        Section(section_title(judged.name, verdict.ref), verdict.findings, verdict.loads)
        for judged in images
        for verdict in judged.verdicts
        if verdict.findings or verdict.loads
    )
    return Report(title, sections)


def changed_layers(judged: JudgedImage) -> int:
    return sum(1 for verdict in judged.verdicts if verdict.findings or verdict.loads)


def layer_matrices(judged: JudgedImage) -> list[StageMatrix]:
    """Per environment of the last state: packages x the layers that changed it."""
    history = judged.history
    if not history.states:
        return []
    marks = _marks(judged.verdicts, judged.labels)
    matrices = []
    for env in history.states[-1].environments:
        columns: dict[str, Mapping[str, Distribution]] = {}
        last: Mapping[str, Distribution] | None = None
        for position, state in enumerate(history.states):
            here = state.environment(env.interpreter)
            winners = here.winners() if here is not None else {}
            if winners != last:
                columns[_column(judged.labels, position, state.ref)] = winners
                last = winners
        name = f"{judged.name} {env.interpreter}"
        matrices.append(columns_matrix(name, columns, marks))
    return matrices


def _column(labels: Sequence[str], position: int, ref: LayerRef) -> str:
    """A state's column: its label when given, else ``empty`` before the first layer and
    ``#<history index> <stage>`` after one."""
    if position < len(labels):
        return labels[position]
    if ref.index < 0:
        return "empty"
    return f"#{ref.index}" + (f" {ref.stage}" if ref.stage else "")


def _marks(verdicts: Sequence[LayerVerdict], labels: Sequence[str]) -> dict[tuple[str, str], str]:
    """(column, package) -> ``waived`` or ``override``, as the stage matrix marks them."""
    marks: dict[tuple[str, str], str] = {}
    for position, verdict in enumerate(verdicts, start=1):
        column = _column(labels, position, verdict.ref)
        for finding in verdict.findings:
            if finding.waiver:
                marks[(column, finding.package)] = WAIVED
            elif finding.rule == OVERRIDE:
                marks.setdefault((column, finding.package), OVERRIDE)
    return marks


# --- rendering ------------------------------------------------------------------------------

FORMATS = ("terminal", "json", "markdown", "html")
_MARK = {"error": "✗", "warning": "!", "info": " "}


def layer_lines(judged: JudgedImage) -> list[str]:
    """The terminal's reading of one image: a line per layer that changed something, its
    failing and warning findings below it, its routine changes counted, then the native
    libraries whose loaded copy it changed (``→ libnccl.so.2 loads …: <who> (<why>)``)."""
    lines = [f"{judged.name}: {changed_layers(judged)} of {len(judged.verdicts)} layers changed"]
    for verdict in judged.verdicts:
        if not verdict.findings and not verdict.loads:
            continue
        lines.append(f"  {layer_label(verdict.ref)}: {short(verdict.ref.instruction, 90)}")
        routine: dict[str, int] = {}
        for finding in ordered(verdict.findings):
            if finding.severity == INFO:
                routine[finding.rule] = routine.get(finding.rule, 0) + 1
                continue
            change = f" {finding.before or '-'} -> {finding.after or '-'}"
            note = f" (waived: {finding.waiver})" if finding.waiver else ""
            if finding.askers:
                note += f" (asked for by: {'; '.join(finding.askers)})"
            lines.append(
                f"    {_MARK[finding.severity]} {finding.rule}: {finding.package}{change}{note}"
            )
        if routine:
            counts = ", ".join(f"{n} {rule}" for rule, n in sorted(routine.items()))
            lines.append(f"      {counts}")
        lines += [f"    → {load.describe()}" for load in verdict.loads]
    return lines


def render_layers(title: str, images: Sequence[JudgedImage], fmt: str, width: int = 100) -> str:
    """``images`` in ``fmt``: ``terminal`` (the layer lines, the matrices, each failing finding's
    hint, the summary), ``json`` (the report document), ``markdown`` or ``html`` (the
    matrices, then every finding)."""
    report = layers_report(title, images)
    matrices = [m for judged in images for m in layer_matrices(judged)]
    if fmt == "html":
        return matrix_html(matrices, report)
    if fmt == "markdown":
        lead = "".join(matrix_markdown(m) + "\n" for m in matrices if m.rows)
        return lead + render_text(report, "markdown")
    if fmt == "json":
        return render_text(report, "json")
    if fmt != "terminal":
        raise UsageError(f"--format {fmt}: unknown format", f"use one of: {', '.join(FORMATS)}")
    buffer = StringIO()
    console = Console(file=buffer, width=width, no_color=True, highlight=False, emoji=False)
    for judged in images:
        for line in layer_lines(judged):
            console.print(line, markup=False, soft_wrap=True)
    for matrix in (alarming_only(m) for m in matrices):
        if matrix.rows:
            for table in matrix_tables(matrix, width):
                console.print(table)
    print_footer(report, console)
    return redact(buffer.getvalue())
