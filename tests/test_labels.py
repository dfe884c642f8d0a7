"""OCI labels from a real git checkout: public source, revision and dirty marker, base facts,
reproducible ``created`` from ``SOURCE_DATE_EPOCH``; and the pure label helpers."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from audit.build.plan import created_time, labels, qualified_image, stage_labels
from audit.build.provenance import gather, tree_digest
from audit.errors import UsageError
from audit.host import process as commands
from audit.lock.files import BaseRecord
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.gitrepo import commit_files, git
from tests.support.project import ProjectSpec, base_record, pip_recipe_toml, write_project

SECRET = "glpat-S3cr3tT0k3nValue0000"
TOKEN_REMOTE = f"https://ci-token:{SECRET}@gitlab.example.com/team/images.git"
OCI = "org.opencontainers.image"
EPOCH = "1767225600"  # 2026-01-01T00:00:00Z


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A committed project ``demo`` with a base record, origin set to a token-bearing URL."""
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    record = base_record(image_id="sha256:" + "ab" * 32)
    record = BaseRecord(
        record.image, record.image_id, "x/y@sha256:" + "cd" * 32, record.environments
    )
    spec = ProjectSpec("demo", pip_recipe_toml(["v1"]), {"v1.in": "alpha\n"}, record)
    write_project(root, spec)
    (root / "templates").mkdir()
    (root / "templates" / "Dockerfile.j2").write_text("FROM x\n")
    commit_files(root, {})
    git(root, "remote", "add", "origin", TOKEN_REMOTE)
    return root


def label_map(root: Path, now: dt.datetime, environ: dict[str, str]) -> dict[str, str]:
    recipe = load_recipe(DirectorySource(root), "demo")
    provenance = gather(root, recipe, environ=environ, now=now)
    return dict(labels(recipe, provenance, guard=True)) | dict(stage_labels(recipe, "v1"))


def test_two_computations_of_one_commit_with_one_epoch_are_identical(checkout: Path) -> None:
    first = label_map(
        checkout, dt.datetime(2026, 3, 1, tzinfo=dt.UTC), {"SOURCE_DATE_EPOCH": EPOCH}
    )
    second = label_map(
        checkout, dt.datetime(2026, 5, 9, tzinfo=dt.UTC), {"SOURCE_DATE_EPOCH": EPOCH}
    )
    assert first == second
    assert first[f"{OCI}.created"] == "2026-01-01T00:00:00Z"
    assert first[f"{OCI}.source"] == "https://gitlab.example.com/team/images"
    assert SECRET not in repr(first) and "ci-token" not in repr(first)
    assert first[f"{OCI}.revision"] == git(checkout, "rev-parse", "HEAD")
    assert first[f"{OCI}.version"] == "v1"
    assert first[f"{OCI}.base.name"] == "docker.io/layer-audit/base:bookworm-amd64"
    assert first[f"{OCI}.base.digest"] == "sha256:" + "cd" * 32
    assert first["io.layer-audit.base.image-id"] == "sha256:" + "ab" * 32
    assert first["io.layer-audit.recipe"] == "images/demo/image.toml"
    assert first["io.layer-audit.guard.version"]
    assert "io.layer-audit.dirty" not in first


def test_uncommitted_build_inputs_mark_the_revision_dirty(checkout: Path) -> None:
    now = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    (checkout / "README.md").write_text("not a build input\n")
    assert not label_map(checkout, now, {})[f"{OCI}.revision"].endswith("-dirty")
    for relpath in ("locks/demo/base.json", "templates/Dockerfile.j2"):
        git(checkout, "stash", "-u")
        (checkout / relpath).write_text((checkout / relpath).read_text() + " ")
        found = label_map(checkout, now, {})
        assert found[f"{OCI}.revision"] == git(checkout, "rev-parse", "HEAD") + "-dirty"
        assert found["io.layer-audit.dirty"] == "true"
        git(checkout, "checkout", "--", relpath)


def test_no_remote_or_a_local_remote_leaves_source_out(checkout: Path) -> None:
    now = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    git(checkout, "remote", "set-url", "origin", str(checkout.parent / "upstream.git"))
    assert f"{OCI}.source" not in label_map(checkout, now, {})
    git(checkout, "remote", "remove", "origin")
    assert f"{OCI}.source" not in label_map(checkout, now, {})


def test_created_time_reads_source_date_epoch_or_refuses_it() -> None:
    now = dt.datetime(2026, 3, 1, 12, 30, 15, 999, tzinfo=dt.UTC)
    assert created_time({}, now) == "2026-03-01T12:30:15Z"
    assert created_time({"SOURCE_DATE_EPOCH": "0"}, now) == "1970-01-01T00:00:00Z"
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
        created_time({"SOURCE_DATE_EPOCH": "yesterday"}, now)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("debian:bookworm", "docker.io/library/debian:bookworm"),
        ("vllm/vllm-openai", "docker.io/vllm/vllm-openai:latest"),
        ("nvcr.io/nvidia/pytorch:25.09-py3", "nvcr.io/nvidia/pytorch:25.09-py3"),
        ("localhost:5000/x", "localhost:5000/x:latest"),
        ("org/x@sha256:" + "0" * 64, "docker.io/org/x@sha256:" + "0" * 64),
    ],
)
def test_base_names_are_fully_qualified(ref: str, expected: str) -> None:
    assert qualified_image(ref) == expected


def test_the_recipe_digest_never_follows_a_link_nor_reads_a_fifo(checkout: Path) -> None:
    folder = checkout / "images" / "demo"
    before = tree_digest(folder)
    os.mkfifo(folder / "pipe")
    assert tree_digest(folder) == before  # a FIFO is left out, never opened
    (folder / "zero").symlink_to("/dev/zero")
    assert tree_digest(folder) != before  # a link counts by where it points, unread
