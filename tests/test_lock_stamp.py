"""The verified-fresh stamp: ``lock`` on unchanged inputs answered without parsing anything.

The projects here hold locks made fresh by hand (their recorded inputs match the files), so no
test compiles: a run that had to compile would fail for want of an index, and says so.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, cast

import pytest

from audit.base.record import BaseOptions
from audit.cli import lock_quick
from audit.cli import main as cli
from audit.history.snapshot import Distribution
from audit.lock import stamp as lock_stamp
from audit.lock import workflow as lock_workflow
from audit.project.sources import DirectorySource, Source
from audit.recipe import parse as recipe_parse
from tests.support.lock_stamp import HEAVY, STAMP, imported, project, spawn
from tests.support.project import base_record, write_base

__all__ = ["project"]  # the fixture, from tests/support/lock_stamp.py


@pytest.fixture
def full_looks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each time the lock command took the full path (parsed the recipe)."""
    looks: list[str] = []
    parse = recipe_parse.load_recipe

    def spy(source: object, image: str) -> object:
        looks.append(image)
        return parse(source, image)  # type: ignore[arg-type]

    monkeypatch.setattr(lock_workflow, "load_recipe", spy)
    return looks


def lock(*argv: str) -> int:
    return cli.main(["lock", *argv])


def test_a_fresh_run_writes_the_stamp_and_the_next_process_imports_no_parser(
    project: Path,
) -> None:
    first = spawn(project, "lock", "t")
    assert first.returncode == 0, first.stderr
    assert (project / STAMP).is_file()
    assert "packaging.requirements" in imported(first.stderr)  # the full path, for contrast
    for argv, answer in (
        (("lock", "t"), "all 2 locks are fresh: nothing to compile"),
        (("lock", "t", "--check"), "all 2 locks are fresh"),
        (("lock", "--stage", "v1", "t", "--host"), "all 1 locks are fresh: nothing to compile"),
    ):
        again = spawn(project, *argv)
        assert again.returncode == 0, again.stderr
        assert again.stdout == answer + "\n"
        loaded = imported(again.stderr)
        assert "audit.lock.stamp" in loaded
        assert not [name for name in loaded if name.split(".")[0] in HEAVY or name in HEAVY]


def test_a_hit_gives_the_full_paths_answer_without_looking(
    project: Path, full_looks: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert lock("t") == 0
    assert lock("t") == 0
    assert lock("t", "--check") == 0
    assert lock("t", "--stage", "v2", "--check") == 0
    assert full_looks == ["t"]
    out = capsys.readouterr().out.splitlines()
    assert out == ["all 2 locks are fresh: nothing to compile"] * 2 + ["all 2 locks are fresh"] * 2


def append(relpath: str, text: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        with (root / relpath).open("a") as handle:
            handle.write(text)

    return edit


def rebase(root: Path) -> None:
    write_base(
        root, "t", base_record(Distribution("pip", "25.2"), Distribution("setuptools", "80.0"))
    )


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (append("images/t/image.toml", "# a comment changes no lock\n"), 0),
        (append("images/t/requirements/v2.in", "gamma\n"), 1),
        (append("images/t/requirements/common.txt", "beta<2\n"), 1),
        (rebase, 1),
        (lambda root: (root / "locks/t/v2-01.txt").unlink(), 1),
    ],
    ids=["recipe", "requirements", "include", "base", "lock-removed"],
)
def test_any_edited_input_is_a_miss_and_the_full_path_answers(
    project: Path, full_looks: list[str], edit: Callable[[Path], None], code: int
) -> None:
    assert lock("t", "--check") == 0
    edit(project)
    assert lock("t", "--check") == code
    assert full_looks == ["t", "t"]


