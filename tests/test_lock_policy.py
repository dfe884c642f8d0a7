"""``lock`` judges fresh locks under today's policy and waivers, and speaks JSON.

The locks here are made fresh by hand (their recorded inputs match the files), so nothing
compiles: what is tested is the judgment a fresh run makes without a resolver, the refusal of a
``--resolver`` the recipe does not name, and the ``--format json`` document.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.cli import main as cli
from audit.history.snapshot import Distribution
from tests.support.project import ProjectSpec, base_record, pip_recipe_toml, write_project

WAIVER = (
    '[[policy.waiver]]\npackage = "alpha"\nfrom = "2.0"\nto = "1.0"\n'
    'reason = "2.0 breaks the kernels"\n\n'
)
BODY = "alpha==1.0 \\\n    --hash=sha256:aa\n"
STAMP = "build/.layer-audit/lock-state/t.stamp"


def recipe(extra: str) -> str:
    return pip_recipe_toml(["v1"], index_url="https://pypi.example.org/simple", extra=extra)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """v1 downgrades alpha 2.0 (in the base) to 1.0, under a waiver; its lock is fresh."""
    base = base_record(Distribution("alpha", "2.0"))
    spec = ProjectSpec("t", recipe(WAIVER), {"v1.in": "alpha==1.0\n"}, base, {"v1": BODY})
    root = write_project(tmp_path / "project", spec)
    monkeypatch.chdir(root)
    return root


def lock(*argv: str) -> int:
    return cli.main(["lock", *argv])


def drop_waiver(root: Path) -> None:
    """What a reviewer does when the waiver's reason no longer holds (the locks stay fresh)."""
    path = root / "images" / "t" / "image.toml"
    path.write_text(path.read_text().replace(WAIVER, ""))


def test_a_deleted_waiver_fails_lock_and_check_on_fresh_locks(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lock("t") == 0
    assert lock("t", "--check") == 0
    assert (project / STAMP).is_file()
    capsys.readouterr()
    drop_waiver(project)
    assert lock("t") == 1
    out = capsys.readouterr()
    assert "downgrade" in out.out
    assert "alpha" in out.out
    assert "fresh" not in out.out
    assert "today's policy and waivers" in out.err
    assert lock("t", "--check") == 1
    assert "downgrade" in capsys.readouterr().out


def test_a_failing_judgment_writes_no_stamp_so_the_quick_path_cannot_answer(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drop_waiver(project)
    assert lock("t") == 1
    assert not (project / STAMP).exists()
    assert lock("t", "--check") == 1
    capsys.readouterr()


def test_a_waiver_restored_makes_lock_pass_again(project: Path) -> None:
    original = (project / "images" / "t" / "image.toml").read_text()
    drop_waiver(project)
    assert lock("t") == 1
    (project / "images" / "t" / "image.toml").write_text(original)
    assert lock("t") == 0


def test_resolver_on_the_command_line_other_than_the_recipes_is_refused_with_the_setting(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lock("t", "--resolver", "uv") == 2
    err = capsys.readouterr().err
    assert 'resolver = "uv"' in err
    assert "images/t/image.toml" in err
    assert lock("t", "--resolver", "pip-tools") == 0  # the recipe's own: nothing to refuse
    assert lock("t", "--check") == 0  # and nothing went stale


def test_json_of_a_fresh_run(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert lock("t", "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "layer-audit.lock/1"
    assert document["exit_code"] == 0
    assert document["fresh"] == 1
    assert document["stale"] == document["written"] == document["moved"] == []
    assert document["findings"] == []


def test_json_names_the_stale_locks_and_the_failing_findings(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drop_waiver(project)
    capsys.readouterr()
    assert lock("t", "--check", "--format", "json") == 1
    document = json.loads(capsys.readouterr().out)
    assert [(f["rule"], f["package"]) for f in document["findings"]] == [("downgraded", "alpha")]
    (project / "images" / "t" / "requirements" / "v1.in").write_text("alpha==1.1\n")
    assert lock("t", "--check", "--format", "json") == 1
    document = json.loads(capsys.readouterr().out)
    assert [s["lock"] for s in document["stale"]] == ["locks/t/v1-01.txt"]
    assert document["stale"][0]["status"] == "stale"
    assert document["fresh"] == 0
