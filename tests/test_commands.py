"""The one wrapper around external programs: what it prints, hides, and raises."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import pytest

from audit.errors import CommandFailed
from audit.host import process as commands


@pytest.fixture
def loud(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Commands echoed, as ``-v`` makes the command line echo them."""
    monkeypatch.delenv(commands.QUIET_ENV, raising=False)
    with commands.echoing(True):
        yield


def test_commands_are_not_echoed_by_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(commands.QUIET_ENV, raising=False)
    commands.run(["echo", "quiet"])
    commands.stream(["echo", "quiet"], lambda line: None)
    with commands.echoing(False):
        commands.run(["echo", "quiet"])
    assert capsys.readouterr().err == ""
    with commands.echoing(True):
        commands.run(["echo", "loud"])
    assert "$ " in capsys.readouterr().err
    commands.run(["echo", "quiet"])  # echoing ends with its block
    assert capsys.readouterr().err == ""


def test_the_printed_command_keeps_brackets(loud: None, capsys: pytest.CaptureFixture[str]) -> None:
    done = commands.run(["echo", "alpha[extra]", "[bold]x[/bold]"])
    assert done.stdout == "alpha[extra] [bold]x[/bold]\n"
    assert "'alpha[extra]' '[bold]x[/bold]'" in capsys.readouterr().err


def test_redacted_strings_are_never_printed(loud: None, capsys: pytest.CaptureFixture[str]) -> None:
    commands.run(["echo", "https://bot:t0ken@example.org/simple"], redact=["t0ken"])
    err = capsys.readouterr().err
    assert "t0ken" not in err and "***" in err


def test_a_failure_is_one_typed_error_with_the_output_tail() -> None:
    with pytest.raises(CommandFailed) as failure:
        commands.run(["sh", "-c", "echo broken >&2; exit 7"], hint="fix it")
    assert failure.value.returncode == 7 and "broken" in failure.value.output
    assert failure.value.hint == "fix it"


def test_a_missing_program_is_named() -> None:
    with pytest.raises(CommandFailed, match="program not found: no-such-program-here"):
        commands.run(["no-such-program-here"])


def test_stream_hands_over_each_line_in_order_and_returns_them_all() -> None:
    seen: list[str] = []
    script = "echo one; echo two >&2; echo three"
    done = commands.stream(["sh", "-c", script], seen.append, check=False)
    assert seen == ["one", "two", "three"] == list(done.lines)
    assert done.returncode == 0 and done.stderr == ""


def test_stream_shares_run_s_one_failure_type() -> None:
    with pytest.raises(CommandFailed) as failure:
        commands.stream(["sh", "-c", "echo broken; exit 5"], lambda line: None, hint="fix it")
    assert failure.value.returncode == 5 and "broken" in failure.value.output
    with pytest.raises(CommandFailed, match="program not found: no-such-program-here"):
        commands.stream(["no-such-program-here"], lambda line: None)
    unchecked = commands.stream(["sh", "-c", "exit 5"], lambda line: None, check=False)
    assert unchecked.returncode == 5


def test_stream_prints_the_command_like_run(loud: None, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["echo", "--label", "a=1", "https://bot:t0ken@example.org", "[x]"]
    commands.stream(argv, lambda line: None, redact=["t0ken"])
    err = capsys.readouterr().err
    assert "--label … (1 labels, in build.log)" in err and "t0ken" not in err and "[x]" in err


def test_stream_kills_a_program_once_cancel_is_set() -> None:
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    started = time.monotonic()
    done = commands.stream(["sleep", "30"], lambda line: None, check=False, cancel=cancel)
    assert done.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 10  # killed, not waited for


def test_stream_kills_a_program_past_its_timeout_and_check_makes_it_a_failure() -> None:
    with pytest.raises(CommandFailed, match="exit code -9"):
        commands.stream(["sh", "-c", "echo started; sleep 30"], lambda line: None, timeout=0.3)


def test_stream_leaves_a_program_that_ends_in_time_alone() -> None:
    cancel = threading.Event()
    done = commands.stream(["sh", "-c", "echo one; echo two"], lambda line: None,
                           timeout=30, cancel=cancel)  # fmt: skip
    assert done.returncode == 0 and done.lines == ("one", "two")


def test_stream_keeps_only_the_last_lines_asked_for_and_hands_over_all() -> None:
    seen: list[str] = []
    done = commands.stream(["seq", "1000"], seen.append, keep=3)
    assert len(seen) == 1000 and done.lines == ("998", "999", "1000")
