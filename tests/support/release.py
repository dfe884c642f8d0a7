"""The sources a release is built from, as the release workflow sees them.

:func:`tagged_sources` copies what git would commit here (tracked files, and new ones git does
not ignore: a file .gitignore hides is missing, as from a fresh clone) of the files a build
reads into a fresh repository, commits and tags it, so hatch-vcs gives the wheel the tag's
version. Nothing is written into the checkout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.gitrepo import git

REPO = Path(__file__).resolve().parents[2]
TAG, VERSION = "v9.8.7", "9.8.7"
SOURCES = ("audit", "docs", "pyproject.toml", "README.md", "CONTRIBUTING.md", ".gitignore")


def tagged_sources(tmp: Path, tag: str = TAG) -> Path:
    """``tmp/src``: the build's sources committed to a new repository and tagged ``tag``."""
    source = tmp / "src"
    wanted = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *SOURCES]
    for relpath in filter(None, git(REPO, *wanted).split("\0")):
        if (REPO / relpath).is_file():
            (source / relpath).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / relpath, source / relpath)
    git(source, "init", "-q")
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", "release")
    git(source, "tag", tag)
    return source
