"""What the build trusts before layer 1, without Docker: fresh locks, a base record of the
recipe's base, a base recorded elsewhere (``--from-snapshot``), and the PEP 668 setting.

Projects are copies of the committed demo (a real base record, markers included); Docker is
pointed at a socket that does not exist, so every refusal here provably comes before Docker.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from audit.build.progress import Progress
from audit.build.run import build_failure
from audit.cli.main import main
from audit.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION, LockError
from audit.gate.compare import gate_result
from audit.history.snapshot import SCRIPT_PATH
from audit.lock.files import BaseRecord, parse_base
from audit.lock.trust import base_identity_drift, base_record_mismatch, recorded_platform
from audit.policy.findings import ERROR
from audit.project.frontdoor import CONSOLE_SCRIPT
from audit.project.sources import DirectorySource
from audit.recipe.model import PipLayer
from audit.recipe.parse import load_recipe
from audit.render.plan import pip_command
from tests.support.cli import edit, fails
from tests.support.fixtures import NO_DAEMON, Wheelhouse
from tests.support.project import ProjectSpec, base_record, pip_recipe_toml, write_project

REPO = Path(__file__).resolve().parents[1]
TOML = "images/demo/image.toml"
BASE = "locks/demo/base.json"
V1_IN = "images/demo/requirements/v1-http.in"
ID = "sha256:" + "a" * 64
DIGEST = "sha256:" + "b" * 64


@pytest.fixture
def demo(demo: Path, no_docker_daemon: str) -> Path:
    """The committed demo as the working dir, with no Docker daemon to reach."""
    return demo


def files_of(root: Path) -> dict[str, bytes]:
    folder = root / "locks"
    return {p.as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def record(root: Path) -> BaseRecord:
    return parse_base((root / BASE).read_bytes(), BASE)


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ('base = "layer-audit/base:bookworm-amd64"', 'base = "layer-audit/base:trixie-amd64"',
         "records base layer-audit/base:bookworm-amd64, the recipe asks for "
         "layer-audit/base:trixie-amd64"),
        ('platform = "linux/amd64"', 'platform = "linux/arm64"',
         "recorded on linux/amd64, the recipe targets linux/arm64"),
        ('interpreters = ["/opt/venv/bin/python"]',
         'interpreters = ["/opt/venv/bin/python", "/usr/bin/python3"]',
         "records interpreters /opt/venv/bin/python, the recipe names /opt/venv/bin/python, "
         "/usr/bin/python3"),
        ('platform = "linux/amd64"', f'platform = "linux/amd64"\nbase_digest = "{DIGEST}"',
         f"records no digest, the recipe pins {DIGEST}"),
    ],
    ids=["base", "platform", "interpreters", "base_digest"],
)  # fmt: skip
def test_a_recipe_moved_off_its_base_record_stales_it_and_every_lock(
    demo: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, words: str
) -> None:
    recipe = load_recipe(DirectorySource(demo), "demo")
    assert base_record_mismatch(recipe, record(demo), CONSOLE_SCRIPT) is None
    edit(demo, TOML, old, new)
    recipe = load_recipe(DirectorySource(demo), "demo")
    reason = base_record_mismatch(recipe, record(demo), CONSOLE_SCRIPT)
    assert reason is not None and reason.startswith(f"{BASE} is stale: ") and words in reason

    assert main(["lock", "demo", "--check"]) == EXIT_VIOLATION
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert out.count("stale: locks/demo/") == 3 and words in out


def test_platform_comes_from_the_recorded_markers(demo: Path) -> None:
    assert recorded_platform(record(demo)) == "linux/amd64"
    assert recorded_platform(base_record()) is None  # hand-made, no markers: not checked


def test_a_digest_pin_matching_the_recorded_repo_digest_is_not_a_change(demo: Path) -> None:
    recipe = load_recipe(DirectorySource(demo), "demo")
    moved = BaseRecord(recipe.base, ID, f"example/base@{DIGEST}", record(demo).environments, None)
    edit(
        demo,
        TOML,
        'platform = "linux/amd64"',
        f'platform = "linux/amd64"\nbase_digest = "{DIGEST}"',
    )
    pinned = load_recipe(DirectorySource(demo), "demo")
    assert base_record_mismatch(pinned, moved, CONSOLE_SCRIPT) is None


def test_base_identity_drift() -> None:
    rec = BaseRecord("b", ID, f"b@{DIGEST}", ())
    assert base_identity_drift(rec, ID, [f"b@{DIGEST}"]) == []
    assert base_identity_drift(rec, "sha256:" + "c" * 64, [f"b@{DIGEST}"]) == [
        f"image id {ID} recorded, sha256:{'c' * 64} now"
    ]
    assert base_identity_drift(rec, ID, []) == [f"repository digest {DIGEST} recorded, none now"]
    assert base_identity_drift(BaseRecord("b", "", DIGEST, ()), "sha256:x", [f"r@{DIGEST}"]) == []
    with pytest.raises(LockError, match="neither an image id nor a repository digest"):
        base_identity_drift(BaseRecord("b", "", None, ()), ID, [])


# ----------------------------------------------------------------------------- everywhere


def test_audit_deps_and_the_gate_see_a_changed_base_as_stale(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tmp_path / "before"
    shutil.copytree(demo, before)
    edit(demo, TOML, "base:bookworm-amd64", "base:trixie-amd64")
    output = tmp_path / "report.json"
    assert main(["audit-deps", "demo", "--format", "json", "--output", str(output)]) == 1
    messages = [
        f["message"] for s in json.loads(output.read_text())["sections"] for f in s["findings"]
    ]
    assert sum("base.json is stale" in message for message in messages) == 3
    report = gate_result(
        DirectorySource(before), DirectorySource(demo), today=date(2026, 1, 1)
    ).report
    stale = [f for f in report.findings if "base.json is stale" in f.message]
    assert stale and stale[0].severity == ERROR


def test_build_refuses_stale_locks_before_docker_naming_each_as_lock_check_does(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(demo, V1_IN, "\n", "\nsix\n")
    assert main(["lock", "demo", "--check"]) == EXIT_VIOLATION
    check_lines = capsys.readouterr().out.strip().splitlines()
    err = fails(capsys, EXIT_VIOLATION, "build", "demo")
    assert "3 of 3 locks are not fresh" in err and "no tag was moved" in err
    for line in check_lines:
        assert line in err.replace("\n    ", " ")  # rich wraps long lines
    assert not (demo / "build").exists()  # refused before rendering, before Docker


def test_lock_will_not_compile_against_a_record_of_another_base(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files_of(demo)
    edit(demo, TOML, "base:bookworm-amd64", "base:trixie-amd64")
    err = fails(capsys, EXIT_BAD_INPUT, "lock", "demo")
    assert "base.json is stale" in err and "--record-base" in err
    assert files_of(demo) == before


# ----------------------------------------------------------------------------- --from-snapshot


def host_snapshot(*interpreters: str) -> bytes:
    """What the documented ``python3 - < snapshot.py`` prints, run by each interpreter here."""
    script = SCRIPT_PATH.read_bytes()
    return b"".join(
        subprocess.run([python, "-"], input=script, capture_output=True, check=True).stdout
        for python in interpreters
    )


def test_from_snapshot_records_the_file_with_its_identity_and_source(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (demo / "snap.json").write_bytes(host_snapshot(sys.executable))
    argv = ["lock", "demo", "--record-base", "--from-snapshot", "snap.json"]
    assert main([*argv, "--image-id", ID, "--repo-digest", f"x/y@{DIGEST}"]) == 0
    written = json.loads((demo / BASE).read_text())
    assert written["source"] == "snapshot-file"
    assert (written["image_id"], written["repo_digest"]) == (ID, f"x/y@{DIGEST}")
    rec = record(demo)
    assert [e.interpreter for e in rec.environments] == ["/opt/venv/bin/python"]
    assert rec.environments[0].python == ".".join(map(str, sys.version_info[:3]))
    assert "image id" in capsys.readouterr().out  # what changed is printed
    # the record is of this machine's Python: locks are stale until compiled against it
    assert main(["lock", "demo", "--check"]) == EXIT_VIOLATION


def test_from_snapshot_reads_one_document_per_interpreter(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = getattr(sys, "_base_executable", sys.executable)  # the venv's own base Python
    if python == sys.executable:
        pytest.skip("needs two interpreters: run the tests in a virtual environment (nox does)")
    edit(demo, TOML, '["/opt/venv/bin/python"]', f'["{sys.executable}", "{python}"]')
    (demo / "snap.json").write_bytes(host_snapshot(python, sys.executable))
    argv = ["lock", "demo", "--record-base", "--from-snapshot", "snap.json", "--image-id", ID]
    assert main([*argv]) == EXIT_OK
    assert [e.interpreter for e in record(demo).environments] == [sys.executable, python]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ([], "needs the image's identity"),
        (["--image-id", "abc"], "not sha256:<64 hex>"),
        (["--repo-digest", "latest"], "not [repository@]sha256:<64 hex>"),
    ],
    ids=["no-identity", "bad-id", "bad-digest"],
)
def test_from_snapshot_refuses_bad_identity_and_writes_nothing(
    demo: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    (demo / "snap.json").write_bytes(host_snapshot(sys.executable))
    before = files_of(demo)
    argv = ["lock", "demo", "--record-base", "--from-snapshot", "snap.json", *extra]
    assert words in fails(capsys, EXIT_BAD_INPUT, *argv)
    assert files_of(demo) == before


def test_from_snapshot_refuses_a_tampered_file_a_missing_interpreter_and_check(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = host_snapshot(sys.executable)
    before = files_of(demo)
    (demo / "snap.json").write_bytes(data.replace(b'"pip"', b'"pjp"', 1))
    argv = ["lock", "demo", "--from-snapshot", "snap.json", "--image-id", ID]  # implies recording
    assert "digest: does not match" in fails(capsys, EXIT_BAD_INPUT, *argv)
    (demo / "snap.json").write_bytes(data + data)  # two documents for one interpreter
    assert "no snapshot of /opt/venv/bin/python" in fails(capsys, EXIT_BAD_INPUT, *argv)
    assert "does not go with --check" in fails(capsys, EXIT_BAD_INPUT, *argv, "--check")
    err = fails(capsys, EXIT_BAD_INPUT, "lock", "demo", "--image-id", ID)  # the stamp answers no
    assert "go with --from-snapshot" in err
    assert files_of(demo) == before


# ----------------------------------------------------------------------------- PEP 668


def test_break_system_packages_is_parsed_rendered_and_suggested(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = load_recipe(DirectorySource(demo), "demo")
    step = next(s for s in recipe.steps() if s.slug == "v1-01")
    assert isinstance(step.layer, PipLayer)
    assert "PIP_BREAK_SYSTEM_PACKAGES" not in pip_command(recipe, step.layer, "l")
    edit(
        demo,
        TOML,
        'platform = "linux/amd64"',
        'platform = "linux/amd64"\nbreak_system_packages = true',
    )
    recipe = load_recipe(DirectorySource(demo), "demo")
    assert recipe.break_system_packages
    command = pip_command(recipe, step.layer, "l")
    assert command.startswith("PIP_CONFIG_FILE=/dev/null PIP_BREAK_SYSTEM_PACKAGES=1 ")
    edit(demo, TOML, "break_system_packages", "break_system_package")
    err = fails(capsys, EXIT_BAD_INPUT, "render", "demo")
    assert "image.break_system_package: unknown key" in err
    assert "did you mean 'break_system_packages'" in err


def test_pips_externally_managed_error_becomes_exit_2_naming_the_setting(demo: Path) -> None:
    recipe = load_recipe(DirectorySource(demo), "demo")
    lines = ["#7 0.4 error: externally-managed-environment", "#7 ERROR: process did not complete"]
    failure = build_failure(recipe, "v1", Progress(), lines)
    assert failure.exit_code == EXIT_BAD_INPUT
    assert "externally managed (PEP 668)" in failure.message
    assert "break_system_packages = true" in failure.hint and "no tag was moved" in failure.hint


@pytest.mark.slow
def test_a_base_recorded_elsewhere_locks_checks_and_audits_with_no_docker_here(
    tmp_path: Path,
    wheelhouse: Wheelhouse,
    local_index: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--from-snapshot, a host lock (this machine matches the snapshot), --check, audit-deps."""
    wheelhouse("alpha", "1.0")
    spec = ProjectSpec("t", pip_recipe_toml(["v1"], index_url=local_index), {"v1.in": "alpha\n"})
    root = write_project(tmp_path / "project", spec)
    monkeypatch.chdir(root)
    monkeypatch.setenv("DOCKER_HOST", NO_DAEMON)
    (root / "snap.json").write_bytes(host_snapshot(sys.executable))
    argv = ["lock", "t", "--record-base", "--from-snapshot", "snap.json", "--image-id", ID]
    assert main(argv) == EXIT_OK
    assert main(["lock", "t", "--check"]) == EXIT_VIOLATION  # recorded, not compiled yet
    assert main(["lock", "t", "--host"]) == EXIT_OK
    assert main(["lock", "t", "--check"]) == EXIT_OK
    assert main(["audit-deps", "t"]) == EXIT_OK
    assert "alpha" in (root / "locks/t/v1-01.txt").read_text()


