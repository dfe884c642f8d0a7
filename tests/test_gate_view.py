"""The gate's change view on the field's case, replayed: a two-commit repository whose second
commit pins a cutlass-dsl downgrade under two new waivers, locked by the real ``lock --host``
(pip-tools) against tiny wheels named like the real packages, then gated as CI gates it.

What a reviewer must see, in Markdown, JSON and the terminal alike: the downgrade as a warning
with its waiver's reason and expiry (``nvidia-cutlass-dsl 4.8.1 → 4.4.0 (waived: …)``), the
cutlass-dsl lockstep group as one block naming its members, the plain additions folded behind
a count, and the waivers listed once for owner review.
"""

from __future__ import annotations

import html
import json
import platform
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as cli
from audit.errors import EXIT_OK, EXIT_VIOLATION
from audit.gate.change_render import render_views
from audit.gate.change_view import ImageView, StageView
from audit.gate.compare import gate_result
from audit.gate.markdown import gate_markdown
from audit.history.snapshot import Distribution
from audit.host import process as commands
from audit.project.gitsource import GitSource
from tests.support.browser import CHROMIUM_FLAGS, chromium, count_colour, png_pixels
from tests.support.fixtures import Wheelhouse
from tests.support.gate_project import TODAY, Project, propose
from tests.support.gate_project import repo as gate_repo
from tests.support.gitrepo import commit_files, git
from tests.support.pkgindex import serve_index
from tests.support.project import ProjectSpec, base_record, pip_recipe_toml, write_project

__all__ = ["gate_repo"]

REASON_DSL = "4.8.1 ICEs the CuTeDSL compiler on sm_121"
REASON_LIBS = "libs follow nvidia-cutlass-dsl"
POLICY = """
[policy.lockstep]
cutlass-dsl = ["nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-*"]
"""
WAIVERS = f"""
[[policy.waiver]]
package = "nvidia-cutlass-dsl"
from = "4.8.1"
to = "4.4.0"
reason = "{REASON_DSL}"
expires = 2099-01-31

[[policy.waiver]]
package = "nvidia-cutlass-dsl-libs-base"
from = "4.8.1"
to = "4.4.0"
reason = "{REASON_LIBS}"
expires = 2099-01-31
"""
V1 = "nvidia-cutlass-dsl==4.8.1\n"
V2_WHERE = "v2 layer 1 (requirements/v2.in)"
V2_MAIN = "nvidia-nccl-cu13>=2.30\n"
V2_PR = "nvidia-nccl-cu13>=2.30\nnvidia-cutlass-dsl==4.4.0\nflashinfer-python==0.7.2\n"


def field_wheels(wheelhouse: Wheelhouse) -> None:
    """The cutlass-dsl pair at both versions, NCCL, and FlashInfer with three plain deps."""
    for version in ("4.8.1", "4.4.0"):
        libs = f"nvidia-cutlass-dsl-libs-base=={version}"
        wheelhouse("nvidia-cutlass-dsl", version, requires=[libs])
        wheelhouse("nvidia-cutlass-dsl-libs-base", version)
    wheelhouse("nvidia-nccl-cu13", "2.30.7")
    wheelhouse("flashinfer-python", "0.7.2", requires=["apache-tvm-ffi", "nvidia-ml-py", "tqdm"])
    for name in ("apache-tvm-ffi", "nvidia-ml-py", "tqdm"):
        wheelhouse(name, "1.0")


def lock_and_commit(root: Path, index: str, v2: str, policy: str, message: str) -> None:
    """Write the recipe and requirements, lock with the real pip-tools, commit everything."""
    recipe = pip_recipe_toml(["v1", "v2"], index_url=index, cuda="cu130", extra=policy)
    (root / "images/dsl/image.toml").write_text(recipe)
    (root / "images/dsl/requirements/v2.in").write_text(v2)
    assert cli.main(["lock", "dsl", "--host"]) == EXIT_OK
    commit_files(root, {}, message)


@pytest.fixture(scope="module")
def field_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """main: v1 installs cutlass-dsl 4.8.1, v2 NCCL; the pull request (HEAD, branch ``pr``)
    pins cutlass-dsl 4.4.0 in v2 under two new waivers and adds FlashInfer. Made once: both
    commits are locked by the real pip-tools."""
    folder = tmp_path_factory.mktemp("field")
    wheels = Wheelhouse(folder / "wheelhouse")
    field_wheels(wheels)
    root = folder / "repo"
    python = platform.python_version()
    base = base_record(Distribution("pip", "25.2", requires_dist=()), python=python)
    with serve_index(wheels.path) as index, pytest.MonkeyPatch.context() as patch:
        patch.setenv(commands.QUIET_ENV, "1")
        patch.delenv("GITHUB_STEP_SUMMARY", raising=False)
        recipe = pip_recipe_toml(["v1", "v2"], index_url=index, cuda="cu130", extra=POLICY)
        write_project(root, ProjectSpec("dsl", recipe, {"v1.in": V1, "v2.in": V2_MAIN}, base))
        (root / ".gitignore").write_text("build/\n")
        patch.chdir(root)
        git(root, "init", "-q", "-b", "main")
        lock_and_commit(root, index, V2_MAIN, POLICY, "main: cutlass-dsl 4.8.1")
        git(root, "checkout", "-q", "-b", "pr")
        message = "pin cutlass-dsl 4.4.0 under two waivers"
        lock_and_commit(root, index, V2_PR, POLICY + WAIVERS, message)
    yield root


