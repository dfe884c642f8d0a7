"""No secret in any output, end to end: a real BuildKit build from a git checkout whose
``origin`` carries a CI token, with index credentials handed in, then every artifact grepped.

Grepped: the image labels (``docker inspect``), ``docker history --no-trunc``, the layers of
``docker save``, the build log, the reports, the locks, the rendered context, stdout and
stderr. Also checked: the OCI labels are complete and two builds of one commit with one
``SOURCE_DATE_EPOCH`` carry the same labels, and the built stage's CycloneDX SBOM validates
and lists the same distributions as the guard's trail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from audit.docker import host as docker_host
from audit.history.snapshot import parse_snapshot
from tests.support import docker_build as shared
from tests.support.docker_build import CLIENT, REPO_ROOT, Index, Project, make_project, two_stages
from tests.support.gitrepo import commit_files, git

pytestmark = [pytest.mark.docker, pytest.mark.slow]
# The end-to-end build fixtures, shared: the wheel index, the amd64 base, tag clean-up.
index = shared.index
amd64 = shared.amd64
cleanup = shared.cleanup

GIT_TOKEN = "glpat-GitT0kenSecret0000xyz"
INDEX_PASSWORD = "IndexPassw0rdSecret"
ENV_PASSWORD = "EnvPipPassw0rdSecret"
SECRETS = (GIT_TOKEN, INDEX_PASSWORD, ENV_PASSWORD)
REMOTE = f"https://ci-token:{GIT_TOKEN}@gitlab.example.com/team/images.git"
EPOCH = "1767225600"
OCI = "org.opencontainers.image"


def assert_clean(where: str, data: bytes | str) -> None:
    raw = data.encode() if isinstance(data, str) else data
    for secret in SECRETS:
        assert secret.encode() not in raw, f"{secret} leaked into {where}"
    assert b"ci-token" not in raw, f"the remote's user leaked into {where}"


def saved_image_clean(ref: str) -> None:
    """Stream ``docker save`` of ``ref`` through a secret search, chunk by chunk."""
    overlap = max(len(s) for s in SECRETS)
    with subprocess.Popen([CLIENT, "save", ref], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        tail = b""
        while chunk := proc.stdout.read(1 << 20):
            assert_clean(f"docker save {ref}", tail + chunk)
            tail = chunk[-overlap:]
    assert proc.returncode == 0


def build(project: Project, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m audit build`` of ``project`` with ``env`` added to this environment."""
    full = dict(os.environ, LAYER_AUDIT_DOCKER=CLIENT, PYTHONPATH=str(REPO_ROOT), **env)
    return subprocess.run(
        [sys.executable, "-m", "audit", "build", project.name],
        cwd=project.root, env=full, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip


def test_a_token_bearing_checkout_builds_without_a_secret_anywhere(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    toml = two_stages('run = "echo built > /etc/built"')
    project = make_project(tmp_path, index, "h2secret", toml, *amd64)
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])
    (tmp_path / ".gitignore").write_text("build/\n")
    git(tmp_path, "init", "-q", "-b", "main")
    commit = commit_files(tmp_path, {})
    git(tmp_path, "remote", "add", "origin", REMOTE)
    env = {
        "LAYER_AUDIT_INDEX_CREDENTIALS": f"ci-user:{INDEX_PASSWORD}",
        "PIP_INDEX_URL": f"https://user:{ENV_PASSWORD}@pypi.example/simple",
        "SOURCE_DATE_EPOCH": EPOCH,
    }

    first = build(project, env)
    assert first.returncode == 0, first.stderr[-3000:]
    ref = f"{project.repository}:v2-amd64-cpu"
    labels = docker_host.image_info(ref).labels
    second = build(project, env)
    assert second.returncode == 0, second.stderr[-3000:]

    assert docker_host.image_info(ref).labels == labels  # same commit, same epoch
    assert labels[f"{OCI}.source"] == "https://gitlab.example.com/team/images"
    assert labels[f"{OCI}.revision"] == commit
    assert labels[f"{OCI}.created"] == "2026-01-01T00:00:00Z"
    assert labels[f"{OCI}.version"] == "v2"
    assert labels[f"{OCI}.base.name"] == f"docker.io/{amd64[0]}"
    assert labels["io.layer-audit.base.image-id"] == docker_host.image_info(amd64[0]).id
    for done in (first, second):
        assert_clean("stdout", done.stdout)
        assert_clean("stderr", done.stderr)
    for tag in (f"{project.repository}:v1-amd64-cpu", ref):
        for argv in (["inspect", tag], ["history", "--no-trunc", tag]):
            shown = subprocess.run([CLIENT, *argv], capture_output=True, check=True).stdout
            assert_clean(" ".join(argv), shown)
        saved_image_clean(tag)
    for folder in ("build", "locks"):
        files = [p for p in (tmp_path / folder).rglob("*") if p.is_file()]
        assert files
        for path in files:
            assert_clean(str(path.relative_to(tmp_path)), path.read_bytes())
    log = (tmp_path / "build" / "reports" / "h2secret" / "build.log").read_text()
    assert "--label" in log
    report = json.loads((tmp_path / "build/reports/h2secret/v2/report.json").read_text())
    assert report["verdict"] == "pass"
    sbom_matches_the_trail(tmp_path / "build/reports/h2secret/v2")


def sbom_matches_the_trail(folder: Path) -> None:
    """The stage's SBOM validates and lists exactly the Python distributions of its last snapshot
    (as ``pkg:pypi`` components), beside the image's Debian packages (``pkg:deb``)."""
    text = (folder / "sbom.cdx.json").read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    components = json.loads(text)["components"]
    listed = {(c["name"], c["version"]) for c in components if c["purl"].startswith("pkg:pypi/")}
    assert any(c["purl"].startswith("pkg:deb/debian/") for c in components)
    (last,) = sorted(folder.glob("trail/v2-*.snapshot.json"))
    shipped = {
        (d.name, d.version)
        for env in parse_snapshot(last.read_bytes(), "t")
        for d in env.distributions
    }
    assert listed == shipped and ("alpha", "1.0") in listed
