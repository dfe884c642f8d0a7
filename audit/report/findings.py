"""Findings rendered three ways: a rich terminal table, JSON, and Markdown for pull requests.

Host only (uses rich). JSON schema ``layer-audit.report/1``::

    {"schema": "layer-audit.report/1", "title": str, "verdict": "pass" | "fail",
     "counts": {"error": n, "warning": n, "info": n},
     "sections": [{"title": str, "counts": {...}, "findings": [Finding.to_json(), ...],
                   "loads": [...]}]}

Each finding has the keys rule, severity, package, before, after, message, where, hint, waiver,
waiver_index, and where known image, stage, layer, askers, preset_rule and symbol (a
``missing-symbol`` finding's subject); a walked layer's section also lists, where it changed
that, which copy of each native library loads and why (``loads``, absent when none)
(``audit/schemas/report.schema.json``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from io import StringIO
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from audit.errors import EXIT_OK, EXIT_VIOLATION, UsageError
from audit.policy.findings import ERROR, INFO, SEVERITIES, WARNING, Finding
from audit.policy.system_rules import LoadChange
from audit.redact import redact, redact_json
from audit.report import json_text

if TYPE_CHECKING:
    from rich.table import Table  # imported where a table is made: the gate may draw none

REPORT_SCHEMA = "layer-audit.report/1"
FORMATS = ("terminal", "json", "markdown")
# Most alarming first: a reviewer reads downgrades before anything else.
RULE_ORDER = (
    "downgraded",
    "removed",
    "variant",
    "waiver-expired",
    "requirement",
    "lockstep",
    "cuda-suffix",
    "forbidden",
    "rebuilt",
    "shadowed",
    "unparsable-version",
    "upgraded",
    "added",
)
NOT_AUDITED = "not-audited"  # an image with no base record: see audit.gate.unrecorded
DETAILS_AFTER = 10  # Markdown tables longer than this fold into <details>
_STYLE = {ERROR: "bold red", WARNING: "yellow", INFO: "dim"}
SEVERITY_ICON = {ERROR: "❌", WARNING: "⚠️", INFO: "ℹ️"}


@dataclass(frozen=True)
class Section:
    """Findings of one part of a run, e.g. one layer or one interpreter; ``loads``: which copy
    of each native library loads after a walked layer, where that changed."""

    title: str
    findings: tuple[Finding, ...]
    loads: tuple[LoadChange, ...] = ()


@dataclass(frozen=True)
class Report:
    """A run's findings by section. Frozen, so what is derived from the sections is computed
    on first use and kept (a fleet's gate reads its 8,400 findings a dozen times)."""

    title: str
    sections: tuple[Section, ...]

    @cached_property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for section in self.sections for f in section.findings)

    @cached_property
    def failed(self) -> bool:
        return any(f.fails for f in self.findings)

    @property
    def counts(self) -> dict[str, int]:
        """A new dict each time (a caller may change it); counted once."""
        return dict(self._counts)

    @cached_property
    def _counts(self) -> dict[str, int]:
        return count(self.findings)


_SEVERITY = attrgetter("severity")


def count(findings: tuple[Finding, ...]) -> dict[str, int]:
    """Findings by severity, every severity named (most serious first), in one pass."""
    tally = Counter(map(_SEVERITY, findings))
    return {severity: tally[severity] for severity in SEVERITIES}


_SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}
_RULE_RANK = {rule: rank for rank, rule in enumerate(RULE_ORDER)}


def ordered(findings: tuple[Finding, ...]) -> list[Finding]:
    """Severity first, then the alarming rules first (downgrades lead; a rule not in
    :data:`RULE_ORDER` after them all), then by package; stable."""
    last = len(RULE_ORDER)

    def key(finding: Finding) -> tuple[int, int, str]:
        severity = _SEVERITY_RANK.get(finding.severity)
        if severity is None:
            raise ValueError(f"{finding.severity!r} is not a severity")
        return severity, _RULE_RANK.get(finding.rule, last), finding.package

    return sorted(findings, key=key)


def report_exit_code(report: Report) -> int:
    return EXIT_VIOLATION if report.failed else EXIT_OK


def plural(number: int, word: str) -> str:
    """``1 error``, ``2 errors``, ``3 info`` (a mass noun), ``0 warnings``."""
    return f"{number} {word}{'s' if number != 1 and word != INFO else ''}"


