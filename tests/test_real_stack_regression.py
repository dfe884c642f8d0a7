"""The field's regression replayed with real packages, offline, on committed fixture locks.

A pull request adds a stage v3 asking for ``torch==2.13.0`` to ``images/vllm-arm64-cu13`` (the
real vLLM 0.33.0 arm64 stack on its replica base). The real torch 2.13.0 requires
``nvidia-nccl-cu13==2.29.7``: the silent NCCL downgrade of the field report. ``lock`` refuses
to write that layer's lock (opt-in network test); the fixture is its body as uv compiled it
(tests/data/real_stack/torch-2.13.0), rendered fresh here as a careless merge would leave it.
``audit-deps`` and the gate then exit 1 on it and say the same; the gate's Markdown names it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from audit.cli.main import main
from audit.errors import EXIT_VIOLATION
from audit.host import process as commands
from audit.lock.files import lock_relpath, parse_lock, render_lock
from audit.lock.plan import after_inputs, layer_inputs, pip_steps, read_base_digest, resolver_label
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.gitrepo import commit_files, git
from tests.support.real_stack import FIXTURE, IMAGE, ROOT

NCCL = ("nvidia-nccl-cu13", "2.30.7", "2.29.7")


def add_torch_stage(root: Path, variant: str = "") -> None:
    """Stage v3 (``torch==2.13.0``) and its lock, fresh for this project's inputs; ``variant``
    ``"override"`` is the fix (its moves declared, NCCL kept)."""
    folder = root / "images" / IMAGE
    suffix = f"-{variant}" if variant else ""
    with (folder / "image.toml").open("a") as toml:
        toml.write((FIXTURE / f"v3-stage{suffix}.toml").read_text())
    shutil.copy(FIXTURE / "v3-torch.in", folder / "requirements" / "v3-torch.in")
    source = DirectorySource(root)
    recipe = load_recipe(source, IMAGE)
    steps = pip_steps(recipe)
    found = read_base_digest(source, recipe)
    assert found is not None
    earlier, _ = after_inputs(
        {s.slug: parse_lock(source.read_bytes(lock_relpath(recipe, s)), s.slug) for s in steps[:-1]}
    )
    resolver = resolver_label(recipe)  # what the recipe says compiles it (uv)
    inputs = layer_inputs(source, recipe, steps[-1], found[1], earlier)
    body = (FIXTURE / f"v3-01{'.' + variant if variant else ''}.body.txt").read_text()
    text = render_lock(IMAGE, steps[-1], resolver, inputs.digests, body)
    (root / lock_relpath(recipe, steps[-1])).write_text(text)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example at ``main``; HEAD is branch ``pr`` with the torch 2.13.0 stage committed."""
    return torch_pull_request(tmp_path, monkeypatch, "", "pr: torch 2.13.0")


def torch_pull_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str, message: str
) -> Path:
    """A git repository of the example at ``main`` and branch ``pr`` adding the torch stage
    (``variant`` of its fixture lock), checked out and the working folder."""
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    root = tmp_path / "repo"
    for part in (f"images/{IMAGE}", f"locks/{IMAGE}", "templates"):
        shutil.copytree(ROOT / part, root / part)
    git(root, "init", "-q", "-b", "main")
    commit_files(root, {}, "main: the real stack")
    git(root, "checkout", "-q", "-b", "pr")
    add_torch_stage(root, variant)
    commit_files(root, {}, message)
    monkeypatch.chdir(root)
    return root


def _errors(report: dict[str, object]) -> list[dict[str, object]]:
    sections = report["sections"]
    assert isinstance(sections, list)
    return [f for s in sections for f in s["findings"] if f["severity"] == "error"]


def test_audit_deps_fails_on_the_nccl_downgrade(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the lock is fresh, and lock --check judges it under today's policy all the same
    assert main(["lock", IMAGE, "--check"]) == EXIT_VIOLATION
    checked = capsys.readouterr()
    assert "nvidia-nccl-cu13" in checked.out + checked.err and "2.29.7" in checked.out + checked.err
    code = main(["audit-deps", IMAGE, "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == EXIT_VIOLATION
    moved = {(f["rule"], f["package"], f["before"], f["after"]) for f in _errors(report)}
    assert ("downgraded", *NCCL) in moved
    assert ("requirement", "nvidia-nccl-cu13", None, "2.29.7") in moved
    nccl = next(f for f in _errors(report) if f["package"] == "nvidia-nccl-cu13")
    assert "v3" in str(nccl["where"])
    askers = nccl["askers"]  # a typed field: the one requirement that pins the downgrade
    assert isinstance(askers, list) and len(askers) == 1
    assert str(askers[0]).startswith("torch 2.13.0 requires nvidia-nccl-cu13==2.29.7")


def test_the_gate_fails_and_its_markdown_names_the_downgrade(repo: Path, tmp_path: Path) -> None:
    markdown, report = tmp_path / "gate.md", tmp_path / "gate.json"
    argv = ["gate", "--base", "main", "--repo", str(repo), "--markdown", str(markdown)]
    assert main([*argv, "--json", str(report)]) == EXIT_VIOLATION
    text = markdown.read_text()
    assert "nvidia-nccl-cu13" in text and "2.30.7" in text and "2.29.7" in text
    assert "asked for by: torch 2.13.0 requires nvidia-nccl-cu13==2.29.7" in text
    found = json.loads(report.read_text())
    moved = {(f["rule"], f["package"], f["before"], f["after"]) for f in _errors(found)}
    assert ("downgraded", *NCCL) in moved


def test_the_override_fix_locks_audits_and_gates_with_zero_waivers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = torch_pull_request(tmp_path, monkeypatch, "override", "pr: torch 2.13.0, NCCL kept")
    assert main(["lock", IMAGE, "--check"]) == 0
    capsys.readouterr()
    assert main(["audit-deps", IMAGE, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    found = [f for s in report["sections"] for f in s["findings"]]
    assert not [f for f in found if f["severity"] == "error" or f.get("waiver")]
    notes = " ".join(str(f["message"]) for f in found if f["rule"] == "override")
    assert "torch 2.13.0 has requirement nvidia-nccl-cu13==2.29.7" in notes
    assert "vllm 0.33.0 has requirement torch==2.14.0" in notes
    markdown = tmp_path / "gate.md"
    argv = ["gate", "--base", "main", "--repo", str(root), "--markdown", str(markdown)]
    assert main(argv) == 0
    assert "nvidia-nccl-cu13" in markdown.read_text()
