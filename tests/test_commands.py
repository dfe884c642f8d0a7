"""The one wrapper around external programs: what it prints, hides, and raises."""

from __future__ import annotations

import pytest

from audit.core.errors import CommandFailed
from audit.engines import process as commands


@pytest.fixture
def loud(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(commands.QUIET_ENV, raising=False)


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
