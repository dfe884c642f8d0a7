"""``layer-audit pr-comment`` against a small stand-in for GitHub's REST API on 127.0.0.1.

The stand-in keeps comments per pull request and records every request (method, path, headers,
body), as GitHub would see them: the first run creates the comment, the second edits it, a
third pull request's comments are never touched, a 403 is exit 3 without the token, and a
pull request that moved on from the judged commit gets nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from audit.cli.main import main
from audit.errors import EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_OK
from audit.gate.github_comment import MARKER

TOKEN = "ghs_FAKEtoken0123456789abcdefABCDEF0123"
REPO = "octo-org/images"
HEAD = "a" * 40


@dataclass
class FakeGitHub:
    """What the stand-in knows and what it was asked."""

    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    refuse: int | None = None  # answer every request with this status
    head: str = HEAD
    next_id: int = 1000

    def answer(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        if self.refuse:
            return self.refuse, {"message": "Resource not accessible by integration"}
        parts = urlsplit(path)
        segments = parts.path.strip("/").split("/")  # repos owner name ...
        rest = segments[3:]
        if method == "GET" and rest[0] == "pulls":
            return 200, {"number": int(rest[1]), "head": {"sha": self.head}}
        if rest[:1] == ["issues"] and rest[2:] == ["comments"]:
            thread = self.comments.setdefault(int(rest[1]), [])
            if method == "POST":
                assert body is not None
                self.next_id += 1
                thread.append({"id": self.next_id, "body": body["body"], "html_url": "u"})
                return 201, thread[-1]
            page = int(parse_qs(parts.query).get("page", ["1"])[0])
            size = int(parse_qs(parts.query).get("per_page", ["30"])[0])
            return 200, thread[(page - 1) * size : page * size]
        if method == "PATCH" and rest[:2] == ["issues", "comments"]:
            assert body is not None
            for thread in self.comments.values():
                for comment in thread:
                    if comment["id"] == int(rest[2]):
                        comment["body"] = body["body"]
                        return 200, comment
        return 404, {"message": "Not Found"}


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    state = FakeGitHub()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            state.requests.append(
                {"method": self.command, "path": self.path, "headers": dict(self.headers),
                 "body": body}
            )  # fmt: skip
            status, answer = state.answer(self.command, self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("GITHUB_API_URL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    yield state
    server.shutdown()
    server.server_close()


def comment(markdown: Path, number: int = 7, *extra: str) -> int:
    argv = ["pr-comment", "--markdown", str(markdown), "--repo", REPO, "--pr", str(number)]
    return main([*argv, *extra])


def test_first_run_creates_second_run_updates_never_a_second_comment(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "gate.md"
    github.comments[7] = [{"id": 5, "body": "LGTM", "html_url": "u"}]  # a reviewer's own
    report.write_text("## dependency gate\n\n**❌ FAIL**: first push\n")
    assert comment(report, 7, "--head-sha", HEAD) == EXIT_OK
    report.write_text("## dependency gate\n\n**✅ PASS**: second push\n")
    assert comment(report, 7, "--head-sha", HEAD) == EXIT_OK
    thread = github.comments[7]
    assert thread[0]["body"] == "LGTM"  # never edited
    [ours] = [c for c in thread if MARKER in c["body"]]
    assert "second push" in ours["body"] and "first push" not in ours["body"]
    writes = [(r["method"], r["path"]) for r in github.requests if r["method"] != "GET"]
    assert writes == [
        ("POST", f"/repos/{REPO}/issues/7/comments"),
        ("PATCH", f"/repos/{REPO}/issues/comments/{ours['id']}"),
    ]
    assert all(r["headers"]["Authorization"] == f"Bearer {TOKEN}" for r in github.requests)
    out = capsys.readouterr()
    assert "created comment" in out.out and "updated comment" in out.out
    assert TOKEN not in out.out + out.err


def test_its_comment_is_found_past_the_first_page(github: FakeGitHub, tmp_path: Path) -> None:
    github.comments[9] = [{"id": n, "body": f"chatter {n}"} for n in range(1, 151)]
    github.comments[9][120]["body"] = f"{MARKER}\nold report"
    report = tmp_path / "gate.md"
    report.write_text("new report\n")
    assert comment(report, 9) == EXIT_OK
    assert len(github.comments[9]) == 150
    assert github.comments[9][120]["body"] == f"{MARKER}\nnew report\n"


def test_a_refusal_is_exit_3_with_a_clear_message_and_no_token(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    github.refuse = 403
    report = tmp_path / "gate.md"
    report.write_text("report\n")
    assert comment(report) == EXIT_ENVIRONMENT
    err = capsys.readouterr().err
    assert "403" in err and "pull-requests: write" in err
    assert TOKEN not in err and "Traceback" not in err


def test_a_pull_request_that_moved_on_gets_nothing(
    github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    github.head = "b" * 40
    report = tmp_path / "gate.md"
    report.write_text("report\n")
    assert comment(report, 7, "--head-sha", HEAD) == EXIT_BAD_INPUT
    assert "nothing was posted" in capsys.readouterr().err
    assert [r["method"] for r in github.requests] == ["GET"]


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["--repo", "not a repo"], {}),
        (["--pr", "7; rm -rf /"], {}),
        ([], {"GITHUB_TOKEN": ""}),
    ],
)
def test_bad_arguments_and_a_missing_token_touch_nothing(
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    report = tmp_path / "gate.md"
    report.write_text("report\n")
    base = ["pr-comment", "--markdown", str(report), "--repo", REPO, "--pr", "7"]
    code = main([*base, *argv])
    assert code in (EXIT_BAD_INPUT, EXIT_ENVIRONMENT)
    assert github.requests == []


def test_the_missing_token_hint_survives_redaction(
    github: FakeGitHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "")
    report = tmp_path / "gate.md"
    report.write_text("report\n")
    argv = ["pr-comment", "--markdown", str(report), "--repo", REPO, "--pr", "7"]
    assert main(argv) == EXIT_ENVIRONMENT
    hint = " ".join(capsys.readouterr().err.split())
    assert "in the workflow: env: GITHUB_TOKEN: ${{ github.token }}" in hint
