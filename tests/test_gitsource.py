"""GitSource against real git repositories: exact bytes, clear errors, refs never run as code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from audit.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, CommandFailed, GitError
from audit.host import process as commands
from audit.project import gitsource
from audit.project.gitsource import GitSource
from tests.support.gitrepo import SHELL_BRANCH, commit_files, git


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "core.autocrlf", "false")
    commit_files(root, {"images/demo/image.toml": b"[image]\n", "README.md": b"hello\n"})
    return root


def test_reads_each_ref_as_committed(repo: Path) -> None:
    git(repo, "branch", "old")
    commit_files(repo, {"images/demo/image.toml": b"[image]\nbase = 'x'\n"})
    assert GitSource(repo, "old").read_bytes("images/demo/image.toml") == b"[image]\n"
    head = GitSource(repo, "HEAD")
    assert head.read_bytes("images/demo/image.toml") == b"[image]\nbase = 'x'\n"
    assert head.listdir("") == ["README.md", "images"]
    assert head.listdir("images/demo/") == ["image.toml"]
    assert head.listdir("nowhere") == []
    assert head.exists("images/demo") and not head.exists("images/other")
    assert head.describe("images/demo/image.toml") == "HEAD:images/demo/image.toml"


def test_bytes_come_back_exactly(repo: Path) -> None:
    files = {
        "locks/demo/crlf.txt": b"a==1\r\nb==2\r\n",
        "locks/demo/utf8.in": "caf\u00e9==1\n".encode(),
        "locks/demo/empty.txt": b"",
        "locks/demo/no-newline.txt": b"x",
    }
    commit_files(repo, files)
    source = GitSource(repo, "HEAD")
    for relpath, data in files.items():
        assert source.read_bytes(relpath) == data


def test_missing_is_absence_but_unreadable_is_an_error(repo: Path) -> None:
    commit_files(repo, {"images/demo/lone-cr.in": b"a\rb\n", "images/demo/blob.bin": b"\xff\xfe"})
    (repo / "images/demo/link.toml").symlink_to("image.toml")
    commit_files(repo, {})
    source = GitSource(repo, "HEAD")
    with pytest.raises(FileNotFoundError):
        source.read_bytes("images/demo/absent.toml")
    problems = {
        "images/demo/blob.bin": "not UTF-8",
        "images/demo/link.toml": "symbolic link",
        "images/demo": "is a folder",
    }
    for relpath, problem in problems.items():
        with pytest.raises(GitError, match=problem) as caught:
            source.read_bytes(relpath)
        assert caught.value.exit_code == EXIT_BAD_INPUT
        assert f"HEAD:{relpath}" in caught.value.message
    assert source.read_bytes("images/demo/image.toml") == b"[image]\n"
    assert source.read_bytes("images/demo/lone-cr.in") == b"a\rb\n"  # bytes, never decoded


@pytest.mark.parametrize("ref", ["no-such-branch", "HEAD~9", "--output=written", "", "a\nb"])
def test_a_ref_that_does_not_resolve_is_bad_input(repo: Path, ref: str) -> None:
    with pytest.raises(GitError) as caught:
        GitSource(repo, ref)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert not (repo / "written").exists()


def test_not_a_repository_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="not a git repository"):
        GitSource(tmp_path, "HEAD")


def test_branch_full_of_shell_characters_is_only_a_name(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(repo, "branch", SHELL_BRANCH)
    monkeypatch.chdir(repo)
    source = GitSource(repo, SHELL_BRANCH)
    assert source.read_bytes("README.md") == b"hello\n"
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md", "images"]


def test_one_ref_is_read_by_one_git_process(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {f"locks/demo{n % 3}/v{n}-01.txt": f"pin{n}==1\n".encode() for n in range(1, 21)}
    commit_files(repo, files)
    calls = spy_on_commands(monkeypatch)
    asked = spy_on_pipes(monkeypatch)
    with GitSource(repo, "HEAD") as source:
        for relpath, data in files.items():
            assert source.read_bytes(relpath) == data
    assert [call[3] for call in calls] == ["rev-parse", "ls-tree"]
    assert [call[3] for call in asked["started"]] == ["cat-file"]
    assert asked["requests"] == 3  # one exchange per folder, each folder's files together


def test_reads_past_the_budget_come_back_exactly(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blobs are dropped oldest first over the budget; a later read fetches them again."""
    monkeypatch.setattr(gitsource, "HOLD_BYTES", 64)
    files = {f"locks/img{n}/base.json": f"{n}".encode() * 50 for n in range(5)}
    commit_files(repo, files)
    with GitSource(repo, "HEAD") as source:
        for _ in range(2):
            for relpath, data in files.items():
                assert source.read_bytes(relpath) == data


def test_a_dead_git_is_an_environment_error(repo: Path) -> None:
    source = GitSource(repo, "HEAD")
    source.read_bytes("README.md")
    assert source._pipe is not None
    source._pipe._proc.kill()
    source._pipe._proc.wait()  # dead before the next request: the write meets a broken pipe
    source._blobs.clear()
    with pytest.raises(CommandFailed) as caught:
        source.read_bytes("images/demo/image.toml")
    assert caught.value.exit_code == EXIT_ENVIRONMENT


def test_a_binary_file_beside_them_does_not_spoil_the_folder(repo: Path) -> None:
    files = {f"images/demo/requirements/v{n}.in": f"pin{n}\n".encode() for n in range(1, 4)}
    commit_files(repo, {**files, "images/demo/patch.so": b"\x7fELF\x00\xff\xfe"})
    source = GitSource(repo, "HEAD")
    for relpath, data in files.items():
        assert source.read_bytes(relpath) == data


def spy_on_commands(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Record every command while still running it for real."""
    calls: list[tuple[str, ...]] = []
    real: Callable[..., commands.Completed] = commands.run

    def recording(args: Any, **kwargs: Any) -> commands.Completed:
        calls.append(tuple(str(a) for a in args))
        return real(args, **kwargs)

    monkeypatch.setattr(commands, "run", recording)
    return calls


def spy_on_pipes(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Record every kept-running program and how many requests it was sent."""
    seen: dict[str, Any] = {"started": [], "requests": 0}

    class Recording(commands.Pipe):
        def __init__(self, args: Any, **kwargs: Any) -> None:
            seen["started"].append(tuple(str(a) for a in args))
            super().__init__(args, **kwargs)

        def ask(self, request: bytes) -> None:
            seen["requests"] += 1
            super().ask(request)

    monkeypatch.setattr(commands, "Pipe", Recording)
    return seen
