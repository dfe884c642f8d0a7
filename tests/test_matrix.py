"""The stage matrix (packages x stages): from real audits of hand-made projects, in the terminal,
in Markdown, and as a self-contained HTML page opened in a real headless Chromium."""

from __future__ import annotations

import io
import subprocess
from collections.abc import Mapping
from datetime import date
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from audit.cli import main as cli
from audit.gate.audit_deps import audit_recipe, audit_report
from audit.gate.matrix import (
    Cell,
    Row,
    StageMatrix,
    columns_matrix,
    matrix_html,
    matrix_markdown,
    matrix_tables,
    stage_matrix,
)
from audit.history.snapshot import Distribution
from audit.host import process as commands
from audit.project.memo import Memo
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from audit.report.findings import Report
from tests.support.browser import CHROMIUM_FLAGS, chromium, count_colour, png_pixels
from tests.support.vllm_project import CUDA_RECIPE, Project, with_pins, write_project

WAIVER = (
    '\n[[policy.waiver]]\npackage = "torch"\nfrom = "2.9.0+cu130"\nto = "2.9.0+cu130.post1"\n'
    'reason = "the same build, re-tagged"\n'
)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    (tmp_path / "images").mkdir()
    return tmp_path


def downgrade_project(root: Path) -> None:
    """The field report's night: v3's lock moves nccl 2.30.1 -> 2.29.7."""
    write_project(root, with_pins(v3={"rich": "14.0.0", "nvidia-nccl-cu13": "2.29.7"}))


def matrix_of(root: Path, name: str = "vllm", *, all_rows: bool = False):  # type: ignore[no-untyped-def]
    source = DirectorySource(root)
    audit = audit_recipe(source, load_recipe(source, name), today=date(2026, 1, 1))
    return audit, stage_matrix(audit, all_rows=all_rows)


def test_rows_are_packages_columns_are_stages_and_kinds_are_changes(root: Path) -> None:
    downgrade_project(root)
    _, matrix = matrix_of(root)
    assert matrix.columns == ("base", "v1", "v2", "v3")
    rows = {row.package: row.cells for row in matrix.rows}
    assert rows["nvidia-nccl-cu13"] == (
        Cell("2.30.1"),
        Cell("2.30.1"),
        Cell("2.30.1"),
        Cell("2.29.7", "downgraded"),
    )
    assert rows["flashinfer-python"] == (Cell(None), Cell(None), Cell("0.6.18", "added"),
                                         Cell("0.6.18"))  # fmt: skip
    assert matrix.rows[0].package == "nvidia-nccl-cu13"  # the alarming row leads
    assert "torch" not in rows  # unchanged rows only with all_rows
    _, everything = matrix_of(root, all_rows=True)
    assert "torch" in {row.package for row in everything.rows}


def test_a_waived_change_is_shown_as_waived(root: Path) -> None:
    project = with_pins(v3={"rich": "14.0.0", "torch": "2.9.0+cu130.post1"})
    project.recipe = CUDA_RECIPE + WAIVER
    write_project(root, project)
    audit, matrix = matrix_of(root)
    assert not audit.failed
    (torch,) = [row for row in matrix.rows if row.package == "torch"]
    assert torch.cells[-1] == Cell("2.9.0+cu130.post1", "waived")
    assert torch.cells[-1].text == "2.9.0+cu130 → 2.9.0+cu130.post1"  # what it moved from
    page = matrix_html([matrix], audit_report([audit]))
    assert "2.9.0+cu130 → 2.9.0+cu130.post1<span" in page
    [row] = [r for r in page.split("<tr>") if "<td>torch</td>" in r and "waived:" in r]
    assert row.startswith("<td>warning</td>")  # allowed, and shown as what a reviewer must read


def test_markdown_marks_changes_and_folds_when_long(root: Path) -> None:
    downgrade_project(root)
    _, matrix = matrix_of(root)
    text = matrix_markdown(matrix)
    assert "| package | base | v1 | v2 | v3 |" in text
    assert "🔻 **2.30.1 → 2.29.7** downgraded" in text and "<details>" not in text
    pins = {f"pkg-{n:02d}": "1.0" for n in range(20)}
    write_project(root, Project(pins={"v2": pins, "v3": {"rich": "14.0.0"}}), image="wide")
    _, wide = matrix_of(root, "wide")
    assert matrix_markdown(wide).startswith("<details><summary>")


