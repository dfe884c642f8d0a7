"""One command-line convention: ``--format`` with the same names and ``--output FILE`` for every
report, the old spellings for one release with a warning, quiet unless ``-v``, and a closed pipe
ended like other tools end it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit.cli import main as cli
from audit.errors import EXIT_BAD_INPUT, EXIT_OK
from audit.host import process as commands
from tests.support import gate_project as shared
from tests.support.cli import REPO

repo = shared.repo  # main holds a small project, HEAD is branch pr


def test_the_gate_writes_several_reports_each_in_its_format(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    md, js, page = tmp_path / "gate.md", tmp_path / "gate.json", tmp_path / "gate.html"
    argv = ["gate", "--base", "main", "--repo", str(repo)]
    files = ["--format", "markdown", "--output", str(md), "--format", "json", "--output", str(js)]
    assert cli.main([*argv, *files, "--format", "html", "--output", str(page)]) == EXIT_OK
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""  # every format went to a file: stdout stays empty
    assert md.read_text().startswith("## ") and json.loads(js.read_text())["schema"]
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert cli.main([*argv, *files, "--format", "terminal"]) == EXIT_OK  # one more: stdout
    assert "dependency gate" in capsys.readouterr().out


def test_the_old_spellings_still_work_for_one_release_with_a_warning(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old.md", tmp_path / "new.md"
    argv = ["gate", "--base", "main", "--repo", str(repo)]
    assert cli.main([*argv, "--markdown", str(old), "--format", "table"]) == EXIT_OK
    said = capsys.readouterr()
    assert "--markdown FILE is deprecated: write --format markdown --output FILE" in said.err
    assert "--format table is deprecated: write --format terminal" in said.err
    assert "dependency gate" in said.out  # --markdown FILE never took stdout's table away
    assert cli.main([*argv, "--format", "markdown", "--output", str(new)]) == EXIT_OK
    assert "deprecated" not in capsys.readouterr().err
    assert old.read_bytes() == new.read_bytes()


def test_a_report_option_the_command_cannot_honour_is_bad_input(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x"
    twice = ["--output", str(out), "--output", str(tmp_path / "y")]
    assert cli.main(["--project", str(repo), "audit-deps", *twice]) == EXIT_BAD_INPUT
    assert "given once" in capsys.readouterr().err
    assert cli.main(["--project", str(repo), "lock", "demo", "--output", str(out)]) == 2
    assert "add --format json" in capsys.readouterr().err
    gate = ["gate", "--base", "main", "--repo", str(repo), "--format", "json", "--format", "html"]
    assert cli.main(gate) == EXIT_BAD_INPUT  # two formats, no file: which goes to stdout?
    assert not out.exists()


def test_lock_takes_the_same_names_and_writes_its_summary_to_a_file(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = tmp_path / "lock.json"
    argv = ["--project", str(repo), "lock", "demo", "--check", "--format", "json"]
    assert cli.main([*argv, "--output", str(summary)]) == EXIT_OK
    assert capsys.readouterr().out == ""
    assert json.loads(summary.read_text())["schema"] == "layer-audit.lock/1"
    assert cli.main(["--project", str(repo), "lock", "demo", "--check", "--format", "text"]) == 0
    assert "--format text is deprecated: write --format terminal" in capsys.readouterr().err


def _spawn(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != commands.QUIET_ENV}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "audit", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_quiet_by_default_and_v_echoes_the_commands_run(repo: Path) -> None:
    quiet = _spawn(repo, "gate", "--base", "main")
    assert quiet.returncode == EXIT_OK and quiet.stderr == ""
    loud = _spawn(repo, "-v", "gate", "--base", "main")
    assert loud.returncode == EXIT_OK and "$ " in loud.stderr and "git" in loud.stderr
    after = _spawn(repo, "gate", "--base", "main", "-v")  # after the command too
    assert "$ " in after.stderr


CLOSED_PIPE = """
import os, sys
from audit.cli.main import main
read, write = os.pipe()
os.close(read)  # the reader is gone before anything is written, as `| head` leaves it
os.dup2(write, sys.stdout.fileno())
sys.exit(main(["completion", "bash"]))
"""


def test_a_closed_pipe_ends_quietly_as_sigpipe_would() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CLOSED_PIPE],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == cli.EXIT_PIPE == 141
    assert done.stderr == ""  # no traceback, no "Exception ignored", no policy exit 1
