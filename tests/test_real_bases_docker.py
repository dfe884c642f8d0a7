"""The field's vLLM route in a real vendor-like image, locked in it and built with BuildKit.

The vendor image is the offline Debian base plus tiny wheels installed from local files only:
an off-index ``vllm 0.11.1.dev5+gabc1234.cu130`` and ``torch 2.9.0+cu130`` (neither is on the
index the recipe names), NCCL 2.30.7, cutlass-dsl 4.3.1 with its libs and FlashInfer 0.6.13.
``lock`` records the base and resolves every layer inside that image; the nightly layer with
its override locks, audits and builds with zero waivers; a later stage that drags NCCL back
fails ``lock``, ``audit-deps`` and the build at that layer, and moves no tag.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.docker import host as docker_host
from audit.lock.files import lock_relpath, parse_lock, render_lock
from audit.lock.plan import RESOLVER, after_inputs, layer_inputs, pip_steps, read_base_digest
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from tests.support.docker_build import TEST_REPOSITORY, images_of
from tests.support.field_stack import BASE, NIGHTLY, OVERRIDE, POLICY, REQUIREMENTS, field_index
from tests.support.fixtures import BaseImageFactory, Wheelhouse
from tests.support.pkgindex import serve_index
from tests.support.wheels import make_wheel

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[1]
PYTHON = "/opt/venv/bin/python"
VENDOR = f"{TEST_REPOSITORY}/vendor-vllm:glm53-flash"


def vendor_dockerfile(base: str) -> str:
    return (
        f"FROM {base}\nCOPY wheels /tmp/wheels\n"
        f"RUN {PYTHON} -m pip install --no-index --no-deps /tmp/wheels/*.whl "
        "&& rm -rf /tmp/wheels\n"
    )


@pytest.fixture(scope="module")
def vendor_image(
    base_image: BaseImageFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The vendor image: its packages come from local files, not from any index."""
    context = tmp_path_factory.mktemp("vendor")
    for name, version, requires in BASE:
        make_wheel(context / "wheels", name, version, requires=requires)
    (context / "Dockerfile").write_text(vendor_dockerfile(base_image("bookworm", "amd64")))
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    argv = ["/usr/bin/docker", "build", "-q", "-t", VENDOR, str(context)]
    subprocess.run(argv, check=True, env=env, capture_output=True)
    yield VENDOR
    docker_host.daemon().images.remove(VENDOR)


@pytest.fixture
def index(wheelhouse: Wheelhouse) -> Iterator[tuple[str, Path]]:
    field_index(wheelhouse)
    with serve_index(wheelhouse.path) as url:
        yield url, wheelhouse.path


def write_field(root: Path, url: str, stages: dict[str, str]) -> None:
    shutil.copytree(REPO_ROOT / "templates", root / "templates", dirs_exist_ok=True)
    folder = root / "images" / "field"
    (folder / "requirements").mkdir(parents=True, exist_ok=True)
    head = (
        f'[image]\nbase = "{VENDOR}"\nplatform = "linux/amd64"\ncuda = "cu130"\n'
        f'interpreters = ["{PYTHON}"]\nrepository = "{TEST_REPOSITORY}/field"\n'
        f'index_url = "{url}"\n{POLICY}'
    )
    body = "".join(
        f'\n[[stage]]\nname = "{name}"\n  [[stage.layer]]\n  pip = "requirements/{name}.in"\n'
        f"{layer}\n"
        for name, layer in stages.items()
    )
    (folder / "image.toml").write_text(head + body)
    for name, text in REQUIREMENTS.items():
        (folder / "requirements" / name).write_text(text)


def audit(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LAYER_AUDIT_DOCKER="/usr/bin/docker", PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "audit", *argv],
        cwd=root, env=env, capture_output=True, text=True, check=False, timeout=1200,
    )  # fmt: skip


def installed_in(image: str) -> dict[str, str]:
    """name -> version as pip sees it inside ``image``."""
    code = (
        "import importlib.metadata as m;"
        "print('\\n'.join(d.metadata['Name']+' '+d.version for d in m.distributions()))"
    )
    argv = ["/usr/bin/docker", "run", "--rm", "--network", "none", "--entrypoint", PYTHON]
    argv += [image, "-c", code]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


@pytest.fixture
def cleanup() -> Iterator[None]:
    yield
    daemon = docker_host.daemon()
    for tag in images_of(f"{TEST_REPOSITORY}/field"):
        daemon.images.remove(tag)


