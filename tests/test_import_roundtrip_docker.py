"""Round trips against the real Docker daemon (``pytest --docker``): a Dockerfile in the shape
of a real ML serving image is built as it is, then imported, rendered, locked and built as a
recipe; both images of each stage must hold the same installed distributions.

Everything is small and local: the offline base, tiny wheels on 127.0.0.1 (reached as
``127.0.0.1`` and as ``localhost``: two index URLs for per-layer indexes), locks written in the
lock format with the wheels' real hashes. Images are tagged under ``$AUDIT_TEST_REPOSITORY``
and removed afterwards.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.cli.main import main
from audit.docker import host as docker_host
from audit.history.image_audit import ImageTarget, snapshot_image
from audit.lock.files import lock_relpath, parse_lock, render_lock
from audit.lock.plan import RESOLVER, after_inputs, layer_inputs, read_base_digest
from audit.project.sources import DirectorySource
from audit.recipe.model import PipLayer
from audit.recipe.parse import load_recipe
from tests.support.docker_build import CLIENT, PYTHON, REPO_ROOT, TEST_REPOSITORY, base_record
from tests.support.fixtures import BaseImageFactory
from tests.support.pkgindex import serve_index
from tests.support.wheels import make_wheel

pytestmark = [pytest.mark.docker, pytest.mark.slow]
WHEELS = [("alpha", "1.0"), ("alpha", "0.9"), ("beta", "1.0"), ("gamma", "1.0"),
          ("delta", "1.0"), ("epsilon", "1.0")]  # fmt: skip
PREFIX = f"{TEST_REPOSITORY}/import-rt"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    wheels = tmp_path_factory.mktemp("wheels")
    for name, version in WHEELS:
        make_wheel(wheels, name, version)
    with serve_index(wheels) as url:
        yield url, wheels


@pytest.fixture
def cleanup() -> Iterator[None]:
    yield
    daemon = docker_host.daemon()
    for image in daemon.api.images():  # one list call, no inspect per image
        for tag in image.get("RepoTags") or ():
            if tag.startswith(PREFIX):
                daemon.api.remove_image(tag)


def docker_build(context: Path, target: str, tag: str) -> None:
    """The original Dockerfile, built as it is (BuildKit, host network for the local index)."""
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    argv = [CLIENT, "build", "--network", "host", "--target", target, "-t", tag, str(context)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def audit(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LAYER_AUDIT_DOCKER=CLIENT, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "audit", *args],
        cwd=root, env=env, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip


def installed(ref: str) -> dict[str, set[tuple[str, str]]]:
    """Per interpreter found in the image: its distributions' names and versions."""
    return {
        item.interpreter: {(d.name, d.version) for d in item.environment.distributions}
        for item in snapshot_image(ImageTarget(ref, (PYTHON,)))
    }


def write_locks(root: Path, image: str, wheels: Path) -> None:
    """A lock per pip layer, pinning what its requirements name at the wheels' real hashes,
    fresh against the layers its own image holds (as ``lock`` writes them)."""
    source = DirectorySource(root)
    recipe = load_recipe(source, image)
    base = read_base_digest(source, recipe)
    assert base is not None
    written: dict[str, str] = {}
    for step in recipe.steps():
        if not isinstance(step.layer, PipLayer):
            continue
        lines = (root / recipe.directory / step.layer.requirements).read_text().splitlines()
        pins = [line.split("==") for line in lines if line and not line.startswith("#")]
        body = "".join(f"{n}=={v} \\\n    --hash=sha256:{_hash(wheels, n, v)}\n" for n, v in pins)
        earlier, _ = after_inputs({
            slug: parse_lock(text.encode(), slug)
            for slug, text in written.items() if slug in recipe.before(step)
        })  # fmt: skip
        inputs = layer_inputs(source, recipe, step, base[1], earlier)
        written[step.slug] = render_lock(image, step, RESOLVER, inputs.digests, body)
        (root / lock_relpath(recipe, step)).write_text(written[step.slug])


def _hash(wheels: Path, name: str, version: str) -> str:
    (path,) = wheels.glob(f"{name}-{version}-*.whl")
    return hashlib.sha256(path.read_bytes()).hexdigest()


GRAPH = """\
# A serving image's stage graph: a build stage and a runtime beside each other on the base, a
# test stage and the server on the runtime; build arguments, the platform one in an if.
ARG BASE={base}
ARG ALPHA_VERSION=1.0
FROM ${{BASE}} AS build
ARG TARGETARCH
RUN --mount=type=cache,target=/root/.cache/la-import \\
    mkdir -p /opt/dist && echo "built for $TARGETARCH" > /opt/dist/info.txt

FROM ${{BASE}} AS runtime
ARG ALPHA_VERSION
ARG TARGETPLATFORM
WORKDIR /opt/app
COPY . .
COPY app/serve.py app/serve.py
RUN --mount=type=cache,target=/root/.cache/pip \\
    {python} -m pip install --index-url {index} "alpha==${{ALPHA_VERSION}}"
RUN {python} -m pip install --index-url {index} beta==1.0 \\
    && {python} -m pip install --index-url {local} gamma==1.0
COPY --from=build /opt/dist /opt/dist
RUN if [ "$TARGETPLATFORM" = "linux/amd64" ]; then \\
        {python} -m pip install --index-url {index} delta==1.0; \\
    fi

FROM runtime AS test
RUN {python} -m pip install --index-url {index} epsilon==1.0 && echo tested > /opt/tested

FROM runtime AS serve
ENTRYPOINT ["{python}", "/opt/app/app/serve.py"]
"""


