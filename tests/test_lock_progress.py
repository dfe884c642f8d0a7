"""A long lock is never silent: progress at least every 2 seconds, on a pipe and on a pty.

The index answers every wheel download after a few seconds (a slow mirror), so resolving one
layer takes well over ten seconds; the test times the gaps between what ``lock`` prints.
"""

from __future__ import annotations

import itertools
import os
import platform
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.history.snapshot import Distribution
from audit.lock.progress import LockProgress
from tests.support.cli import REPO
from tests.support.fixtures import Wheelhouse
from tests.support.pkgindex import serve_index
from tests.support.project import ProjectSpec, base_record, pip_recipe_toml, write_project

pytestmark = pytest.mark.slow
MAX_GAP = 2.6  # seconds: the heartbeat is every 2 s, plus scheduling on a busy machine
# Before its first line the program is starting (an interpreter and its imports): on a machine
# busy with parallel test workers that alone can take seconds, and it is not the heartbeat.
FIRST_LINE_WITHIN = 15.0


def beats(times: list[float]) -> list[float]:
    """The gaps between what the program printed, after the first line: the heartbeat's."""
    assert len(times) > 2, "the program printed fewer than two lines"
    assert times[1] - times[0] < FIRST_LINE_WITHIN, "no first line within 15 s of the start"
    return gaps(times[1:])


@pytest.fixture
def slow_project(tmp_path: Path, wheelhouse: Wheelhouse) -> Iterator[Path]:
    for name in ("alpha", "beta"):
        wheelhouse(name, "1.0")
    with serve_index(wheelhouse.path, "slow", slow_seconds=3.5) as url:
        spec = ProjectSpec(
            "t",
            pip_recipe_toml(["v1"], index_url=url),
            {"v1.in": "alpha\nbeta\n"},
            base_record(
                Distribution("pip", "23.0", requires_dist=()), python=platform.python_version()
            ),
        )
        yield write_project(tmp_path, spec)


def argv() -> list[str]:
    return [sys.executable, "-m", "audit", "lock", "t", "--host"]


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120")


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def test_on_a_pipe_a_timestamped_line_comes_at_least_every_two_seconds(
    slow_project: Path,
) -> None:
    started = time.monotonic()
    proc = subprocess.Popen(argv(), cwd=slow_project, env=env(), stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)  # fmt: skip
    assert proc.stderr is not None
    times, lines = [started], []
    for line in proc.stderr:
        times.append(time.monotonic())
        lines.append(line)
    assert proc.wait() == 0, "".join(lines)
    assert times[-1] - started > 10, "the slow index did not make the lock long"
    progress = [line for line in lines if line.startswith("[")]
    assert any("resolving with pip-compile" in line for line in progress)
    assert max(beats(times)) < MAX_GAP, lines


def test_on_a_terminal_the_status_line_keeps_moving(slow_project: Path) -> None:
    main, child = pty.openpty()
    started = time.monotonic()
    proc = subprocess.Popen(argv(), cwd=slow_project, env=env(), stdin=child, stdout=child,
                            stderr=child, close_fds=True)  # fmt: skip
    os.close(child)
    times, chunks = [started], []
    while True:
        ready, _, _ = select.select([main], [], [], 5)
        if not ready:
            break
        try:
            data = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        times.append(time.monotonic())
        chunks.append(data.decode(errors="replace"))
    assert proc.wait(timeout=60) == 0, "".join(chunks)
    assert times[-1] - started > 10
    assert max(beats(times)) < MAX_GAP
    assert "resolving" in "".join(chunks)


def test_progress_lines_name_the_step_the_time_and_the_last_output() -> None:
    class Pipe:
        def __init__(self) -> None:
            self.text = ""

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

        def isatty(self) -> bool:
            return False

    pipe = Pipe()
    with LockProgress("v2 layer 1", pipe) as progress:  # type: ignore[arg-type]
        progress.feed("layer-audit: resolving with pip-compile")
        progress.feed("Collecting torch==2.9.0 (from https://user:secret@example.org/simple)")
    assert "v2 layer 1: resolving with pip-compile 0s" in pipe.text
    assert progress.describe().endswith("Collecting torch==2.9.0 (from https://example.org/simple)")