def run_gate(root: Path, tmp_path: Path, *extra: str) -> tuple[int, str, dict[str, Any]]:
    markdown, report = tmp_path / "gate.md", tmp_path / "gate.json"
    argv = ["gate", "--base", "main", "--repo", str(root), "--markdown", str(markdown)]
    code = cli.main([*argv, "--json", str(report), *extra])
    return code, markdown.read_text(), json.loads(report.read_text())


@pytest.mark.slow
def test_the_field_downgrade_under_two_waivers_reads_as_warnings_in_a_group(
    field_repo: Path, tmp_path: Path
) -> None:
    code, markdown, report = run_gate(field_repo, tmp_path)
    assert code == EXIT_OK
    assert "**✅ PASS**" in markdown and "(0 errors, 4 warnings, 4 info)" in markdown
    # the downgrade: a warning row with its waiver's reason and expiry, inside the group block
    dsl = (
        f"| ⚠️ | downgraded | ↳ `nvidia-cutlass-dsl` | 4.8.1 → 4.4.0 | v2 layer 1 "
        f"(requirements/v2.in) | waived: {REASON_DSL}, expires 2099-01-31 "
        "(added by this pull request) |"
    )
    assert dsl in markdown
    group = (
        "| ⚠️ | lockstep group | **cutlass-dsl** |  |  | in step at 4.4.0: "
        "`nvidia-cutlass-dsl 4.8.1 → 4.4.0`, `nvidia-cutlass-dsl-libs-base 4.8.1 → 4.4.0` |"
    )
    assert group in markdown
    assert markdown.index(group) < markdown.index(dsl)
    # the waivers once, for owner review, before the image; never again in its table
    review = markdown.split("### `dsl`")[0]
    assert review.count("waiver-added") == 2 and markdown.count("| waiver-added |") == 2
    # four plain additions (FlashInfer and its three) fold behind a count
    assert "**`v2`**: 0 errors, 2 warnings, 4 info · 4 added by this layer, 2 unchanged" in markdown
    assert "<summary>4 added by this layer, 2 unchanged</summary>" in markdown
    assert "<summary>**" not in markdown and "1 warning," not in markdown.split("### `dsl`")[0]
    # JSON: the same view
    [view] = report["changes"]
    [v2] = [s for s in view["stages"] if s["stage"] == "v2"]
    [block] = v2["groups"]
    assert block["name"] == "cutlass-dsl" and not block["skewed"]
    dsl_row = next(r for r in block["rows"] if r["package"] == "nvidia-cutlass-dsl")
    assert (dsl_row["severity"], dsl_row["before"], dsl_row["after"]) == (
        "warning",
        "4.8.1",
        "4.4.0",
    )
    assert dsl_row["waived"] and REASON_DSL in dsl_row["note"]
    assert [r["package"] for r in v2["added"]] == [
        "apache-tvm-ffi",
        "flashinfer-python",
        "nvidia-ml-py",
        "tqdm",
    ]


def test_the_terminal_gate_shows_the_view_and_the_stage_matrix_at_80_columns(
    field_repo: Path,
) -> None:
    result = gate_result(GitSource(field_repo, "main"), GitSource(field_repo, "HEAD"), today=TODAY)
    changes = [m.changes for m in result.matrices if m.changes is not None]
    out = render_views(result.report, result.views, changes, width=80)
    assert "dsl v2: 0 errors, 2 warnings, 4 info; 4 added by this layer, 2 unchanged" in out
    assert "lockstep group cutlass-dsl" in out and "in step at 4.4.0" in out
    assert "dsl: stage matrix" in out and "4.8.1 → 4.4.0 waived" in out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in out
    names = (
        "nvidia-cutlass-dsl-libs-base",
        "↳ nvidia-cutlass-dsl ",
        "↳ nvidia-cutlass-dsl-libs-base",
    )
    assert all(any(name in line for line in lines) for name in names)  # whole, on one line
    at = next(i for i, line in enumerate(lines) if "↳ nvidia-cutlass-dsl " in line)
    assert "warning" in lines[at] and "4.8.1 → 4.4.0" in lines[at]
    assert "waived: 4.8.1" in " ".join(lines[at : at + 3])  # the note column wraps
    assert "0 errors, 4 warnings, 4 info" in lines[-1]


