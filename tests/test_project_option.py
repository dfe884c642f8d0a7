"""``--project DIR``: the project named on the command line, before or after the command; the
walk up from any subfolder otherwise; and the lock quick path honours it too."""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.cli.main import build_parser, main
from audit.project import paths
from tests.support.lock_stamp import HEAVY, STAMP, imported, spawn
from tests.support.lock_stamp import project as project  # noqa: PLC0414 - the fixture


def test_help_says_layer_audit() -> None:
    assert build_parser([]).format_usage().startswith("usage: layer-audit")
    assert build_parser([], prog="python -m audit").prog == "python -m audit"


def test_a_project_without_images_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--project", str(tmp_path), "render", "x"]) == 2
    err = capsys.readouterr().err
    assert "no images/ folder" in err and "layer-audit init" in err and "Traceback" not in err


def test_project_before_or_after_the_command_and_reset_after(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # outside the project
    assert main(["--project", str(project), "lock", "t", "--check"]) == 0
    assert main(["lock", "t", "--check", "--project", str(project)]) == 0
    with pytest.raises(Exception, match="no images/ folder"):
        paths.find_root()  # the option held for one command only
    monkeypatch.chdir(project / "images" / "t" / "requirements")
    assert paths.find_root() == project.resolve()


def test_the_quick_path_takes_project_too(project: Path, tmp_path: Path) -> None:
    assert spawn(project, "lock", "t").returncode == 0
    assert (project / STAMP).is_file()
    again = spawn(tmp_path, "--project", str(project), "lock", "t", "--check")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "all 2 locks are fresh\n"
    loaded = imported(again.stderr)
    assert not [name for name in loaded if name.split(".")[0] in HEAVY or name in HEAVY]