def test_a_stage_graph_round_trips(
    tmp_path: Path,
    index: tuple[str, Path],
    base_image: BaseImageFactory,
    cleanup: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, wheels = index
    base = base_image("bookworm", "amd64")
    context = tmp_path / "ctx"
    (context / "app").mkdir(parents=True)
    (context / "app" / "serve.py").write_text("print('serve')\n")
    local = url.replace("127.0.0.1", "localhost")
    text = GRAPH.format(base=base, index=url, local=local, python=PYTHON)
    (context / "Dockerfile").write_text(text)
    for target in ("test", "serve"):
        docker_build(context, target, f"{PREFIX}-orig:{target}")

    root = tmp_path / "repo"
    root.mkdir()
    monkeypatch.chdir(root)
    assert main(["import", str(context / "Dockerfile"), "--image", "rt"]) == 0
    out = capsys.readouterr().out
    assert "split into 2 pip layers" in out and "inside shell control flow" in out
    toml = root / "images/rt/image.toml"
    toml.write_text(toml.read_text().replace('"local/rt"', f'"{PREFIX}"'))
    (root / "locks/rt").mkdir(parents=True)
    (root / "locks/rt/base.json").write_text(base_record(base, "linux/amd64"))
    write_locks(root, "rt", wheels)

    done = audit(root, "build", "rt")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    recipe = load_recipe(DirectorySource(root), "rt")
    for target in ("test", "serve"):
        stage = recipe.stage(target).name
        assert installed(f"{PREFIX}:{stage}-amd64-cpu") == installed(f"{PREFIX}-orig:{target}")
    serve = installed(f"{PREFIX}:{recipe.stage('serve').name}-amd64-cpu")[PYTHON]
    assert {("alpha", "1.0"), ("beta", "1.0"), ("gamma", "1.0"), ("delta", "1.0")} <= serve
    assert ("epsilon", "1.0") not in serve  # the test stage is beside it, not under it


PRELUDE = """\
# A base without the Python the image audits: the first step makes it (as an apt-get install
# of python3 would on a CUDA image), the next one installs with it.
FROM {base} AS runtime
RUN mv /opt/.venv-hidden /opt/venv
RUN {python} -m pip install --index-url {index} alpha==1.0
RUN {python} -m pip install --index-url {index} beta==1.0
"""


def test_a_base_without_python_is_recorded_after_its_prelude(
    tmp_path: Path,
    index: tuple[str, Path],
    base_image: BaseImageFactory,
    cleanup: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, wheels = index
    offline = base_image("bookworm", "amd64")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "Dockerfile").write_text(f"FROM {offline}\nRUN mv /opt/venv /opt/.venv-hidden\n")
    argv = [CLIENT, "build", "-t", f"{PREFIX}-nopython:base", str(bare)]
    subprocess.run(argv, check=True, env=dict(os.environ, DOCKER_BUILDKIT="1"), capture_output=True)
    context = tmp_path / "ctx"
    context.mkdir()
    text = PRELUDE.format(base=f"{PREFIX}-nopython:base", index=url, python=PYTHON)
    (context / "Dockerfile").write_text(text)
    docker_build(context, "runtime", f"{PREFIX}-orig:prelude")

    root = tmp_path / "repo"
    root.mkdir()
    monkeypatch.chdir(root)
    command = ["import", str(context / "Dockerfile"), "--image", "pre", "--base-without-python"]
    assert main(command) == 0
    toml = root / "images/pre/image.toml"
    toml.write_text(toml.read_text().replace('"local/pre"', f'"{PREFIX}"'))
    recipe = load_recipe(DirectorySource(root), "pre")
    assert recipe.base_stage == "v1" and [s.name for s in recipe.stages] == ["v1", "v2"]

    monkeypatch.setenv("LAYER_AUDIT_DOCKER", CLIENT)
    from audit.base.record import record_base

    (root / "locks/pre").mkdir(parents=True)
    record = record_base(root, DirectorySource(root), recipe)  # builds the prelude first
    assert record.image == f"{PREFIX}-nopython:base+v1"
    assert any(e.interpreter == PYTHON for e in record.environments)
    write_locks(root, "pre", wheels)

    done = audit(root, "build", "pre")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "base drifted" not in done.stderr  # the prelude built again is the recorded base
    assert installed(f"{PREFIX}:v2-amd64-cpu") == installed(f"{PREFIX}-orig:prelude")
