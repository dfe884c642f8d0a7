"""Real git repositories for tests: git with a test identity, committing files, a hostile branch
name."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SHELL_BRANCH = "feat/$(touch${IFS}pwned);rm${IFS}-rf${IFS}x`touch${IFS}pwned2`|&>q\"'"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    done = subprocess.run(
        ["git", "-C", str(repo), *identity, *args], check=True, capture_output=True, env=env
    )
    return done.stdout.decode().strip()


def commit_files(repo: Path, files: dict[str, bytes], message: str = "change") -> str:
    for relpath, data in files.items():
        path = repo / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")