def severity_tally(counts: Mapping[str, int]) -> str:
    """``0 errors, 2 warnings, 5 info``: every severity, most serious first."""
    return ", ".join(plural(counts.get(s, 0), s) for s in SEVERITIES)


def not_audited_images(report: Report) -> list[str]:
    """The images ``report`` calls not audited (no base record), in report order, each once."""
    names = [f.image or f.where for f in report.findings if f.rule == NOT_AUDITED]
    return list(dict.fromkeys(names))


def summary_line(report: Report) -> str:
    verdict = "FAIL" if report.failed else "PASS"
    tally = severity_tally(report.counts)
    unaudited = not_audited_images(report)
    if unaudited:
        tally += f"; {len(unaudited)} not audited: {', '.join(unaudited)}"
    return f"{report.title}: {verdict} ({tally})"


# --- terminal ----------------------------------------------------------------------------


# Rules whose message only restates "package before -> after: rule": their note stays empty.
_PLAIN_CHANGES = frozenset({"added", "removed", "upgraded", "downgraded", "variant", "rebuilt"})


def _note(finding: Finding) -> str:
    """What the rule, package and change columns do not already say."""
    parts = [finding.asked_for] if finding.rule in _PLAIN_CHANGES else [finding.message]
    parts = [part for part in parts if part]
    if finding.waiver:
        parts.append(f"waived: {finding.waiver}")
    return "\n".join(parts)


def _change(finding: Finding) -> str:
    if finding.before is None and finding.after is None:
        return ""
    return f"{finding.before or '-'} → {finding.after or '-'}"


def _table(title: str, severity: str, findings: list[Finding]) -> Table:
    from rich.table import Table

    style = _STYLE[severity]
    heading = f"{escape(title)}: [{style}]{len(findings)} {severity}[/]"
    table = Table(title=heading, title_justify="left", header_style="bold", expand=False)
    table.add_column("rule", no_wrap=True)
    table.add_column("package", overflow="fold")
    table.add_column("change", overflow="fold")
    table.add_column("note", overflow="fold", ratio=1)
    for finding in findings:
        table.add_row(
            f"[{style}]{escape(finding.rule)}[/]",
            escape(finding.package),
            _change(finding),
            escape(_note(finding)),
        )
    return table


def _print_section(section: Section, console: Console) -> None:
    if not section.findings:
        console.print(f"{escape(section.title)}: no changes")
    in_order = ordered(section.findings)
    for severity in SEVERITIES:
        findings = [f for f in in_order if f.severity == severity]
        if findings:
            console.print(_table(section.title, severity, findings))


def _hints(report: Report) -> dict[str, list[str]]:
    """Each distinct hint of a failing finding, with what it is about (said once, not per row)."""
    hints: dict[str, list[str]] = {}
    # filtered first: the order is a stable sort's, so the kept findings keep their order
    for finding in ordered(tuple(f for f in report.findings if f.fails and f.hint)):
        subject = f"{finding.package or finding.where} ({finding.rule})"
        hints.setdefault(finding.hint, []).append(subject)
    return hints


def print_report(report: Report, console: Console) -> None:
    """One table per section and severity (errors first), each error's hint, a summary line."""
    for section in report.sections:
        _print_section(section, console)
    print_footer(report, console)


def print_footer(report: Report, console: Console) -> None:
    """Each distinct hint of a failing finding once, then the summary line."""
    for hint, subjects in _hints(report).items():
        console.print(f"[bold red]{escape(', '.join(subjects))}[/]: hint:")
        console.print(escape(hint))
    style = "bold red" if report.failed else "bold green"
    console.print(f"[{style}]{escape(summary_line(report))}[/]")


# --- JSON --------------------------------------------------------------------------------


def report_json(report: Report) -> dict[str, Any]:
    """The report as JSON data; every string redacted (no URL userinfo, no token)."""
    return dict(redact_json(report_document(report)))


