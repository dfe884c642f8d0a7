"""``import`` then ``build`` against the real Docker daemon (``pytest --docker``): the image built
from the imported recipe starts the way the field-style Dockerfile's image did.

The Dockerfile is the field chain's shape on the offline base image: an ARG default used in an
ENV, WORKDIR, ``COPY --chmod=755`` of the launch script and ``COPY --chown`` of the patches
(relative destinations under the WORKDIR), a patch run from the working folder, PATH extended
from the base image's, a shell heredoc using a stage ARG (a build argument of the recipe too),
a Python heredoc, and the launch
settings (LABEL, EXPOSE, STOPSIGNAL, HEALTHCHECK, USER, ENTRYPOINT, CMD). ``docker inspect``
of the built image must show the Dockerfile's Cmd, Entrypoint, Env, WorkingDir, User and the
rest, and the files must hold what the Dockerfile's steps wrote, with their modes and owners.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.cli.main import main
from audit.docker import host as docker_host
from tests.support.docker_build import CLIENT, PYTHON, REPO_ROOT, TEST_REPOSITORY, base_record
from tests.support.fixtures import BaseImageFactory

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOCKERFILE = """\
# syntax=docker/dockerfile:1.7
ARG BASE={base}
ARG BLOCK_SIZE=64

FROM ${{BASE}} AS v1
ARG BLOCK_SIZE
ENV VLLM_BLOCK_SIZE=${{BLOCK_SIZE}} VLLM_TENSOR_PARALLEL_SIZE=2
WORKDIR /opt/glm53
COPY --chmod=755 launch/serve.sh ./serve.sh
COPY --chown=1000:1000 patches/ ./patches/
RUN {python} patches/v1_fix.py

