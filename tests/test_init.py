"""``layer-audit init``: the scaffold plan (pure) and the command on real folders."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from audit.cli.main import main
from audit.project.scaffold import Action, gitignore_after, plan_scaffold, skeleton
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe

EXPECTED = {
    ".github/workflows/dependency-gate-comment.yml",
    ".github/workflows/dependency-gate.yml",
    ".gitignore",
    ".pre-commit-config.yaml",
    "images/example/image.toml",
    "images/example/requirements/v1.in",
    "locks/example/base.json",
    "locks/example/v1-01.txt",
    "noxfile.py",
}


def files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.parts and "build" not in p.parts
    }


def test_the_plan_on_an_empty_tree_creates_every_file() -> None:
    plan = plan_scaffold(lambda relpath: None, "example", "layer-audit", force=False)
    assert {p.relpath for p in plan} == EXPECTED
    assert {p.action for p in plan} == {Action.CREATE}


def test_a_differing_file_is_kept_unless_forced() -> None:
    tree = {"noxfile.py": b"# mine\n"}
    kept = plan_scaffold(tree.get, "example", "layer-audit", force=False)
    assert next(p for p in kept if p.relpath == "noxfile.py").action is Action.KEEP
    forced = plan_scaffold(tree.get, "example", "layer-audit", force=True)
    assert next(p for p in forced if p.relpath == "noxfile.py").action is Action.OVERWRITE


def test_gitignore_gets_only_its_missing_entries() -> None:
    assert gitignore_after(b"build/\n.nox/\nlocks/*/.lock\n.*.audit-*.tmp\n") is None
    after = gitignore_after(b"*.pyc")
    assert after is not None
    assert after.startswith(b"*.pyc\n") and after.count(b"build/") == 1 and b".nox/" in after


@pytest.mark.parametrize(
    ("image", "spec"), [("Bad Name", "layer-audit"), ("ok", 'layer-audit"; rm -rf /')]
)
def test_bad_names_are_refused(image: str, spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--image", image, "--spec", spec, "/nonexistent-h4"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_the_skeleton_is_valid(tmp_path: Path) -> None:
    for relpath, data in skeleton("example", "layer-audit==0.1.0").items():
        if relpath.endswith((".yml", ".yaml")):
            assert isinstance(yaml.safe_load(data), dict), relpath
        if relpath.endswith(".py"):
            compile(data, relpath, "exec")
    workflow = yaml.safe_load(skeleton("x", "layer-audit")[".github/workflows/dependency-gate.yml"])
    assert workflow["permissions"] == {"contents": "read"}
    assert set(workflow.get("on", workflow.get(True))) == {"pull_request", "merge_group"}


def test_init_is_idempotent_and_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("*.log\n")
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    first = files(tmp_path)
    assert set(first) == EXPECTED
    assert first[".gitignore"].startswith(b"*.log\n")
    assert main(["init"]) == 0
    assert files(tmp_path) == first  # the second run changes nothing
    (tmp_path / "noxfile.py").write_text("# mine\n")
    assert main(["init"]) == 0
    assert (tmp_path / "noxfile.py").read_text() == "# mine\n"
    assert main(["init", "--force"]) == 0
    assert (tmp_path / "noxfile.py").read_bytes() == first["noxfile.py"]
    recipe = load_recipe(DirectorySource(tmp_path), "example")
    assert [stage.name for stage in recipe.stages] == ["v1"]
    assert main(["render", "example"]) == 0
    assert (tmp_path / "build/example/Dockerfile").is_file()


def test_this_project_publishes_the_same_hooks() -> None:
    published = yaml.safe_load((Path(__file__).parents[1] / ".pre-commit-hooks.yaml").read_text())
    scaffold = yaml.safe_load(skeleton("x", "layer-audit")[".pre-commit-config.yaml"])
    local = scaffold["repos"][0]["hooks"]
    assert [hook["id"] for hook in published] == [hook["id"] for hook in local]
    for mine, theirs in zip(published, local, strict=True):
        # the local hooks first say what to install when layer-audit is not on PATH
        assert theirs["entry"].endswith(mine["entry"].removeprefix("bash -c '"))
        assert "not on PATH" in theirs["entry"] and mine["pass_filenames"] is False
