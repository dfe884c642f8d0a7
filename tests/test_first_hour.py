"""Rough edges a new user met in the first hour: what ``init`` and ``import`` leave behind and
the next step they print.

``import`` of a Dockerfile without a pip layer left an empty ``images/<name>/requirements/``;
``init``'s next step said ``layer-audit render <image>`` instead of the image it wrote.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.cli.main import main
from tests.support.gitrepo import git


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty git repository outside the checkout, as the working folder."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    monkeypatch.chdir(root)
    return root


def empty_folders(root: Path) -> list[str]:
    return sorted(
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if path.is_dir() and ".git" not in path.parts and not any(path.iterdir())
    )


def test_import_without_a_pip_layer_leaves_no_empty_requirements_folder(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "ctx").mkdir()
    (repo / "ctx" / "Dockerfile").write_text("FROM debian:bookworm\nRUN echo hi\n")
    assert main(["import", "ctx/Dockerfile", "--image", "plain"]) == 0
    assert (repo / "images" / "plain" / "image.toml").is_file()
    assert empty_folders(repo) == []


def test_import_with_a_pip_layer_writes_its_requirements(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "ctx").mkdir()
    dockerfile = "FROM python:3.12\nRUN pip install alpha==1.0\n"
    (repo / "ctx" / "Dockerfile").write_text(dockerfile)
    assert main(["import", "ctx/Dockerfile", "--image", "pipped"]) == 0
    assert [p.name for p in (repo / "images" / "pipped" / "requirements").iterdir()]
    assert empty_folders(repo) == []


@pytest.mark.parametrize("image", [None, "vllm-gb10"])
def test_init_names_the_image_it_wrote_in_its_next_step(
    repo: Path, capsys: pytest.CaptureFixture[str], image: str | None
) -> None:
    argv = ["init", "--spec", "layer-audit==9.8.7", *(["--image", image] if image else [])]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    name = image or "example"
    assert (repo / "images" / name / "image.toml").is_file()
    assert f"layer-audit render {name} && layer-audit lock {name}" in out
    assert "<image>" not in out
    assert empty_folders(repo) == []


def test_a_failed_init_removes_what_it_made_and_gives_one_hint(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "locks").write_text("a file where init needs a folder\n")
    assert main(["init", "--spec", "layer-audit==9.8.7"]) == 3
    err = capsys.readouterr().err
    assert err.count("hint:") == 1 and "move or remove" in err and "nothing was changed" in err
    assert sorted(p.name for p in repo.iterdir()) == [".git", "locks"]
