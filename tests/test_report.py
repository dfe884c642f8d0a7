"""Rendering findings: terminal table, JSON (schema 1), Markdown; exit codes."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

from rich.console import Console

from audit.policy.findings import ERROR, INFO, WARNING, Finding
from audit.report.findings import (
    REPORT_SCHEMA,
    Report,
    Section,
    print_report,
    report_exit_code,
    report_json,
    report_markdown,
    summary_line,
)
from audit.report.output import write_report

DOWNGRADE = Finding(
    rule="downgraded",
    severity=ERROR,
    package="nvidia-nccl-cu13",
    before="2.30.1",
    after="2.29.7",
    message="nvidia-nccl-cu13 2.30.1 -> 2.29.7: downgraded",
    where="demo v3 layer 1",
    hint='pin it\n[[policy.waiver]]\npackage = "nvidia-nccl-cu13"',
)
ADDED = [
    Finding("added", INFO, f"pkg-{n:02d}", None, "1.0", f"pkg-{n:02d} added") for n in range(12)
]
REBUILT = Finding(
    "rebuilt", WARNING, "six", "1.16", "1.16", "six 1.16 was reinstalled with other files"
)
WAIVED = Finding(
    "downgraded", INFO, "triton", "3.5.0", "3.4.0", "triton 3.5.0 -> 3.4.0", waiver="sm_121 bug"
)


def sample(*findings: Finding) -> Report:
    return Report("demo", (Section("v3 layer 1", findings), Section("v3 layer 2", ())))


def test_counts_failed_and_exit_code() -> None:
    report = sample(*ADDED, REBUILT, DOWNGRADE)
    assert report.counts == {ERROR: 1, WARNING: 1, INFO: 12}
    assert report.failed and report_exit_code(report) == 1
    assert report_exit_code(sample(REBUILT, WAIVED)) == 0
    assert summary_line(report) == "demo: FAIL (1 error, 1 warning, 12 info)"


def test_json_is_schema_versioned_with_stable_keys() -> None:
    document = report_json(sample(ADDED[0], DOWNGRADE))
    assert list(document) == ["schema", "title", "verdict", "counts", "sections"]
    assert document["schema"] == REPORT_SCHEMA and document["verdict"] == "fail"
    first = document["sections"][0]["findings"][0]
    assert first["rule"] == "downgraded"
    assert sorted(first) == [
        "after",
        "before",
        "hint",
        "message",
        "package",
        "rule",
        "severity",
        "waiver",
        "waiver_index",
        "where",
    ]
    json.dumps(document)


def test_markdown_verdict_first_downgrades_first_long_lists_folded() -> None:
    text = report_markdown(sample(*ADDED, REBUILT, DOWNGRADE))
    lines = text.splitlines()
    assert lines[2] == "**❌ demo: FAIL (1 error, 1 warning, 12 info)**"
    assert text.index("nvidia-nccl-cu13") < text.index("`six`") < text.index("<details>")
    assert "<summary>12 allowed changes</summary>" in text and "No changes." in text


def test_markdown_shows_waiver_reason_and_escapes_pipes() -> None:
    odd = Finding("forbidden", ERROR, "x", None, "1", "a | b")
    text = report_markdown(sample(WAIVED, odd))
    assert "waived: sm_121 bug" in text and "a \\| b" in text and "✅" not in text


def test_table_fits_80_columns() -> None:
    buffer = StringIO()
    print_report(
        sample(*ADDED, REBUILT, WAIVED, DOWNGRADE), Console(file=buffer, width=80, no_color=True)
    )
    output = buffer.getvalue()
    assert max(len(line) for line in output.splitlines()) <= 80
    assert output.index("1 error") < output.index("1 warning") < output.index("13 info")
    assert "waived: sm_121" in output
    assert "[[policy.waiver]]" in output and "demo: FAIL" in output


def test_write_report_formats_to_file(tmp_path: Path) -> None:
    report = sample(DOWNGRADE)
    console = Console(file=StringIO())
    for fmt in ("json", "markdown", "terminal"):
        target = tmp_path / f"report.{fmt}"
        write_report(report, fmt, target, console)
        assert "nvidia-nccl-cu13" in target.read_text()
    assert json.loads((tmp_path / "report.json").read_text())["verdict"] == "fail"