FROM v1 AS v2
ARG KV_DTYPE=fp8
ENV PATH=/opt/glm53/bin:$PATH GLM53_KV_CACHE_DTYPE=${{KV_DTYPE}}
RUN <<EOF
mkdir -p /opt/glm53/bin
echo "kv cache ${{KV_DTYPE}}" > /opt/glm53/kv.txt
EOF
COPY <<EOF /opt/glm53/launch.env
GLM53_KV_CACHE_DTYPE=${{KV_DTYPE}}
EOF
RUN {python} <<'PY'
import pathlib
pathlib.Path("/opt/glm53/probe.txt").write_text("ok $HOME\\n")
PY
LABEL org.opencontainers.image.title="glm53-flash" maintainer="spark-team"
EXPOSE 8000
STOPSIGNAL SIGINT
HEALTHCHECK --interval=30s --timeout=5s CMD test -f /opt/glm53/kv.txt || exit 1
USER 1000:1000
ENTRYPOINT ["/opt/glm53/serve.sh"]
CMD ["--block-size", "64", "--tensor-parallel-size", "2"]
"""


@pytest.fixture
def project(tmp_path: Path, base_image: BaseImageFactory) -> Iterator[Path]:
    """A repository with the field-style Dockerfile and its build context."""
    root = tmp_path / "repo"
    (root / "docker" / "launch").mkdir(parents=True)
    (root / "docker" / "patches").mkdir()
    base = base_image("bookworm", "amd64")
    (root / "docker" / "Dockerfile").write_text(DOCKERFILE.format(base=base, python=PYTHON))
    (root / "docker" / "launch" / "serve.sh").write_text('#!/bin/sh\nexec echo serve "$@"\n')
    (root / "docker" / "patches" / "v1_fix.py").write_text(
        "import pathlib\npathlib.Path('/opt/glm53/patched.txt').write_text('v1\\n')\n"
    )
    (root / "images").mkdir()
    yield root
    daemon = docker_host.daemon()
    for image in daemon.api.images(name=f"{TEST_REPOSITORY}/imported"):
        for tag in image.get("RepoTags") or ():
            daemon.api.remove_image(tag)


def build(root: Path, name: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LAYER_AUDIT_DOCKER=CLIENT, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "audit", "build", name],
        cwd=root, env=env, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip


def files_of(image: str, path: str) -> dict[str, tarfile.TarInfo | bytes]:
    """Each member under ``path`` of a created (never started) container of ``image``:
    its TarInfo, and its bytes under ``<name>:data``."""
    container = docker_host.daemon().containers.create(image, command=["true"])
    try:
        chunks, _ = container.get_archive(path)
        found: dict[str, tarfile.TarInfo | bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
            for member in archive.getmembers():
                found[member.name] = member
                if member.isfile():
                    handle = archive.extractfile(member)
                    assert handle is not None
                    found[f"{member.name}:data"] = handle.read()
        return found
    finally:
        container.remove(force=True)


def test_the_imported_image_starts_like_the_dockerfiles(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    argv = ["import", "docker/Dockerfile", "--image", "imported", "--interpreter", PYTHON]
    assert main(argv) == 0
    out = capsys.readouterr().out  # every line has its recipe key, but two take an ARG's value
    assert "2 line(s) not kept" in out and "the image comes from BASE" in out
    assert "--build-arg KV_DTYPE no longer changes it" in out  # the COPY <<EOF body
    toml = project / "images" / "imported" / "image.toml"
    repository = f"{TEST_REPOSITORY}/imported"
    toml.write_text(toml.read_text().replace('"local/imported"', f'"{repository}"'))
    (project / "locks" / "imported").mkdir(parents=True)
    base = docker_host.daemon().images.get(re.findall(r'base = "(.*)"', toml.read_text())[0])
    (project / "locks" / "imported" / "base.json").write_text(
        base_record(base.tags[0], "linux/amd64")
    )
    done = build(project, "imported")
    assert done.returncode == 0, done.stdout + done.stderr
    image = f"{repository}:v2-amd64-cpu"
    config: dict[str, Any] = docker_host.daemon().images.get(image).attrs["Config"]
    base_path = dict(e.split("=", 1) for e in base.attrs["Config"]["Env"])["PATH"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert config["Cmd"] == ["--block-size", "64", "--tensor-parallel-size", "2"]
    assert config["Entrypoint"] == ["/opt/glm53/serve.sh"]
    assert (config["WorkingDir"], config["User"]) == ("/opt/glm53", "1000:1000")
    assert env["VLLM_BLOCK_SIZE"] == "64" and env["VLLM_TENSOR_PARALLEL_SIZE"] == "2"
    assert env["PATH"] == f"/opt/glm53/bin:{base_path}" and env["GLM53_KV_CACHE_DTYPE"] == "fp8"
    assert config["ExposedPorts"] == {"8000/tcp": {}} and config["StopSignal"] == "SIGINT"
    assert config["Labels"]["org.opencontainers.image.title"] == "glm53-flash"
    assert config["Labels"]["maintainer"] == "spark-team"
    check = config["Healthcheck"]
    assert check["Test"] == ["CMD-SHELL", "test -f /opt/glm53/kv.txt || exit 1"]
    assert (check["Interval"], check["Timeout"]) == (30 * 10**9, 5 * 10**9)
    files = files_of(image, "/opt/glm53")
    script, patch = files["glm53/serve.sh"], files["glm53/patches/v1_fix.py"]
    assert isinstance(script, tarfile.TarInfo) and script.mode & 0o777 == 0o755
    assert isinstance(patch, tarfile.TarInfo) and (patch.uid, patch.gid) == (1000, 1000)
    assert files["glm53/patched.txt:data"] == b"v1\n"  # the patch ran in the WORKDIR
    assert files["glm53/kv.txt:data"] == b"kv cache fp8\n"  # the heredoc saw its ARG
    assert files["glm53/probe.txt:data"] == b"ok $HOME\n"  # a quoted heredoc, unexpanded
    assert files["glm53/launch.env:data"] == b"GLM53_KV_CACHE_DTYPE=fp8\n"  # COPY <<EOF
