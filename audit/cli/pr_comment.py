"""``layer-audit pr-comment``: the gate's Markdown as ONE pull-request comment, updated in place.

``pr-comment --markdown FILE --repo OWNER/NAME --pr N [--head-sha SHA]`` reads the token from
``$GITHUB_TOKEN`` (never from the command line, never printed) and the API from
``$GITHUB_API_URL`` (GitHub Actions sets it; default ``https://api.github.com``); see
:mod:`audit.gate.github_comment`. Runs in the comment job of the workflow, which is started by
``workflow_run`` and never checks out the pull request. Exit 0 posted or updated, 2 bad
arguments (or a pull request that moved on from ``--head-sha``), 3 the API refused or did not
answer (401, 403, 404, network).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from audit.cli.context import RunContext
from audit.errors import EXIT_OK, EnvironmentProblem, UsageError
from audit.gate.github_comment import DEFAULT_API, Target, post_or_update
from audit.host import console

TOKEN_ENV = "GITHUB_TOKEN"  # noqa: S105 - the variable's name, not a token
API_ENV = "GITHUB_API_URL"
MARKDOWN_LIMIT = 4 * 1024 * 1024


NEEDS_PROJECT = False
HELP = "post or update the one pull-request comment holding the gate's Markdown"
DESCRIPTION = (
    "Post the gate's Markdown (gate --format markdown --output FILE) as one comment on a pull "
    "request, or update the comment an earlier run posted (found by a hidden marker). The "
    f"token comes from ${TOKEN_ENV}, the API from ${API_ENV} (default {DEFAULT_API})."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", type=Path, required=True, metavar="FILE")
    parser.add_argument("--repo", required=True, metavar="OWNER/NAME")
    parser.add_argument("--pr", required=True, metavar="N", help="the pull request's number")
    parser.add_argument(
        "--head-sha",
        default="",
        metavar="SHA",
        help="post only if the pull request's head is still this commit (the one the gate "
        "judged; in the workflow: github.event.workflow_run.head_sha)",
    )


def handle(args: argparse.Namespace, context: RunContext) -> int:
    target = Target.parse(args.repo, args.pr, os.environ.get(API_ENV) or DEFAULT_API)
    token = os.environ.get(TOKEN_ENV, "")
    if not token.strip():
        raise EnvironmentProblem(
            f"${TOKEN_ENV} is not set: cannot post to {target.repo} #{target.number}",
            f"in the workflow: env: {TOKEN_ENV}: ${{{{ github.token }}}}",
        )
    posted = post_or_update(target, _markdown(args.markdown), token.strip(), args.head_sha)
    console.stdout.print(
        f"{posted.action} comment {posted.comment_id} on {target.repo} #{target.number}"
        + (f": {posted.url}" if posted.url else ""),
        markup=False,
        highlight=False,
    )
    return EXIT_OK


def _markdown(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(MARKDOWN_LIMIT + 1)
    except OSError as exc:
        raise UsageError(
            f"--markdown {path}: cannot be read ({exc.strerror})",
            "write it first: layer-audit gate --base REF --markdown FILE",
        ) from exc
    if len(data) > MARKDOWN_LIMIT:
        raise UsageError(f"--markdown {path}: larger than {MARKDOWN_LIMIT // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--markdown {path}: not UTF-8 text") from exc
