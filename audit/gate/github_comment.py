"""One pull-request comment that updates itself: the gate's Markdown, posted or edited in place.

The comment carries a hidden marker (:data:`MARKER`). Each run lists the pull request's
comments, edits the first one carrying the marker (``PATCH``) and creates one only when there is
none (``POST``), so a pull request has at most one such comment however often the gate runs.
With ``head_sha`` the pull request must still be at that commit: the comment job takes the
number from an artifact a pull request's own run wrote, and this check stops it from speaking
on another pull request. Talks to ``$GITHUB_API_URL`` (default ``https://api.github.com``) with
the token it is given; the token goes into one request header and nowhere else (no message,
no log line, no exception text carries it).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from audit.errors import EnvironmentProblem, UsageError
from audit.redact import redact

MARKER = "<!-- layer-audit:dependency-gate -->"
DEFAULT_API = "https://api.github.com"
BODY_LIMIT = 65_000  # GitHub refuses comment bodies over 65,536 characters
PAGE = 100
REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
SHA = re.compile(r"^[0-9a-f]{40}$")
TIMEOUT = 30.0
CUT = "\n\n…(cut: the whole report is in the job summary and the workflow's artifact)\n"


@dataclass(frozen=True)
class Target:
    """Where the comment goes: ``owner/name``, the pull request's number, the API's base URL."""

    repo: str
    number: int
    api: str = DEFAULT_API

    @classmethod
    def parse(cls, repo: str, number: str, api: str) -> Target:
        if not REPO_NAME.match(repo):
            raise UsageError(f"--repo {repo!r}: not owner/name", "e.g. --repo octo-org/images")
        if not number.strip().isdigit() or int(number) < 1:
            raise UsageError(f"--pr {number.strip()[:40]!r}: not a pull request number")
        if not api.startswith(("https://", "http://127.0.0.1", "http://localhost")):
            raise UsageError(f"GITHUB_API_URL {redact(api)!r}: not an https URL")
        return cls(repo, int(number), api.rstrip("/"))


@dataclass(frozen=True)
class Posted:
    """What happened: ``created`` or ``updated``, and the comment's id and address."""

    action: str
    comment_id: int
    url: str


def comment_body(markdown: str) -> str:
    """The marker, then the report, cut to fit GitHub's limit."""
    text = markdown if len(markdown) <= BODY_LIMIT else markdown[:BODY_LIMIT] + CUT
    return f"{MARKER}\n{text}"


def post_or_update(target: Target, markdown: str, token: str, head_sha: str = "") -> Posted:
    """Edit this tool's comment on the pull request, or create it when there is none."""
    api = _Api(target, token)
    if head_sha:
        _check_head(api, target, head_sha)
    body = comment_body(markdown)
    found = _own_comment(api, target)
    if found is None:
        made = api.call("POST", f"/issues/{target.number}/comments", {"body": body})
        return Posted("created", int(made["id"]), str(made.get("html_url", "")))
    edited = api.call("PATCH", f"/issues/comments/{found}", {"body": body})
    return Posted("updated", int(edited["id"]), str(edited.get("html_url", "")))


def _check_head(api: _Api, target: Target, head_sha: str) -> None:
    if not SHA.match(head_sha):
        raise UsageError(f"--head-sha {head_sha[:50]!r}: not a full commit id")
    pull = api.call("GET", f"/pulls/{target.number}")
    actual = str((pull.get("head") or {}).get("sha", ""))
    if actual != head_sha:
        raise UsageError(
            f"pull request #{target.number} of {target.repo} is at {actual[:12] or 'nothing'}, "
            f"not at {head_sha[:12]}, the commit the gate judged",
            "the report is of another pull request or an older push: nothing was posted",
        )


def _own_comment(api: _Api, target: Target) -> int | None:
    """The id of the first comment carrying the marker, looking through every page."""
    page = 1
    while True:
        path = f"/issues/{target.number}/comments?per_page={PAGE}&page={page}"
        comments = api.call("GET", path)
        if not isinstance(comments, list):
            raise EnvironmentProblem(f"{api.where(path)}: the answer is not a list of comments")
        for comment in comments:
            if MARKER in str(comment.get("body", "")):
                return int(comment["id"])
        if len(comments) < PAGE:
            return None
        page += 1


class _Api:
    """The REST calls, each one JSON request with the token in its header."""

    def __init__(self, target: Target, token: str) -> None:
        self.base = f"{target.api}/repos/{target.repo}"
        self._headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {token}",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "layer-audit-pr-comment",
        }

    def where(self, path: str) -> str:
        return redact(self.base + path.partition("?")[0])

    def call(self, method: str, path: str, payload: dict[str, str] | None = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        headers = {**self._headers, **({"Content-Type": "application/json"} if data else {})}
        # the base URL is https (or 127.0.0.1 for tests): Target.parse refuses anything else
        request = urllib.request.Request(self.base + path, data, headers, method=method)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:  # noqa: S310
                return json.loads(answer.read().decode("utf-8") or "null")
        except urllib.error.HTTPError as exc:
            raise _refused(method, self.where(path), exc.code, exc.reason) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EnvironmentProblem(
                f"{method} {self.where(path)}: GitHub's API did not answer ({redact(str(reason))})",
                "check the network and GITHUB_API_URL; the gate's verdict is in its own job",
            ) from None


def _refused(method: str, where: str, status: int, reason: str) -> EnvironmentProblem:
    hints = {
        401: "the token is missing or expired: pass the job's GITHUB_TOKEN",
        403: "the token may not write here: the comment job needs `permissions: "
        "pull-requests: write` (and runs on workflow_run, never in the pull request's job)",
        404: "no such repository or pull request, or the token cannot see it",
    }
    return EnvironmentProblem(
        f"{method} {where}: GitHub refused ({status} {redact(str(reason))})",
        hints.get(status, "retry later; the gate's verdict is in its own job"),
    )