def hand_lock(root: Path, slug: str, pins: list[tuple[str, str]], wheels: Path) -> None:
    """A lock written by hand (as a careless merge would leave one), pinning ``pins``, with
    inputs that make it fresh: only the guard in the build can then catch what it does."""
    source = DirectorySource(root)
    recipe = load_recipe(source, "field")
    (step,) = [s for s in recipe.steps() if s.slug == slug]

    def digest(name: str, version: str) -> str:
        (path,) = wheels.glob(f"{name.replace('-', '_')}-{version}-*.whl")
        return hashlib.sha256(path.read_bytes()).hexdigest()

    body = "".join(f"{n}=={v} \\\n    --hash=sha256:{digest(n, v)}\n" for n, v in pins)
    base = read_base_digest(source, recipe)
    assert base is not None
    steps = pip_steps(recipe)
    before = steps[: [s.slug for s in steps].index(slug)]
    earlier, _ = after_inputs(
        {s.slug: parse_lock(source.read_bytes(lock_relpath(recipe, s)), s.slug) for s in before}
    )
    inputs = layer_inputs(source, recipe, step, base[1], earlier)
    text = render_lock("field", step, RESOLVER, inputs.digests, body)
    (root / "locks" / "field" / f"{slug}.txt").write_text(text)


def test_the_vllm_route_locks_audits_and_builds_in_the_vendor_image(
    tmp_path: Path, vendor_image: str, index: tuple[str, Path], cleanup: None
) -> None:
    url, wheels = index
    write_field(tmp_path, url, {"v1": "", "v2": OVERRIDE})

    locked = audit(tmp_path, "lock", "field")
    assert locked.returncode == 0, locked.stderr[-3000:]
    v1 = (tmp_path / "locks/field/v1-01.txt").read_text()
    assert "vllm-router==1.0" in v1 and "\nvllm==" not in v1 and "\ntorch==" not in v1
    v2 = (tmp_path / "locks/field/v2-01.txt").read_text()
    assert f"flashinfer-python=={NIGHTLY}" in v2 and "\nnvidia-nccl-cu13==" not in v2
    assert "override: nvidia-nccl-cu13 kept at 2.30.7" in locked.stderr

    audited = audit(tmp_path, "audit-deps", "field")
    assert audited.returncode == 0, audited.stdout[-3000:]

    built = audit(tmp_path, "build", "field")
    assert built.returncode == 0, built.stderr[-3000:]
    final = installed_in(f"{TEST_REPOSITORY}/field:v2-amd64-cu130")
    assert final["nvidia-nccl-cu13"] == "2.30.7" and final["flashinfer-python"] == NIGHTLY
    assert final["torch"] == "2.9.0+cu130" and final["vllm"] == "0.11.1.dev5+gabc1234.cu130"

    # v3 installs something that needs the nightly again, so pip would drag NCCL back
    write_field(tmp_path, url, {"v1": "", "v2": OVERRIDE, "v3": ""})
    relock = audit(tmp_path, "lock", "field")
    assert relock.returncode == 1
    assert "v3 layer 1 (requirements/v3.in)" in relock.stderr
    assert "downgraded: nvidia-nccl-cu13 2.30.7 -> 2.29.7" in relock.stderr
    assert not (tmp_path / "locks/field/v3-01.txt").exists()

    dragged = [("sglang-kernel", "0.3.0"), ("nvidia-nccl-cu13", "2.29.7")]
    hand_lock(tmp_path, "v3-01", dragged, wheels)
    audited = audit(tmp_path, "audit-deps", "field", "--format", "json")
    assert audited.returncode == 1
    report = json.loads(audited.stdout)
    errors = [f for s in report["sections"] for f in s["findings"] if f["severity"] == "error"]
    downgrade = next(f for f in errors if f["rule"] == "downgraded")
    assert downgrade["package"] == "nvidia-nccl-cu13" and "v3 layer 1" in downgrade["where"]
    assert (downgrade["before"], downgrade["after"]) == ("2.30.7", "2.29.7")

    before = images_of(f"{TEST_REPOSITORY}/field")
    built = audit(tmp_path, "build", "field")
    assert built.returncode == 1, built.stderr[-3000:]
    assert "v3 layer 1" in built.stderr and "2.30.7 -> 2.29.7" in built.stderr
    assert images_of(f"{TEST_REPOSITORY}/field") == before  # no tag moved


def test_a_recipe_interpreter_the_base_lacks_is_bad_input_naming_image_toml(
    tmp_path: Path, base_image: BaseImageFactory, index: tuple[str, Path]
) -> None:
    url, _ = index
    write_field(tmp_path, url, {"v1": ""})
    toml = tmp_path / "images/field/image.toml"
    text = toml.read_text().replace(f'base = "{VENDOR}"', f'base = "{base_image()}"')
    toml.write_text(
        text.replace(f'interpreters = ["{PYTHON}"]', 'interpreters = ["/usr/bin/python9"]')
    )
    done = audit(tmp_path, "lock", "field")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "images/field/image.toml: image.interpreters" in done.stderr
    assert "/usr/bin/python9 does not exist" in done.stderr and "qemu" not in done.stderr
