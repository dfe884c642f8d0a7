"""``.ci/setup-machine`` on a fresh Debian 12, made by the project's own offline base-image code.

The container stands in for a user's new machine: Debian's own ``python3`` (PEP 668 marker in
place, ``/opt/venv`` off the PATH) without ``python3-venv``. The script runs with its Docker steps
switched off (``LAYER_AUDIT_SETUP_SKIP_DOCKER=1``; Docker-in-Docker is not needed to test the
Python part), then the README's first command runs up to the point where it needs a Docker
daemon. A second run against an unreachable index must fail with pip's error, not hide it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support.fixtures import BaseImageFactory

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
CA_BUNDLE = Path(os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"))
DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SCRIPT = r"""
set -u
# a fresh Debian 12: no python3-venv, and pip refuses the system Python (PEP 668)
apt-get purge -y -qq python3-venv python3.11-venv >/dev/null 2>&1
if python3 -m pip install -q nox 2>/dev/null; then echo "PEP 668 not enforced"; exit 90; fi
cd /src
LAYER_AUDIT_SETUP_SKIP_DOCKER=1 bash .ci/setup-machine || { echo "setup exit $?"; exit 91; }
LAYER_AUDIT_SETUP_SKIP_DOCKER=1 bash .ci/setup-machine || { echo "again exit $?"; exit 92; }
echo "nox at $(command -v nox) -> $(readlink -f "$(command -v nox)")"
nox -s render -- demo || { echo "render exit $?"; exit 93; }
echo "=== base-image"; nox -s base-image 2>&1; echo "base-image exit $?"
PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_RETRIES=0 PIP_TIMEOUT=2 \
    LAYER_AUDIT_TOOLS=/opt/broken-tools LAYER_AUDIT_SETUP_SKIP_DOCKER=1 bash .ci/setup-machine
echo "broken index exit $?"
"""


def copy_sources(target: Path) -> None:
    """The checkout's files as a fresh clone has them (no .git, .nox, build or caches)."""
    skip = shutil.ignore_patterns(
        ".git", ".nox", ".venv", "__pycache__", "*.egg-info", ".*_cache", ".hypothesis"
    )

    def ignore(folder: str, names: list[str]) -> set[str]:
        top = {"build", "dist"} if Path(folder) == REPO else set()  # not audit/build
        return set(skip(folder, names)) | (top & set(names))

    shutil.copytree(REPO, target, ignore=ignore)


def test_setup_machine_on_fresh_debian_12(base_image: BaseImageFactory, tmp_path: Path) -> None:
    image = base_image("bookworm", "amd64")
    source = tmp_path / "src"
    copy_sources(source)
    name = f"h4-setup-machine-{uuid.uuid4().hex[:8]}"
    command = [
        "/usr/bin/docker", "run", "--rm", "--name", name, "--network", "host",
        "-v", f"{source}:/src", "-v", f"{CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro",
        "-e", f"PATH={DEBIAN_PATH}", "-e", "PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
        "-e", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        image, "bash", "-c", SCRIPT,
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1500, check=False)
    finally:
        subprocess.run(["/usr/bin/docker", "rm", "-f", name], capture_output=True, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "apt-get install git python3-venv" in out  # installed what Debian lacked
    assert out.count("machine ready (Docker skipped)") == 3 - 1  # the broken run never says it
    assert out.count("installing nox into /opt/layer-audit-tools") == 1  # the second run reuses
    assert "nox at /usr/local/bin/nox -> /opt/layer-audit-tools/bin/nox" in out
    assert (source / "build/demo/Dockerfile").is_file()
    # the README's first command stops exactly where it needs the Docker daemon
    base_image_run = done.stdout.split("=== base-image", 1)[-1].split("base-image exit", 1)[0]
    assert "base-image exit 1" in out, out
    assert "error:" in base_image_run and "docker" in base_image_run.lower(), base_image_run
    broken = out.split("installing nox into /opt/broken-tools", 1)[1]
    assert "broken index exit 0" not in out and "broken index exit" in broken
    assert "error" in broken.lower()
