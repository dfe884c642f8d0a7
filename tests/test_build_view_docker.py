"""The live build view on a real BuildKit build (``pytest --docker``): in a real terminal
(a tmux pane, read with ``capture-pane``) and on a pipe (CI logs)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.docker_build import (
    CLIENT,
    REPO_ROOT,
    Index,
    amd64,
    cleanup,
    index,
    make_project,
    two_stages,
)
from tests.support.schemas import problems

__all__ = ["amd64", "cleanup", "index"]  # fixtures, from tests/support/docker_build.py
pytestmark = [pytest.mark.docker, pytest.mark.slow]


def slow_step(seconds: int) -> str:
    """A shell layer that prints a numbered tick a second (unique: never a cached step)."""
    return (
        f"echo view-{uuid.uuid4().hex[:8]}; for i in $(seq 1 {seconds}); do echo tick-$i; "
        "sleep 1; done"
    )


def test_a_real_terminal_shows_elapsed_time_last_output_and_the_log_first(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    tmux = shutil.which("tmux") or pytest.skip("needs tmux (apt-get install -y tmux)")
    project = make_project(tmp_path, index, "liveterm", two_stages(
        f"run = {json.dumps(slow_step(12))}"), *amd64)  # fmt: skip
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])
    socket = f"h6-view-{os.getpid()}"  # our own tmux server: nobody else's sessions
    command = (
        f"cd {tmp_path} && LAYER_AUDIT_DOCKER={CLIENT} PYTHONPATH={REPO_ROOT} "
        f"{sys.executable} -m audit build liveterm; echo BUILD-''EXIT=$?"
    )

    def pane() -> str:
        return subprocess.run([tmux, "-L", socket, "capture-pane", "-p", "-t", "view"],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip

    subprocess.run([tmux, "-L", socket, "new-session", "-d", "-s", "view", "-x", "180",
                    "-y", "50"], check=True)  # fmt: skip
    try:
        subprocess.run([tmux, "-L", socket, "send-keys", "-t", "view", command, "Enter"],
                       check=True)  # fmt: skip
        seen: list[str] = []
        deadline = time.monotonic() + 600
        while "BUILD-EXIT=" not in (screen := pane()) and time.monotonic() < deadline:
            if re.search(r"running \d+(\.\d)?s\s.*tick-\d+", screen):
                seen.append(screen)
            time.sleep(0.5)
    finally:
        subprocess.run([tmux, "-L", socket, "kill-server"], check=False)
    assert "BUILD-EXIT=0" in screen, screen
    assert seen, f"no running step with its elapsed time and last output was ever shown:\n{screen}"
    ticks = [int(n) for s in seen for n in re.findall(r"tick-(\d+)", s)]
    assert max(ticks) > min(ticks)  # the last output moved while the step ran
    log = tmp_path / "build" / "reports" / "liveterm" / "build.log"
    assert f"liveterm v2: build log {log}" in seen[0].replace("\n", "")
    assert "v2 layer 1 (run)" in screen and "done" in screen


def test_on_a_pipe_a_long_step_is_never_silent(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    project = make_project(tmp_path, index, "livepipe", two_stages(
        f"run = {json.dumps(slow_step(14))}"), *amd64)  # fmt: skip
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])

    done = project.build()

    assert done.returncode == 0, done.stderr[-3000:]
    beats = re.findall(r"^(\d\d:\d\d:\d\d) \[v2 1/1\] running (\S+): tick-(\d+)$",
                       done.stderr, re.MULTILINE)  # fmt: skip
    assert len(beats) >= 2, done.stderr[-3000:]
    assert re.search(r"^\d\d:\d\d:\d\d \[v2 1/1\] done \S+: v2 layer 1 \(run\)$", done.stderr,
                     re.MULTILINE)  # fmt: skip
    assert done.stderr.index("livepipe v2: build log ") < done.stderr.index("[v1 1/2]")
    live = tmp_path / "build" / "reports" / "livepipe" / "build.live.log"
    assert "tick-14" in live.read_text()
    # the build's trail report: valid against the packaged schema, each finding located
    trail = json.loads((tmp_path / "build/reports/livepipe/v2/report.json").read_text())
    assert problems("report", trail) == []
    located = {(f["image"], f["stage"], f["layer"]) for s in trail["sections"]
               for f in s["findings"]}  # fmt: skip
    assert ("livepipe", "v1", 1) in located
