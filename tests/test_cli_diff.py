"""``python -m audit diff`` and ``snapshot`` end to end through ``audit.cli.main.main``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from audit.cli.main import main
from audit.history.snapshot import SCHEMA, read_snapshot
from tests.support.snapshot_files import write


@pytest.fixture
def before(tmp_path: Path) -> Path:
    return write(tmp_path / "before.json", ("nvidia-nccl-cu13", "2.30.1"), ("six", "1.16"))


def test_clean_diff_exits_0(before: Path, tmp_path: Path) -> None:
    after = write(tmp_path / "after.json", ("nvidia-nccl-cu13", "2.30.2"), ("six", "1.16"))
    assert main(["diff", str(before), str(after)]) == 0


def test_downgrade_exits_1_and_json_report_says_why(before: Path, tmp_path: Path) -> None:
    after = write(tmp_path / "after.json", ("nvidia-nccl-cu13", "2.29.7"), ("six", "1.16"))
    report = tmp_path / "report.json"
    assert main(["diff", str(before), str(after), "--format", "json", "--output", str(report)]) == 1
    document = json.loads(report.read_text())
    assert document["verdict"] == "fail"
    (finding,) = document["sections"][0]["findings"]
    assert (finding["rule"], finding["before"], finding["after"]) == (
        "downgraded",
        "2.30.1",
        "2.29.7",
    )


def test_markdown_to_stdout(
    before: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    after = write(tmp_path / "after.json", ("nvidia-nccl-cu13", "2.30.1"))
    assert main(["diff", str(before), str(after), "--format", "markdown"]) == 1
    assert "| ❌ | removed | `six` |" in capsys.readouterr().out


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data.replace(b"2.30.1", b"2.31.0"),
        lambda data: data[:-40],
        lambda data: data.replace(SCHEMA.encode(), b"pip-list/1"),
    ],
    ids=["tampered", "truncated", "wrong-schema"],
)
def test_bad_snapshot_exits_2(before: Path, tmp_path: Path, damage, capsys) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.json"
    bad.write_bytes(damage(before.read_bytes()))
    assert main(["diff", str(before), str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err


def test_unknown_interpreter_exits_2(before: Path) -> None:
    assert main(["diff", str(before), str(before), "--interpreter", "/opt/venv/bin/python"]) == 2


def test_snapshot_command_runs_the_script(tmp_path: Path) -> None:
    target = tmp_path / "snap.json"
    assert main(["snapshot", "--python", sys.executable, "--output", str(target)]) == 0
    (env,) = read_snapshot(target)
    assert env.interpreter and env.winners()


def test_snapshot_of_a_missing_interpreter_exits_3(tmp_path: Path) -> None:
    assert main(["snapshot", "--python", str(tmp_path / "python9")]) == 3


def test_recipe_policy_applies(
    before: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """images/demo forbids chardet (and, as a cpu image, warns on a -cu12 package)."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    after = write(
        tmp_path / "after.json",
        ("nvidia-nccl-cu13", "2.30.1"),
        ("six", "1.16"),
        ("nvidia-cublas-cu12", "12.8.4.1"),
        ("chardet", "5.2.0"),
    )
    assert main(["diff", str(before), str(after)]) == 0
    report = tmp_path / "report.json"
    args = ["diff", str(before), str(after), "--recipe", "images/demo", "--output", str(report)]
    assert main([*args, "--format", "json"]) == 1
    findings = json.loads(report.read_text())["sections"][0]["findings"]
    severities = {f["rule"]: f["severity"] for f in findings}
    assert severities["forbidden"] == "error" and severities["cuda-suffix"] == "warning"
    assert main(["diff", str(before), str(after), "--recipe", "no-such-image"]) == 2


# --- big and special inputs ----------------------------------------------------------------


def test_a_snapshot_over_the_limit_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 33 MiB file (sparse: nothing is written) exits 2 naming its size and the limit."""
    from audit.history.snapshot import SNAPSHOT_LIMIT

    small = write(tmp_path / "before.json", ("six", "1.16"))
    big = tmp_path / "after.json"
    with big.open("wb") as handle:
        handle.truncate(SNAPSHOT_LIMIT + 2**20)
    assert main(["diff", str(small), str(big)]) == 2
    err = capsys.readouterr().err
    assert f"{big}: 33 MiB, over the 32 MiB a snapshot file may be" in " ".join(err.split())


def test_a_fifo_is_refused_not_waited_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os
    import threading

    small = write(tmp_path / "before.json", ("six", "1.16"))
    fifo = tmp_path / "after.json"
    os.mkfifo(fifo)
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(main(["diff", str(small), str(fifo)])))
    worker.daemon = True
    worker.start()
    worker.join(timeout=20)
    assert codes == [2]
    assert "not a regular file" in capsys.readouterr().err