@pytest.mark.slow
def test_the_gate_html_says_what_the_markdown_says_in_headless_chromium(
    field_repo: Path, tmp_path: Path
) -> None:
    page = tmp_path / "gate.html"
    code, markdown, _ = run_gate(field_repo, tmp_path, "--html", str(page))
    assert code == EXIT_OK
    text = page.read_text()
    assert "Content-Security-Policy" in text and "http" not in text.split("<body>")[0].replace(
        "http-equiv", ""
    )
    assert "<script" not in text and "src=" not in text and "href=" not in text
    browser = chromium()
    shot = tmp_path / "gate.png"
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    taken = subprocess.run(
        [browser, *flags, f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert "Refused to" not in taken.stderr and "Uncaught" not in taken.stderr
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    ).stdout  # fmt: skip
    rows = dom_rows(dom)
    waived = f"waived: {REASON_DSL}, expires 2099-01-31 (added by this pull request)"
    dsl = ["warning", "nvidia-cutlass-dsl", "4.8.1 → 4.4.0 downgraded", V2_WHERE, waived]
    assert dsl in rows
    members = "nvidia-cutlass-dsl 4.8.1 → 4.4.0, nvidia-cutlass-dsl-libs-base 4.8.1 → 4.4.0"
    group = ["warning", "lockstep group cutlass-dsl", "in step at 4.4.0", "", members]
    assert group in rows
    # every row of the Markdown's v2 table is in the page, cell for cell
    for cells in markdown_rows(markdown.split("**`v2`**")[1].split("<details>")[0]):
        assert any(row[1].endswith(cells[2].replace("↳ ", "")) and row[2].startswith(cells[3])
                   for row in rows), cells  # fmt: skip
    assert "4 added by this layer, 2 unchanged" in dom
    width, height, _ = png_pixels(shot.read_bytes())
    assert (width, height) == (1100, 700)
    assert count_colour(shot.read_bytes(), GROUP_RGB) > 500, "the group row is not visible"


GROUP_RGB = (0xF6, 0xF8, 0xFA)  # tr.group's background in change_render.VIEW_CSS


def dom_rows(dom: str) -> list[list[str]]:
    """The text of each cell of each ``<tr>`` of the view tables, as the browser built them."""
    rows = re.findall(r'<tr class="[^"]*">(.*?)</tr>', dom, flags=re.S)
    cells = [re.findall(r"<td>(.*?)</td>", row, flags=re.S) for row in rows]
    return [[html.unescape(cell) for cell in row] for row in cells]


def markdown_rows(table: str) -> list[list[str]]:
    """A Markdown table's body rows as cells (backticks and bold dropped)."""
    found = []
    for line in table.splitlines():
        if line.startswith("| ") and not line.startswith("| |"):
            cells = [c.strip().replace("`", "").replace("**", "") for c in line.split(" | ")]
            found.append([html.unescape(c) for c in cells])
    return found


# --- a skew, without a resolver: the lockstep rule fails, the group shows it as one block ----

SKEW = """
[policy.lockstep]
cutlass-dsl = ["nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-*"]
"""
DSL_MAIN = {
    "v1": {"nvidia-cutlass-dsl": "4.8.1", "nvidia-cutlass-dsl-libs-base": "4.8.1"},
    "v2": {"gamma": "3.0"},
}


def test_a_lockstep_skew_is_one_block_naming_every_member(gate_repo: Path) -> None:
    git(gate_repo, "checkout", "-q", "main")
    propose(gate_repo, Project(pins=DSL_MAIN, policy=SKEW))
    git(gate_repo, "checkout", "-q", "-B", "pr")
    pins = {**DSL_MAIN, "v2": {"gamma": "3.0", "nvidia-cutlass-dsl": "4.9.0"}}
    propose(gate_repo, Project(pins=pins, policy=SKEW))
    result = gate_result(GitSource(gate_repo, "main"), GitSource(gate_repo, "HEAD"), today=TODAY)
    assert result.report.failed
    [view] = result.views
    v2 = stage(view, "v2")
    [block] = v2.groups
    assert block.skewed and block.severity == "error"
    assert block.status == "SKEW: members at 4.8.1, 4.9.0"
    assert [m.text for m in block.members] == [
        "nvidia-cutlass-dsl 4.8.1 → 4.9.0",
        "nvidia-cutlass-dsl-libs-base 4.8.1",
    ]
    assert {r.finding.rule for r in block.rows} == {"lockstep", "upgraded"}
    assert not any(r.finding.rule == "lockstep" for r in v2.rows)  # shown once, in the block
    markdown = gate_markdown(result.report, result.matrices, result.views)
    assert (
        "| ❌ | lockstep group | **cutlass-dsl** |  |  | SKEW: members at 4.8.1, 4.9.0:" in markdown
    )
    assert "1 error," in markdown and "1 errors" not in markdown
    code = cli.main(["gate", "--base", "main", "--repo", str(gate_repo)])
    assert code == EXIT_VIOLATION


def stage(view: ImageView, name: str) -> StageView:
    [found] = [s for s in view.stages if s.stage == name]
    return found