def report_document(report: Report) -> dict[str, Any]:
    """:func:`report_json` before redaction: written only through
    :func:`audit.report.json_text.redacted_dumps`, which redacts every string as it writes."""
    unaudited = not_audited_images(report)
    return {
        "schema": REPORT_SCHEMA,
        "title": report.title,
        "verdict": "fail" if report.failed else "pass",
        "counts": report.counts,
        **({"not_audited": unaudited} if unaudited else {}),
        "sections": [
            {
                "title": section.title,
                "counts": count(section.findings),
                "findings": [f.to_json() for f in ordered(section.findings)],
                **({"loads": [load_json(load) for load in section.loads]} if section.loads else {}),
            }
            for section in report.sections
        ],
    }


def load_json(load: LoadChange) -> dict[str, Any]:
    """One load change as the report's JSON writes it (every field, ``before`` a list)."""
    return {
        "soname": load.soname, "path": load.path, "owner": load.owner, "version": load.version,
        "requirer": load.requirer, "reason": load.reason, "entry": load.entry,
        "before": list(load.before),
    }  # fmt: skip


# --- Markdown ----------------------------------------------------------------------------


def _cell(text: str | None) -> str:
    """``text`` as a table cell's text: HTML shown, not run (``<`` ``>`` ``&`` escaped), ``|``
    no column break, a line break ``<br>``."""
    escaped = (text or "").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return escaped.replace("|", "\\|").replace("\r", " ").replace("\n", "<br>")


def _code(text: str | None) -> str:
    """``text`` as a table cell's code span: a backquote cannot end it early (shown as
    ``'``), ``|`` no column break, a line break a space; HTML inside a code span is shown
    as it is."""
    flat = (text or "").replace("`", "'").replace("\r", " ").replace("\n", " ")
    return f"`{flat.replace('|', chr(92) + '|')}`"


def _markdown_table(findings: list[Finding]) -> list[str]:
    rows = ["| | rule | package | change | note |", "|---|---|---|---|---|"]
    for f in findings:
        change, note = _cell(_change(f)), _cell(_note(f))
        rows.append(
            f"| {SEVERITY_ICON[f.severity]} | {_cell(f.rule)} | {_code(f.package)} | {change} "
            f"| {note} |"
        )
    return rows


def _markdown_loads(loads: tuple[LoadChange, ...]) -> list[str]:
    rows = ["| library | loads | whose | asked by | why |", "|---|---|---|---|---|"]
    for load in loads:
        why = load.reason + (f" `{load.entry}`" if load.entry else "")
        rows.append(
            f"| {_code(load.soname)} | {_code(load.path)} | {_cell(load.owner or load.version)} "
            f"| {_code(load.requirer)} | {_cell(why)} |"
        )
    return [*rows, ""]


def _markdown_section(section: Section) -> list[str]:
    lines = [f"### {section.title}", ""]
    findings = ordered(section.findings)
    loads = _markdown_loads(section.loads) if section.loads else []
    if not findings:
        return [*lines, *(loads or ["No changes.", ""])]
    important = [f for f in findings if f.severity != INFO]
    routine = [f for f in findings if f.severity == INFO]
    if important:
        lines += [*_markdown_table(important), ""]
    if len(routine) > DETAILS_AFTER or (important and routine):
        summary = f"{len(routine)} allowed change{'s' if len(routine) != 1 else ''}"
        lines += ["<details>", f"<summary>{summary}</summary>", ""]
        lines += [*_markdown_table(routine), "", "</details>", ""]
    elif routine:
        lines += [*_markdown_table(routine), ""]
    return lines + loads


def report_markdown(report: Report) -> str:
    icon = "❌" if report.failed else "✅"
    lines = [f"## {report.title}", "", f"**{icon} {summary_line(report)}**", ""]
    for section in report.sections:
        lines += _markdown_section(section)
    return redact("\n".join(lines).rstrip("\n") + "\n")


# --- output ------------------------------------------------------------------------------


def render_text(report: Report, fmt: str, width: int = 100) -> str:
    """The report as text in ``fmt`` (``terminal`` renders without colour at ``width`` columns)."""
    if fmt == "json":
        return json_text.redacted_dumps(report_document(report)) + "\n"
    if fmt == "markdown":
        return report_markdown(report)
    if fmt == "terminal":
        buffer = StringIO()
        console = Console(file=buffer, width=width, no_color=True, highlight=False, emoji=False)
        print_report(report, console)
        return redact(buffer.getvalue())
    raise UsageError(f"--format {fmt}: unknown format", f"use one of: {', '.join(FORMATS)}")
