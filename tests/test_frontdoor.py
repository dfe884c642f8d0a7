"""Hints name the command the user has: ``nox -s lock -- IMAGE`` in a nox project (a noxfile
with those sessions at the project root), ``layer-audit lock IMAGE`` with the CLI alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.cli.main import main
from audit.errors import EXIT_VIOLATION
from audit.project import frontdoor
from audit.project.scaffold import skeleton
from audit.project.sources import DirectorySource
from tests.support.project import ProjectSpec, pip_recipe_toml, system_base, write_project

NOXFILE = """import nox


@nox.session(venv_backend="none")
def lock(session: nox.Session) -> None:
    session.run("layer-audit", "lock", *session.posargs, external=True)


@nox.session(venv_backend="none", name="build-image")
def build_image(session: nox.Session) -> None:
    session.run("layer-audit", "build", *session.posargs, external=True)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A recipe with a recorded base and no locks yet: audit-deps fails with a lock hint."""
    base = system_base({"pip": "24.0"})
    spec = ProjectSpec("shop", pip_recipe_toml(["v1"], base="example/base:1"), {"v1.in": "a\n"})
    write_project(tmp_path, ProjectSpec(spec.image, spec.recipe, spec.requirements, base))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_cli_alone_names_the_console_script(project: Path) -> None:
    front = DirectorySource(project).front  # a project's sources carry its front door
    assert front.command("lock", "shop") == "layer-audit lock shop"
    assert front.command("build") == "layer-audit build"
    assert frontdoor.CONSOLE_SCRIPT.command("lock", "shop") == "layer-audit lock shop"


def test_a_nox_project_names_its_sessions(project: Path) -> None:
    (project / "noxfile.py").write_text(NOXFILE)
    front = frontdoor.FrontDoor.of(project)
    assert front.command("lock", "shop --record-base") == "nox -s lock -- shop --record-base"
    assert front.command("build") == "nox -s build-image"
    assert front.command("audit-deps") == "layer-audit audit-deps"  # no such session here


def test_init_s_noxfile_is_a_nox_front_door(project: Path) -> None:
    (project / "noxfile.py").write_bytes(skeleton("x", "layer-audit==0.1.0")["noxfile.py"])
    names = frontdoor.nox_sessions(project)
    assert {"lock", "audit-deps", "build-image", "gate", "render"} <= names


@pytest.mark.parametrize(
    ("noxfile", "expected"),
    [(None, "layer-audit lock shop"), (NOXFILE, "nox -s lock -- shop")],
)
def test_a_real_hint_says_the_right_command(
    project: Path, capsys: pytest.CaptureFixture[str], noxfile: str | None, expected: str
) -> None:
    if noxfile is not None:
        (project / "noxfile.py").write_text(noxfile)
    assert main(["lock", "shop", "--check"]) == EXIT_VIOLATION
    assert main(["audit-deps", "shop"]) == EXIT_VIOLATION
    out = capsys.readouterr()
    text = out.out + out.err
    assert f"locks need: {expected}" in text
    assert f"record the base and compile the locks: {expected}" in text
    other = "nox -s lock" if noxfile is None else "layer-audit lock"
    assert other not in text


@pytest.mark.parametrize(
    ("noxfile", "lock", "record"),
    [
        (None, "layer-audit lock shop", "layer-audit lock shop --record-base"),
        (NOXFILE, "nox -s lock -- shop", "nox -s lock -- shop --record-base"),
    ],
)
def test_the_guard_s_hints_name_the_project_s_front_door(
    project: Path, noxfile: str | None, lock: str, record: str
) -> None:
    """The guard runs inside the image and cannot look for a noxfile: the host writes the
    commands into its config, and its lock-mismatch and no-base hints say them."""
    from audit.history.snapshot import Distribution, Environment
    from audit.inimage import guard
    from audit.lock.format import parse_pins
    from audit.recipe.parse import load_recipe
    from audit.render.guard import guard_config

    if noxfile:
        (project / "noxfile.py").write_text(noxfile)
    source = DirectorySource(project)
    config = json.loads(guard_config(load_recipe(source, "shop"), source.front))
    assert guard.host_command(config, "lock") == lock
    env = Environment("/usr/bin/python3", "3.11.2", {}, (), (Distribution("a", "1.0"),))
    (finding,) = guard.check_lock(
        list(parse_pins("a==2.0 --hash=sha256:" + "0" * 64 + "\n").values()), env, "shop v1", lock
    )
    assert f"re-compile the locks ({lock})" in finding.hint
    with pytest.raises(guard.GuardError, match=f"record it on the host: {record}"):
        guard.previous_environments(str(project), "v1-01", str(project / "none.json"), record)
