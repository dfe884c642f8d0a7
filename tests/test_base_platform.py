"""Snapshots and base records carry their platform; a snapshot of another platform than the
recipe's is refused before anything is written; re-recording says what changed.

Snapshots are this machine's (the snapshot script run here, as the README has it run on the
machine that has the image); an arm64 one is this machine's with its markers and platform
rewritten and sealed again. Docker is pointed at a socket that does not exist: every answer
here comes before Docker.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from audit.cli.main import main
from audit.errors import EXIT_BAD_INPUT, EXIT_OK
from audit.history.snapshot import (
    ARCHITECTURES,
    SCRIPT_PATH,
    Distribution,
    Environment,
    dump_snapshot,
    environment_platform,
    parse_snapshot,
    platform_of,
)
from audit.inimage import snapshot as script
from audit.lock.files import BaseRecord, base_changes, parse_base
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.cli import edit, fails

REPO = Path(__file__).resolve().parents[1]
TOML = "images/demo/image.toml"
BASE = "locks/demo/base.json"
ID = "sha256:" + "a" * 64
HOST = f"linux/{ARCHITECTURES[platform.machine()]}"
FOREIGN = "linux/arm64" if HOST != "linux/arm64" else "linux/amd64"
FOREIGN_MACHINE = "aarch64" if FOREIGN == "linux/arm64" else "x86_64"


@pytest.fixture
def demo(demo: Path, no_docker_daemon: str) -> Path:
    """The committed demo as the working dir, with no Docker daemon to reach."""
    return demo


def host_snapshot() -> bytes:
    """What ``python3 - < snapshot.py`` prints here."""
    return subprocess.run(
        [sys.executable, "-"], input=SCRIPT_PATH.read_bytes(), capture_output=True, check=True
    ).stdout


def foreign_snapshot() -> bytes:
    """This machine's snapshot as if taken on the other architecture, sealed again."""
    (env,) = parse_snapshot(host_snapshot(), "here")
    markers = {**env.markers, "platform_machine": FOREIGN_MACHINE}
    return dump_snapshot([dataclasses.replace(env, markers=markers, platform=FOREIGN)])


def files_of(root: Path) -> dict[str, bytes]:
    folder = root / "locks"
    return {p.as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------- what carries it


def test_the_snapshot_script_writes_the_platform_its_markers_say() -> None:
    (env,) = parse_snapshot(host_snapshot(), "here")
    assert env.platform == HOST == platform_of(env.markers)
    assert script.ARCHITECTURES == ARCHITECTURES  # the in-image copy of the table agrees
    for machine in ARCHITECTURES:
        markers = {"platform_machine": machine, "platform_system": "Linux"}
        assert script.platform_of(markers) == platform_of(markers)
    assert platform_of({"platform_machine": "sparc64"}) == ""


def test_an_old_snapshot_without_the_field_reads_its_platform_from_the_markers() -> None:
    old = Environment("/usr/bin/python3", "3.9.2", {"platform_machine": "aarch64"}, ("/x",), ())
    (parsed,) = parse_snapshot(dump_snapshot([old]), "old")
    assert parsed == old and b'"platform"' not in dump_snapshot([old])  # bytes kept
    assert environment_platform(parsed) == "linux/arm64"


@pytest.mark.parametrize("image", ["demo", "vllm-arm64-cu13"])
def test_the_committed_base_records_stay_valid_and_name_their_recipes_platform(
    image: str,
) -> None:
    record = parse_base((REPO / "locks" / image / "base.json").read_bytes(), image)
    recipe = load_recipe(DirectorySource(REPO), image)
    assert {environment_platform(env) for env in record.environments} == {recipe.platform}


# ------------------------------------------------------------------------------- refusals


def test_from_snapshot_of_another_platform_is_exit_2_naming_both_and_writes_nothing(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(demo, TOML, f'platform = "{HOST}"', f'platform = "{FOREIGN}"')
    (demo / "snap.json").write_bytes(host_snapshot())
    before = files_of(demo)
    argv = ["lock", "demo", "--record-base", "--from-snapshot", "snap.json", "--image-id", ID]
    err = " ".join(fails(capsys, EXIT_BAD_INPUT, *argv).split())
    assert f"--from-snapshot snap.json is a snapshot of {HOST} (platform_machine " in err
    assert f"images/demo/image.toml targets {FOREIGN} (image.platform)" in err
    assert f"take the snapshot in the {FOREIGN} image" in err
    assert files_of(demo) == before


# ------------------------------------------------------------------------- what changed


def test_re_recording_on_another_platform_says_so(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(demo, TOML, f'platform = "{HOST}"', f'platform = "{FOREIGN}"')
    (demo / "snap.json").write_bytes(foreign_snapshot())
    argv = ["lock", "demo", "--record-base", "--from-snapshot", "snap.json", "--image-id", ID]
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out
    assert f"base: platform {HOST} -> {FOREIGN}" in out
    written = json.loads((demo / BASE).read_text())
    assert written["snapshot"]["environments"][0]["platform"] == FOREIGN


def _env(interpreter: str, python: str, machine: str, *pins: tuple[str, str]) -> Environment:
    dists = tuple(Distribution(name, version) for name, version in pins)
    markers = {"platform_machine": machine, "platform_system": "Linux"}
    return Environment(interpreter, python, markers, ("/x",), dists, "glibc 2.36")


def test_base_changes_name_platform_interpreters_python_and_counts() -> None:
    venv, system = "/opt/venv/bin/python", "/usr/bin/python3"
    old = BaseRecord("img", "sha256:1", None, (
        _env(venv, "3.11.2", "x86_64", ("numpy", "1.26.4"), ("pip", "23.0"), ("six", "1.16")),
        _env(system, "3.11.2", "x86_64", ("pip", "23.0")),
    ))  # fmt: skip
    new = BaseRecord("img", "sha256:2", None, (
        _env(venv, "3.12.3", "aarch64", ("numpy", "2.0.0"), ("pip", "23.0"), ("torch", "2.9")),
        _env("/opt/conda/bin/python", "3.12.3", "aarch64", ("pip", "24.0")),
    ))  # fmt: skip
    assert base_changes(old, new) == [
        "platform linux/amd64 -> linux/arm64",
        "image id sha256:1 -> sha256:2",
        "/usr/bin/python3: no longer recorded (was Python 3.11.2, 1 distribution)",
        "/opt/venv/bin/python: Python 3.11.2 -> 3.12.3",
        "/opt/venv/bin/python: 1 added, 1 removed, 1 changed (3 -> 3 distributions)",
        "/opt/venv/bin/python: numpy 1.26.4 -> 2.0.0",
        "/opt/venv/bin/python: six 1.16 -> (absent)",
        "/opt/venv/bin/python: torch (absent) -> 2.9",
        "/opt/conda/bin/python: newly recorded (Python 3.12.3, 1 distribution)",
    ]
    assert base_changes(new, new) == []
    assert base_changes(None, new)[0] == "recorded img (sha256:2)"
