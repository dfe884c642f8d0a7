"""Project files are project files: regular files inside the project, under a size cap.

Each refusal is exit 2 naming the path, and no read ever blocks: the FIFO and ``/dev/zero``
cases run ``python -m audit`` as a process with a timeout, so a hang fails the test instead of
hanging the suite. Also: a plain file named ``build`` at the root, and the temporaries of
atomic writes a killed run left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit.errors import EXIT_BAD_INPUT
from audit.host import atomic
from audit.project.sources import TEXT_LIMIT
from tests.support.cli import fails

REPO = Path(__file__).resolve().parents[1]
V1_IN = "images/demo/requirements/v1-http.in"
BANNER = "images/demo/scripts/banner.py"
PASSWORD = "n3trcPassw0rd"


def run_audit(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m audit ARGV`` in ``root``; a read that blocks fails here by its timeout."""
    env = dict(os.environ, PYTHONPATH=str(REPO), AUDIT_QUIET_COMMANDS="1")
    return subprocess.run(
        [sys.executable, "-m", "audit", *argv],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def replace_with(path: Path, make: str, tmp_path: Path) -> None:
    """Turn ``path`` into a FIFO, a link to /dev/zero, a folder, a link out, or a huge file."""
    path.unlink()
    if make == "fifo":
        os.mkfifo(path)
    elif make == "dev-zero":
        path.symlink_to("/dev/zero")
    elif make == "folder":
        path.mkdir()
    elif make == "link-out":
        outside = tmp_path / "netrc"
        outside.write_text(f"machine pypi.example login me password {PASSWORD}\n")
        path.symlink_to(outside)
    elif make == "huge":
        path.write_text("# padding\n" * (TEXT_LIMIT // 10 + 1))


CASES = [
    ("fifo", "a FIFO"),
    ("dev-zero", "links outside the project"),
    ("folder", "Is a directory"),
    ("link-out", "links outside the project"),
    ("huge", "larger than 1024 KiB"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("make", "words"), CASES, ids=[case[0] for case in CASES])
@pytest.mark.parametrize(
    "command", [["render", "demo"], ["lock", "demo", "--check"], ["audit-deps", "demo"]]
)
def test_a_requirements_file_that_is_not_a_project_file_is_refused(
    demo: Path, tmp_path: Path, make: str, words: str, command: list[str]
) -> None:
    replace_with(demo / V1_IN, make, tmp_path)
    done = run_audit(demo, *command)
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert V1_IN in done.stderr and words in done.stderr
    assert "Traceback" not in done.stderr and PASSWORD not in done.stdout + done.stderr


COPY_CASES = [case for case in CASES if case[0] != "folder"]  # a folder is a fine copy source


@pytest.mark.slow
@pytest.mark.parametrize(("make", "words"), COPY_CASES, ids=[case[0] for case in COPY_CASES])
def test_a_copy_source_that_is_not_a_project_file_is_refused(
    demo: Path, tmp_path: Path, make: str, words: str
) -> None:
    replace_with(demo / BANNER, make, tmp_path)
    done = run_audit(demo, "render", "demo")
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert "banner.py" in done.stderr and words in done.stderr
    assert "Traceback" not in done.stderr
    assert not (demo / "build" / "demo" / "Dockerfile").exists()


@pytest.mark.slow
@pytest.mark.parametrize("make", ["fifo", "link-out", "huge"])
def test_a_template_that_is_not_a_project_file_is_refused(
    demo: Path, tmp_path: Path, make: str
) -> None:
    override = demo / "templates" / "Dockerfile.j2"  # a project override of the packaged one
    override.parent.mkdir(parents=True, exist_ok=True)
    override.write_text("FROM scratch\n")
    replace_with(override, make, tmp_path)
    done = run_audit(demo, "render", "demo")
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert "templates/Dockerfile.j2" in done.stderr and "Traceback" not in done.stderr


def test_a_link_inside_the_project_is_followed(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = demo / "images/demo/requirements/real-v1.in"
    (demo / V1_IN).rename(real)
    (demo / V1_IN).symlink_to(real.name)
    from audit.cli.main import main

    assert main(["render", "demo"]) == 0


def test_a_plain_file_named_build_is_a_clear_error(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (demo / "build").write_text("not a folder\n")
    err = fails(capsys, EXIT_BAD_INPUT, "render", "demo")
    assert "build: is a file, but a folder is needed here" in err
    assert (demo / "build").read_text() == "not a folder\n"  # nothing lost


def dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_temporaries_of_a_killed_run_are_cleaned_by_the_next_run(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from audit.cli.main import main

    assert main(["render", "demo"]) == 0
    context = demo / "build" / "demo"
    leftover = context / f".Dockerfile.audit-{dead_pid()}-k1ll3d_x.tmp"
    leftover.write_text("half a Dockerfi")
    live = context / f".Dockerfile.audit-{os.getpid()}-wr1t1ng.tmp"  # a live writer's: kept
    live.write_text("being written")
    foreign = context / f".Dockerfile.{dead_pid()}-other.tmp"  # not ours: never touched
    foreign.write_text("another program's")
    atomic._cleaned.clear()  # a new run: this process stands for it
    (demo / V1_IN).write_text((demo / V1_IN).read_text() + "\n")

    assert main(["render", "demo"]) == 0
    assert not leftover.exists()
    assert live.exists() and foreign.exists()


def test_a_sigkilled_write_leaves_a_temporary_the_next_write_removes(tmp_path: Path) -> None:
    folder = tmp_path / "locks" / "demo"
    script = (
        "import os, signal, sys, tempfile\n"
        "from pathlib import Path\n"
        "from audit.host import atomic\n"
        "real = tempfile.mkstemp\n"
        "def killed(*a, **k):\n"
        "    fd, name = real(*a, **k)\n"
        "    os.write(fd, b'half')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "tempfile.mkstemp = killed\n"
        f"atomic.write_text(Path({str(folder / 'v1-01.txt')!r}), 'lock')\n"
    )
    folder.mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=str(REPO)), check=False
    )
    assert done.returncode == -9
    (leftover,) = folder.glob(".v1-01.txt.*.tmp")
    check = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "-q", f"locks/demo/{leftover.name}"], check=False
    )
    assert check.returncode == 0, "temporaries must be git-ignored"
    atomic._cleaned.discard(folder)
    atomic.write_text(folder / "v1-01.txt", "lock")
    assert sorted(p.name for p in folder.iterdir()) == ["v1-01.txt"]
