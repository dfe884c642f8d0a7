"""The live build view from a recorded BuildKit ``--progress=plain`` transcript: per step its
elapsed time and last output line (pip's download progress included), the log path first,
and on a pipe one timestamped line per step with a heartbeat during a long step. Pure: a fake
clock, rich consoles writing to strings."""

from __future__ import annotations

import errno
import itertools
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

from rich.console import Console

from audit.build.progress import LiveView, Progress, clean, duration, step_table

TRANSCRIPT = (Path(__file__).parent / "data" / "buildkit-plain-torch.txt").read_text()
LINES = TRANSCRIPT.splitlines()
SECRET = "glpat-SECRETSECRETSECRET12"
LABELS = {
    ("v1", "1"): "v1 FROM layer-audit/base:bookworm-arm64",
    ("v1", "2"): "v1 layer 1 (requirements/v1.in)",
    ("v1", "3"): "v1 layer 2 (run)",
    ("v2", "1"): "v2 layer 1 (requirements/v2.in)",
}


class Clock:
    """A monotonic clock and a wall clock that move only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return datetime(2026, 11, 30, 20, 0, tzinfo=UTC) + timedelta(seconds=self.now - 100)


def upto(marker: str) -> list[str]:
    """The transcript's lines up to and including the first that contains ``marker``."""
    index = next(i for i, line in enumerate(LINES) if marker in line)
    return LINES[: index + 1]


def test_a_running_step_shows_elapsed_time_and_pips_download_progress() -> None:
    clock = Clock()
    progress = Progress(clock=clock)
    for line in upto("412.0/526.0 MB"):
        progress.feed(line)
    clock.now += 75
    torch = progress.vertices["6"]
    assert torch.status == "running" and torch.elapsed(clock.now) == 75
    assert torch.last == (
        "Downloading torch-2.9.0%2Bcu130-cp311-cp311-manylinux_2_28_aarch64.whl 412.0/526.0 MB"
    )
    table = render(step_table(progress, "glm53 v1", LABELS))
    assert "running 1m15s" in table and "412.0/526.0 MB" in table
    assert "v1 layer 1 (requirements/v1.in)" in table and "cached" in table


def test_a_carriage_return_line_belongs_to_the_step_that_printed_last() -> None:
    progress = Progress(clock=Clock())
    for line in upto("498.6/526.0 MB"):
        progress.feed(line)
    assert progress.vertices["6"].last.endswith(" 498.6/526.0 MB")


def test_finished_steps_keep_buildkits_time_and_the_guards_violation() -> None:
    progress = Progress(clock=Clock())
    for line in LINES:
        progress.feed(line)
    assert progress.vertices["6"].elapsed(10_000.0) == 61.5
    assert progress.vertices["8"].status == "error"
    assert progress.violations[0]["package"] == "nvidia-nccl-cu13"
    table = render(step_table(progress, "glm53", LABELS))
    assert "done 1m02s" in table and "done 0.4s" in table and "error" in table


def test_no_credential_reaches_the_view_or_the_live_log(tmp_path: Path) -> None:
    clock = Clock()
    out = StringIO()
    log = tmp_path / "reports" / "glm53" / "build.log"
    with LiveView(pipe(out), "glm53 v1", LABELS, log_path=log, clock=clock,
                  wall=clock.wall, heartbeat=5) as view:  # fmt: skip
        for line in upto("Looking in indexes"):
            view.feed(line)
        clock.now += 6
        view.tick()
    live = log.with_name("build.live.log").read_text()
    assert "Looking in indexes: https://pypi.example.com/simple" in live
    assert SECRET not in live and SECRET not in out.getvalue()
    assert "ci-token" not in clean("#6 0.4 https://ci-token:x@h/simple")


def test_the_log_path_comes_first(tmp_path: Path) -> None:
    out = StringIO()
    log = tmp_path / "build.log"
    with LiveView(pipe(out), "glm53 v1", LABELS, log_path=log, clock=Clock()) as view:
        view.feed(LINES[0])
    first = out.getvalue().splitlines()[0]
    assert first == f"glm53 v1: build log {log} (follow it live: tail -f {tmp_path}/build.live.log)"


def test_on_a_pipe_one_timestamped_line_per_step_and_never_silent() -> None:
    clock = Clock()
    out = StringIO()
    with LiveView(pipe(out), "glm53", LABELS, clock=clock, wall=clock.wall,
                  heartbeat=5) as view:  # fmt: skip
        for line in upto("#4 CACHED"):
            view.feed(line)
        for line in upto("412.0/526.0 MB")[len(upto("#4 CACHED")) :]:
            clock.now += 1
            view.feed(line)
            view.tick()
        for _ in range(12):  # a silent minute of a long step: a line at least every 5 s
            clock.now += 1
            view.tick()
        for line in LINES[len(upto("412.0/526.0 MB")) :]:
            view.feed(line)
    lines = out.getvalue().splitlines()
    assert lines[0] == "20:00:00 [v1 1/3] cached: v1 FROM layer-audit/base:bookworm-arm64"
    beats = [line for line in lines if "[v1 2/3] running" in line]
    assert len(beats) >= 3, lines
    assert beats[-1].endswith("412.0/526.0 MB")
    during = lines[lines.index(beats[0]) : lines.index(beats[-1]) + 1]
    stamps = [datetime.strptime(line[:8], "%H:%M:%S") for line in during]
    assert all((b - a).seconds <= 5 for a, b in itertools.pairwise(stamps))
    assert "[v1 2/3] done 1m02s: v1 layer 1 (requirements/v1.in)" in out.getvalue()
    assert [line for line in lines if "[v2 1/1] error" in line]


def test_durations_read_at_a_glance() -> None:
    assert [duration(s) for s in (0.44, 9.96, 42.0, 185.0, 3720.0)] == [
        "0.4s", "10s", "42s", "3m05s", "1h02m"
    ]  # fmt: skip


def pipe(out: StringIO) -> Console:
    return Console(file=out, width=200, force_terminal=False, no_color=True)


def render(table: object) -> str:
    buffer = StringIO()
    Console(file=buffer, width=200, no_color=True).print(table)
    return buffer.getvalue()


def test_a_live_copy_that_cannot_be_written_never_stops_the_build(tmp_path: Path) -> None:
    out = StringIO()
    with LiveView(pipe(out), "glm53", LABELS, log_path=tmp_path / "build.log",
                  clock=Clock(), heartbeat=None) as view:  # fmt: skip
        assert view._copy is not None
        view._copy.close()
        view._copy = FullDisk()
        for line in LINES:
            view.feed(line)
    assert "[v2 1/1] error" in out.getvalue()


class FullDisk(StringIO):
    """A file whose every write fails the way a full disk makes it fail."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")
