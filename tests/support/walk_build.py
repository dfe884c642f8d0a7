"""Real images for the layer walk's Docker tests: a Dockerfile in the style of an ML serving
image, built unchanged with the engine's BuildKit from the offline base and tiny wheels.

:data:`SERVING_DOCKERFILE` has what real serving Dockerfiles have: a build stage and a runtime
stage (``COPY --from``), a cache mount, a bind mount, an ``ARG``-driven version, a
``$TARGETPLATFORM`` branch, an install run by a copied shell script, ``uv pip install --system``
beside a venv (pip when no uv wheel is reachable), an ``apt-get install`` (of a local ``.deb``:
offline), and one late layer whose install downgrades the NCCL stand-in (``flashy`` requires
``nccl-like==2.29.7``), the field's failure.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tests.support.native import debian_package
from tests.support.wheels import make_wheel

CLIENT = "/usr/bin/docker"
REPOSITORY = os.environ.get("AUDIT_TEST_REPOSITORY", "layer-audit-test")
WHEELS = [
    ("alpha", "1.0", ()),
    ("beta", "1.0", ()),
    ("nccl-like", "2.30.0", ()),
    ("nccl-like", "2.29.7", ()),
    ("flashy", "1.0", ("nccl-like==2.29.7",)),
]
LATE_LAYER = "pip install --no-index --find-links /wheels flashy==1.0"

SERVING_DOCKERFILE = (
    """\
ARG BASE
FROM ${BASE} AS base
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

FROM base AS build
ARG INDEX_URL
ARG TOOLS_URL=""
ARG UV_VERSION=""
ARG NCCL_VERSION=2.30.0
RUN --mount=type=cache,target=/root/.cache/pip \\
    for wheel in alpha==1.0 beta==1.0 nccl-like==${NCCL_VERSION} nccl-like==2.29.7 \\
        flashy==1.0; do \\
      /opt/venv/bin/pip download --no-deps --index-url "$INDEX_URL" -d /wheels "$wheel" \\
        || exit 1; \\
    done
RUN --mount=type=cache,target=/root/.cache/pip \\
    mkdir -p /opt/tools && if [ -n "$TOOLS_URL" ]; then \\
      python3 -m venv /opt/tools/uv && \\
      /opt/tools/uv/bin/pip install --index-url "$TOOLS_URL" "uv==$UV_VERSION"; fi

FROM base AS runtime
ARG TARGETPLATFORM
ARG NCCL_VERSION=2.30.0
COPY --from=build /wheels /wheels
COPY --from=build /opt/tools /opt/tools
RUN if [ "$TARGETPLATFORM" = "linux/arm64" ]; then echo aarch64 > /etc/ml-arch; \\
    else echo x86_64 > /etc/ml-arch; fi
RUN --mount=type=bind,source=debs,target=/debs apt-get install -y /debs/ml-tools_1.0_all.deb
COPY install.sh /usr/local/bin/install-ml.sh
RUN install-ml.sh alpha==1.0 nccl-like==${NCCL_VERSION}
RUN if [ -x /opt/tools/uv/bin/uv ]; then \\
      PATH=/usr/bin:/bin /opt/tools/uv/bin/uv pip install --system --break-system-packages \\
        --no-index --find-links /wheels beta==1.0; \\
    else python3 -m pip install --break-system-packages --no-index --find-links /wheels \\
      beta==1.0; fi
ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib64
RUN /opt/venv/bin/"""
    + LATE_LAYER
    + "\n"
)

INSTALL_SH = """\
#!/bin/sh
# installs what the image serves with into the venv
set -eu
/opt/venv/bin/pip install --no-index --find-links /wheels "$@"
"""

ARM_DOCKERFILE = """\
ARG BASE
FROM ${BASE}
COPY wheels /wheels
RUN /opt/venv/bin/pip install --no-index --find-links /wheels alpha==1.0
"""


def serving_context(folder: Path) -> Path:
    """The build context: the Dockerfile, the install script and a local ``.deb``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text(SERVING_DOCKERFILE)
    (folder / "install.sh").write_text(INSTALL_SH)
    (folder / "install.sh").chmod(0o755)
    files = {"/usr/share/ml-tools/README": b"ml tools\n"}
    debian_package(folder / "debs", "ml-tools", "1.0", files, arch="all")
    return folder


def wheels(folder: Path) -> Path:
    for name, version, requires in WHEELS:
        make_wheel(folder, name, version, requires=requires)
    return folder


def build(
    context: Path, tag: str, build_args: dict[str, str], platform: str = "linux/amd64",
    extra: Sequence[str] = (),
) -> None:  # fmt: skip
    """``docker build`` with the engine's BuildKit; the output on failure."""
    argv = [CLIENT, "build", "--network", "host", "--platform", platform, "-t", tag, *extra]
    for key, value in build_args.items():
        argv += ["--build-arg", f"{key}={value}"]
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    done = subprocess.run(
        [*argv, str(context)], env=env, capture_output=True, text=True, timeout=1200, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def docker(*args: str) -> str:
    done = subprocess.run([CLIENT, *args], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
