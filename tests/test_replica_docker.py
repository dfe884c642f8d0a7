"""A replica base, made and used for real: a 127.0.0.1 index of wheels, BuildKit, uv, pip.

The freeze of a vendor-like CUDA 13 stack becomes a replica of the offline bookworm base
(metadata only, read by range requests: a small part of the wheels crosses the network);
``lock --record-base`` records it as ``"source": "replica"`` with each package's published
requirements; pip inside it sees exactly the pins and finds nothing broken; and the field's
regression replays against it: a layer asking for ``torch==2.13.0`` fails ``lock`` naming
the NCCL downgrade, the base as its installer and torch as the asker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.docker import host as docker_host
from tests.support.docker_build import TEST_REPOSITORY
from tests.support.fixtures import BaseImageFactory
from tests.support.metaindex import serve_metadata_index
from tests.support.project import pip_recipe_toml
from tests.support.wheels import make_wheel

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[1]
REPLICA = f"{TEST_REPOSITORY}/replica:cu13-amd64"
PYTHON = "/opt/venv/bin/python"
STACK = (
    ("torch", "2.14.0", ('nvidia-nccl-cu13==2.30.7; platform_system == "Linux"',)),
    ("nvidia-nccl-cu13", "2.30.7", ()),
    ("nvidia-cutlass-dsl", "4.8.0", ("nvidia-cutlass-dsl-libs-cu12==4.8.0",)),
    ("nvidia-cutlass-dsl-libs-cu12", "4.8.0", ()),
)
LATER = (
    ("torch", "2.13.0", ('nvidia-nccl-cu13==2.29.7; platform_system == "Linux"',)),
    ("nvidia-nccl-cu13", "2.29.7", ()),
)
VENDOR_VLLM = "0.11.1.dev5+gabc1234.cu130"  # a source build: on no index


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    wheels = tmp_path_factory.mktemp("index")
    payload = {"torch/lib.txt": os.urandom(1_500_000).hex()}
    for name, version, requires in STACK + LATER:
        make_wheel(
            wheels, name, version, requires=requires, files=payload if name == "torch" else None
        )
    with serve_metadata_index(wheels) as (url, _served):
        yield url, wheels


@pytest.fixture(scope="module")
def replica(
    base_image: BaseImageFactory, index: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, subprocess.CompletedProcess[str]]]:
    base_image("bookworm", "amd64")
    url, _ = index
    freeze = tmp_path_factory.mktemp("freeze") / "vendor-freeze.txt"
    freeze.write_text("".join(f"{n}=={v}\n" for n, v, _ in STACK) + f"vllm=={VENDOR_VLLM}\n")
    made = audit(freeze.parent, "base-image", "--replica", str(freeze), "--arch", "amd64",
                 "--tag", REPLICA, "--index-url", url)  # fmt: skip
    assert made.returncode == 0, made.stderr[-3000:]
    yield REPLICA, made
    docker_host.remove_image(REPLICA)


def audit(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LAYER_AUDIT_DOCKER="/usr/bin/docker", PYTHONPATH=str(REPO_ROOT))
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return subprocess.run(
        [sys.executable, "-m", "audit", *argv],
        cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=1200,
    )  # fmt: skip


def lock_on_replica(
    root: Path, tag: str, url: str, requirements: str, extra: str = ""
) -> subprocess.CompletedProcess[str]:
    """A one-layer uv recipe ``t`` on the replica, locked with ``--record-base``."""
    toml = pip_recipe_toml(["v1"], base=tag, cuda="cu130", index_url=url, extra=extra)
    folder = root / "images" / "t"
    (folder / "requirements").mkdir(parents=True)
    (folder / "image.toml").write_text(toml.replace("[image]\n", '[image]\nresolver = "uv"\n', 1))
    (folder / "requirements" / "v1.in").write_text(requirements)
    return audit(root, "lock", "t", "--record-base")


def in_image(image: str, code: str) -> str:
    argv = ["/usr/bin/docker", "run", "--rm", "--network", "none", "--entrypoint", PYTHON]
    return subprocess.run(
        [*argv, image, "-c", code], check=True, capture_output=True, text=True
    ).stdout


def test_the_replica_holds_the_pins_with_their_published_metadata_and_no_payload(
    replica: tuple[str, subprocess.CompletedProcess[str]], index: tuple[str, Path]
) -> None:
    tag, made = replica
    assert (
        f"vllm=={VENDOR_VLLM}: the index" in made.stderr and "WITHOUT requirements" in made.stderr
    )
    read = json.loads(
        in_image(tag, "import sys; sys.stdout.write(open('/opt/layer-audit/replica.json').read())")
    )
    kinds = {d["name"]: d["metadata"] for d in read["distributions"]}
    assert kinds == {"torch": "range", "nvidia-nccl-cu13": "range", "nvidia-cutlass-dsl": "range",
                     "nvidia-cutlass-dsl-libs-cu12": "range", "vllm": "none"}  # fmt: skip
    seen = json.loads(in_image(tag, (
        "import json, importlib.metadata as m; print(json.dumps({d.metadata['Name']: "
        "[d.version, d.requires or [], d.read_text('INSTALLER')] "
        "for d in m.distributions()}))")))  # fmt: skip
    assert seen["torch"] == ["2.14.0", list(STACK[0][2]), "layer-audit-replica\n"]
    assert seen["vllm"][:2] == [VENDOR_VLLM, []]
    assert not in_image(
        tag, "import importlib.util as u; print(u.find_spec('torch') or '')"
    ).strip()
    labels = docker_host.image_info(tag).labels
    assert labels["io.layer-audit.replica"] == "true"
    torch_wheel = next(index[1].glob("torch-2.14.0-*.whl")).stat().st_size
    downloaded = float(made.stdout.split(" MB downloaded")[0].rsplit(" ", 1)[-1]) * 1e6
    assert downloaded < torch_wheel / 4  # the payloads never crossed the network


def test_the_replica_records_as_replica_and_replays_the_nccl_downgrade(
    replica: tuple[str, subprocess.CompletedProcess[str]], index: tuple[str, Path], tmp_path: Path
) -> None:
    floor = '[policy]\nrequire = ["nvidia-nccl-cu13>=2.30"]\n'
    locked = lock_on_replica(tmp_path, replica[0], index[0], "torch==2.13.0\n", floor)
    record = json.loads((tmp_path / "locks/t/base.json").read_text())
    assert record["source"] == "replica"
    (env,) = record["snapshot"]["environments"]
    dists = {d["name"]: d for d in env["distributions"]}
    assert dists["nvidia-cutlass-dsl"]["requires_dist"] == ["nvidia-cutlass-dsl-libs-cu12==4.8.0"]
    assert dists["vllm"]["version"] == VENDOR_VLLM
    assert locked.returncode == 1, locked.stderr[-3000:]
    said = locked.stderr
    assert "downgraded: nvidia-nccl-cu13 2.30.7 -> 2.29.7 (installed by the base image)" in said, (
        said
    )
    assert "torch 2.13.0 requires nvidia-nccl-cu13==2.29.7" in said
    assert not (tmp_path / "locks/t/v1-01.txt").exists()


def test_the_image_audited_is_the_image_recorded(
    replica: tuple[str, subprocess.CompletedProcess[str]], index: tuple[str, Path], tmp_path: Path
) -> None:
    """``audit-deps --image`` of the replica lists exactly what ``lock --record-base`` recorded:
    the record a dry build trusts is what the image holds, package for package."""
    tag, _ = replica
    locked = lock_on_replica(tmp_path, tag, index[0], "nvidia-nccl-cu13==2.30.7\n")
    assert locked.returncode == 0, locked.stderr[-3000:]
    record = json.loads((tmp_path / "locks/t/base.json").read_text())
    (env,) = record["snapshot"]["environments"]
    recorded = {(d["name"], d["version"]) for d in env["distributions"]}
    sbom = audit(tmp_path, "audit-deps", "--image", tag, "--recipe", "t", "--format", "cyclonedx")
    assert sbom.returncode == 0, sbom.stderr[-3000:]
    listed = {
        (c["name"], c["version"])
        for c in json.loads(sbom.stdout)["components"]
        if c["purl"].startswith("pkg:pypi/") and interpreter_of(c) == env["interpreter"]
    }
    assert ("torch", "2.14.0") in recorded and ("vllm", VENDOR_VLLM) in recorded
    assert listed == recorded


def interpreter_of(component: dict[str, object]) -> str:
    """The interpreter an SBOM component was seen by (the image's other Pythons are listed too:
    bookworm's /usr/bin/python3 with Debian's wheel, which the recipe does not audit)."""
    properties = component["properties"]
    assert isinstance(properties, list)
    return next(str(p["value"]) for p in properties if p["name"] == "layer-audit:interpreter")