def test_build_refuses_a_changed_base_naming_record_base(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(demo, TOML, "base:bookworm-amd64", "base:trixie-amd64")
    err = " ".join(fails(capsys, EXIT_VIOLATION, "build", "demo").split())
    assert "locks/demo/base.json is stale: it records base layer-audit/base:bookworm-amd64" in err
    assert "re-record the base and re-lock: layer-audit lock demo --record-base" in err


def test_the_snapshot_script_from_stdin_sees_what_it_sees_as_a_file(tmp_path: Path) -> None:
    """``python3 - < snapshot.py`` (the README's way) leaves out its working folder as the
    file leaves out its own: the same sealed bytes."""
    copy = tmp_path / "script" / "snapshot.py"
    copy.parent.mkdir()
    copy.write_bytes(SCRIPT_PATH.read_bytes())
    (tmp_path / "cwd").mkdir()
    as_file = subprocess.run(
        [sys.executable, str(copy)], capture_output=True, check=True, cwd=tmp_path
    ).stdout
    from_stdin = subprocess.run(
        [sys.executable, "-"], input=copy.read_bytes(), capture_output=True, check=True,
        cwd=tmp_path / "cwd",
    ).stdout  # fmt: skip
    assert from_stdin == as_file


def test_from_snapshot_repairs_a_damaged_base_record(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (demo / BASE).write_text('{"schema": "layer-audit.base/1"')  # truncated
    (demo / "snap.json").write_bytes(host_snapshot(sys.executable))
    assert main(["lock", "demo", "--from-snapshot", "snap.json", "--image-id", ID]) == EXIT_OK
    assert record(demo).image_id == ID