def test_a_hand_edited_lock_is_refused_after_a_fresh_run(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert spawn(project, "lock", "t").returncode == 0
    path = project / "locks/t/v1-01.txt"
    path.write_text(path.read_text().replace("alpha==1.0", "alpha==0.9"))
    again = spawn(project, "lock", "t")
    assert again.returncode == 2
    assert "locks/t/v1-01.txt: edited by hand" in again.stderr
    assert lock("t", "--check") == 2


def test_reverting_an_edit_makes_the_stamp_hold_again(project: Path, full_looks: list[str]) -> None:
    assert lock("t") == 0
    v2 = project / "images/t/requirements/v2.in"
    v2.write_text("gamma\n")
    assert lock("t", "--check") == 1
    v2.write_text("beta\n")
    assert lock("t") == 0
    assert full_looks == ["t", "t"]


def doctor(kind: str, table: dict[str, str]) -> Callable[[str], str]:
    """An edit of the stamp's text that replaces the records of one kind."""

    def edit(text: str) -> str:
        stamp = lock_stamp.parse_stamp(text)
        assert stamp is not None and stamp[kind]
        stamp[kind] = table
        rendered = lock_stamp.render_stamp(stamp)
        assert rendered is not None
        return rendered

    return edit


def other_code(text: str) -> str:
    stamp = lock_stamp.parse_stamp(text)
    assert stamp is not None and any("audit/lock/plan.py" in path for path in stamp["code"])
    changed = dict.fromkeys(stamp["code"], "0" * 64)
    return doctor("code", changed)(text)


@pytest.mark.parametrize(
    "change",
    [
        other_code,
        doctor("python", {"2.7.18": sys.executable}),
        doctor("stage", {"": "two"}),
        doctor("stage", {"v1": "1"}),
        doctor("exists", {"images/t/nothing-here": "1"}),
        doctor("read", {"images/t/requirements/v2.in": "0" * 64}),
        lambda text: text.replace(lock_stamp.SCHEMA, "layer-audit.lock-state/0"),
        lambda text: text.replace("\tlocks/", "locks/", 1),
        lambda text: text.removesuffix("end\n"),
    ],
    ids=["code", "python", "count", "stage", "exists", "read", "schema", "fields", "truncated"],
)
def test_a_stamp_that_no_longer_holds_is_ignored(
    project: Path, full_looks: list[str], change: Callable[[str], str]
) -> None:
    assert lock("t") == 0
    path = project / STAMP
    path.write_text(change(path.read_text()))
    assert lock("t") == 0
    assert full_looks == ["t", "t"]
    assert lock("t") == 0  # the full path rewrote a stamp that holds
    assert full_looks == ["t", "t"]


def test_a_changed_listing_is_a_miss(project: Path, full_looks: list[str]) -> None:
    assert lock("t", "--stage", "v9") == 2  # lists images/ to suggest a name: no stamp
    source = lock_stamp.RecordingSource(DirectorySource(project))
    assert source.listdir("images") == ["t"]
    source.read_bytes("images/t/image.toml")
    assert lock_stamp.write_stamp(str(project), "t", source, [(None, 2)])
    assert lock_stamp.fresh_answer(str(project), "t", None, check=True) == "all 2 locks are fresh"
    (project / "images/u").mkdir()
    assert lock_stamp.fresh_answer(str(project), "t", None, check=True) is None


@pytest.mark.parametrize("garbage", [b"", b"layer-audit", b"\xff\xfe", b"\n" * 100000])
def test_a_corrupt_stamp_is_ignored_and_rewritten(
    project: Path, full_looks: list[str], garbage: bytes
) -> None:
    (project / STAMP).parent.mkdir(parents=True)
    (project / STAMP).write_bytes(garbage)
    assert lock("t") == 0
    assert lock_stamp.parse_stamp((project / STAMP).read_text()) is not None
    assert full_looks == ["t"]


def test_a_path_that_cannot_be_written_plainly_leaves_no_stamp(project: Path) -> None:
    source = lock_stamp.RecordingSource(DirectorySource(project))
    assert not source.exists("images/t/odd\tname")
    assert not lock_stamp.write_stamp(str(project), "t", source, [(None, 2)])
    assert not (project / STAMP).exists()


def test_no_stamp_is_written_when_the_run_fails(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "images/t/requirements/v2.in").write_text("gamma\n")
    assert lock("t", "--check") == 1
    assert not (project / STAMP).exists()
    path = project / "locks/t/v1-01.txt"
    path.write_text(path.read_text()[:-30])
    assert lock("t", "--check") == 2
    assert lock("t", "--stage", "v9") == 2
    assert "--stage v9: no such stage" in capsys.readouterr().err
    assert not (project / STAMP).exists()


def test_an_unknown_stage_misses_and_gets_the_full_paths_error(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lock("t") == 0
    assert lock("t", "--stage", "v9") == 2
    assert "--stage v9: no such stage" in capsys.readouterr().err


def test_record_base_never_takes_the_quick_path(project: Path) -> None:
    assert lock("t") == 0
    options = lock_workflow.LockOptions(image="t", base=BaseOptions(record=True))
    assert lock_workflow._stamped_answer(project, options) is None
    assert lock_quick.quick_exit(["lock", "t", "--record-base"]) is None


@pytest.mark.parametrize(
    ("argv", "answer"),
    [
        (["lock", "t"], 0),
        (["lock", "t", "--stage=v1", "--check", "--docker", "/usr/bin/docker"], 0),
        (["lock", "t", "--check=yes"], None),
        (["lock", "t", "--chec"], 0),  # argparse's abbreviation, read the same on both paths
        (["lock", "t", "--stage"], None),
        (["lock", "t", "--stage", "--check"], None),
        (["lock", "t", "--stage", "v1", "--stage", "v2"], 0),  # the last one, as argparse reads it
        (["lock", "t", "u"], None),
        (["lock", "--check"], None),
        (["lock", "t", "-h"], None),
        (["lock", "../t"], None),
        (["--version", "lock", "t"], None),
        (["gate", "t"], None),
    ],
)
def test_only_plain_lock_command_lines_are_answered_from_the_stamp(
    project: Path, argv: list[str], answer: int | None
) -> None:
    assert lock("t") == 0
    assert lock_quick.quick_exit(argv) == answer


def test_work_asking_options_never_take_the_quick_path(project: Path) -> None:
    """The quick path reads the lock parser itself; options that ask for work go the full way."""
    assert lock("t") == 0
    assert lock_quick.quick_exit(["lock", "t"]) == 0
    for extra in (
        ["--record-base"], ["--upgrade"], ["--upgrade-package", "alpha"], ["--resolver", "uv"],
        ["--format", "json"], ["--from-snapshot", "x.json"], ["--image-id", "sha256:a"], ["-h"],
    ):  # fmt: skip
        assert lock_quick.quick_exit(["lock", "t", *extra]) is None, extra


def test_outside_a_project_the_quick_path_steps_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert lock_quick.quick_exit(["lock", "t"]) is None


def test_an_unwritable_state_folder_costs_the_stamp_not_the_run(project: Path) -> None:
    (project / "build").write_text("a file where the folder should be")
    assert lock("t") == 0
    assert (project / "build").is_file()


class _Watched(lock_stamp.RecordingSource):
    """The recording source, remembered so the test can compare what it saw."""

    made: ClassVar[list[lock_stamp.RecordingSource]] = []

    def __init__(self, inner: Source) -> None:
        super().__init__(inner)
        _Watched.made.append(self)


_WATCH: dict[str, object] = {"root": None, "opened": [], "listed": []}


def _hook(event: str, args: tuple[object, ...]) -> None:
    """Every open (for reading) and listing of a path under the watched project folder."""
    root = _WATCH["root"]
    if root is None or event not in {"open", "os.listdir", "os.scandir"} or not args:
        return
    path = args[0]
    if not isinstance(path, (str, os.PathLike)):
        return
    full = os.path.realpath(os.fspath(path))
    if not full.startswith(f"{root}{os.sep}"):
        return
    relpath = os.path.relpath(full, str(root))
    if relpath == STAMP:
        return  # the stamp itself: the tool's state, not an input of the check
    if event == "open":
        mode = str(args[1]) if len(args) > 1 and args[1] is not None else "r"
        if not any(flag in mode for flag in "wax+"):
            cast(list[str], _WATCH["opened"]).append(relpath)
    else:
        cast(list[str], _WATCH["listed"]).append(relpath)


def test_the_full_check_reads_the_project_only_through_the_recording_source(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stamp is sound only if every read of the freshness check (and of the policy
    judgment after it) is one the recording source saw: an audit hook sees every other one."""
    monkeypatch.setattr(lock_workflow, "RecordingSource", _Watched)
    _Watched.made.clear()
    sys.addaudithook(_hook)
    _WATCH.update(root=os.path.realpath(project), opened=[], listed=[])
    try:
        assert lock("t", "--check") == 0
    finally:
        _WATCH["root"] = None
    seen_read = {path for source in _Watched.made for path in source.read}
    seen_listed = {path for source in _Watched.made for path in source.listed}
    opened = set(cast(list[str], _WATCH["opened"]))
    listed = set(cast(list[str], _WATCH["listed"]))
    assert opened, "the hook saw no read at all: it is not watching"
    assert opened <= seen_read, f"read around the recording source: {opened - seen_read}"
    assert listed <= seen_listed, f"listed around the recording source: {listed - seen_listed}"
    assert (project / STAMP).is_file()