def test_audit_deps_markdown_leads_with_the_matrix(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    downgrade_project(root)
    assert cli.main(["audit-deps", "--format", "markdown"]) == 1
    out = capsys.readouterr().out
    assert out.index("| package | base | v1 | v2 | v3 |") < out.index("downgraded")


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_the_html_is_self_contained_and_escaped(root: Path) -> None:
    downgrade_project(root)
    _, matrix = matrix_of(root)
    page = matrix_html([matrix], Report("audit-deps <x>", ()))
    parsed = _Collect()
    parsed.feed(page)
    tags = {tag for tag, _ in parsed.tags}
    assert "script" not in tags and "link" not in tags and "img" not in tags
    assert not [a for _, a in parsed.tags if any(k in a for k in ("src", "href"))]
    assert "audit-deps &lt;x&gt;" in page and "<x>" not in page
    assert "default-src 'none'" in page


def test_audit_deps_writes_the_html_report(root: Path) -> None:
    downgrade_project(root)
    output = root / "report.html"
    assert cli.main(["audit-deps", "--format", "html", "--output", str(output)]) == 1
    page = output.read_text()
    assert page.startswith("<!DOCTYPE html>") and 'class="downgraded"' in page


# --- a real browser ---------------------------------------------------------------------------

DOWNGRADE_RGB = (0xFF, 0xCE, 0xCB)  # the .downgraded background in matrix.CSS


@pytest.mark.slow
def test_the_html_report_in_headless_chromium(root: Path, tmp_path: Path) -> None:
    browser = chromium()
    downgrade_project(root)
    page = root / "report.html"
    assert cli.main(["audit-deps", "--format", "html", "--output", str(page)]) == 1
    profile, shot = tmp_path / "profile", tmp_path / "shot.png"
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    taken = subprocess.run(
        [browser, *flags, f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert taken.returncode == 0, taken.stderr[-2000:]
    for line in taken.stderr.splitlines():  # console errors and blocked loads show up here
        assert "CONSOLE" not in line and "Uncaught" not in line and "Refused to" not in line
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    ).stdout  # fmt: skip
    assert 'class="matrix"' in dom and "nvidia-nccl-cu13" in dom
    width, height, _ = png_pixels(shot.read_bytes())
    assert (width, height) == (1100, 700)
    red = count_colour(shot.read_bytes(), DOWNGRADE_RGB)
    assert red > 200, "the downgraded cell is not visible in the screenshot"


def test_an_override_is_marked_even_where_it_keeps_the_installed_version(root: Path) -> None:
    """v3 re-pins nccl down on purpose; v2 keeps torch as installed (override) though the
    layer's lock leaves it: both cells say override, and both rows lead the matrix."""
    project = with_pins(v3={"rich": "14.0.0", "nvidia-nccl-cu13": "2.30.0"})
    project.recipe = CUDA_RECIPE.replace(
        'pip = "requirements/v3.in"\n',
        'pip = "requirements/v3.in"\n  override = ["nvidia-nccl-cu13==2.30.0"]\n',
    ).replace(
        'pip = "requirements/v2.in"\n',
        'pip = "requirements/v2.in"\n  override = ["torch==2.9.0+cu130"]\n',
    )
    write_project(root, project)
    audit, matrix = matrix_of(root)
    assert not audit.failed and any(f.rule == "override" for f in audit.findings)
    rows = {row.package: row.cells for row in matrix.rows}
    assert rows["nvidia-nccl-cu13"][-1] == Cell("2.30.0", "override")
    assert rows["torch"][2] == Cell("2.9.0+cu130", "override")
    assert {row.package for row in matrix.rows[:2]} == {"nvidia-nccl-cu13", "torch"}
    assert "📌 **2.30.1 → 2.30.0** override" in matrix_markdown(matrix)  # with its direction


def test_at_80_columns_no_name_is_cut_and_no_stage_dropped() -> None:
    """The vendor's cutlass-dsl set over eight stages: the matrix splits into tables that fit,
    each repeating the package column; every name whole on its line, every stage shown."""
    names = [f"nvidia-cutlass-dsl-libs-{part}" for part in ("base", "core", "cu12", "cu13")]
    columns = ("base", *(f"v{n}" for n in range(1, 9)))
    cells = (Cell("4.8.1"), Cell("4.4.0", "downgraded"), *(Cell("4.4.0") for _ in range(7)))
    matrix = StageMatrix("dsl", columns, tuple(Row(name, cells) for name in names))
    buffer = io.StringIO()
    console = Console(file=buffer, width=80, no_color=True)
    for table in matrix_tables(matrix, 80):
        console.print(table)
    out = buffer.getvalue()
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    for name in names:
        assert sum(f"│ {name} " in line for line in out.splitlines()) == out.count("stage matrix")
    headers = " ".join(line for line in out.splitlines() if "┃ package" in line)
    assert all(f" {column} " in headers for column in columns)
    assert out.count("stage matrix") > 1  # it had to split


def test_images_with_the_same_rows_share_them_and_a_rebuild_is_not_one_of_them() -> None:
    """A row is remembered by its package's version and digest in each column and its marks:
    a second image shipping the same stack gets the same row objects; a digest, a version or a
    mark of its own gives its own row."""
    torch = Distribution("torch", "2.13.0", digest="sha256:1")
    columns: dict[str, Mapping[str, Distribution]] = {
        "base": {},
        "v1": {"torch": torch},
        "v2": {"torch": Distribution("torch", "2.14.0")},
    }
    memo = Memo()  # the command's: rows are shared through it, never through the module
    one = columns_matrix("a", columns, {}, memo=memo)
    two = columns_matrix("b", {k: dict(v) for k, v in columns.items()}, {}, memo=memo)
    assert one.rows[0] is two.rows[0]
    assert columns_matrix("a", columns, {}).rows[0] is not one.rows[0]  # no memo: made anew
    assert [c.kind for c in one.rows[0].cells] == ["", "added", "upgraded"]
    rebuilt = {**columns, "v2": {"torch": Distribution("torch", "2.13.0", digest="sha256:9")}}
    assert [c.kind for c in columns_matrix("c", rebuilt, {}).rows[0].cells] == [
        "",
        "added",
        "rebuilt",
    ]
    waived = columns_matrix("d", columns, {("v2", "torch"): "waived"}, memo=memo)
    assert [c.kind for c in waived.rows[0].cells] == ["", "added", "waived"]
    assert [c.kind for c in columns_matrix("e", columns, {}).rows[0].cells] == [
        "",
        "added",
        "upgraded",
    ]
