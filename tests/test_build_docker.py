"""``python -m audit build`` end to end against the real Docker daemon (``pytest --docker``).

One offline base image for every test (the ``base_image`` fixture), tiny wheels served on
127.0.0.1 (the build reaches them with ``--network host``, chosen automatically for a loopback
index), locks written directly in the lock format with the wheels' real hashes. Every image
a test makes is tagged under ``layer-audit-test/`` and removed afterwards.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from audit.docker import host as docker_host
from tests.support.docker_build import (
    CLIENT,
    PYTHON,
    Index,
    Project,
    amd64,
    base_record,
    cleanup,
    images_of,
    index,
    make_project,
    two_stages,
)
from tests.support.fixtures import BaseImageFactory

__all__ = ["amd64", "cleanup", "index"]  # fixtures, from tests/support/docker_build.py
pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_nccl_downgrade_fails_at_its_layer_and_moves_no_tag(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    project = make_project(
        tmp_path, index, "nccl", two_stages('pip = "requirements/v2.in"'), *amd64
    )
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("nccl-like", "2.30.0")])
    project.lock("v2-01", "v2.in", [("flashy", "1.0"), ("nccl-like", "2.29.7")])
    daemon = docker_host.daemon()
    daemon.images.get(amd64[0]).tag(project.repository, "v2-amd64-cpu")  # a tag from before
    before = images_of(project.repository)

    done = project.build()

    assert done.returncode == 1, done.stderr[-3000:]
    assert "nccl-like" in done.stderr and "2.30.0 -> 2.29.7" in done.stderr
    assert "v2 layer 1" in done.stderr and "downgraded" in done.stderr
    assert "[[policy.waiver]]" in done.stderr
    assert images_of(project.repository) == before  # nothing tagged, nothing moved
    assert (tmp_path / "build" / "reports" / "nccl" / "build.log").is_file()


def test_lockstep_skew_fails(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    policy = '[policy.lockstep]\ncutlass = ["cutlass-dsl", "cutlass-dsl-libs-*"]\n'
    toml = two_stages('pip = "requirements/v2.in"', policy=policy)
    project = make_project(tmp_path, index, "skew", toml, *amd64)
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("cutlass-dsl", "4.3.0"), ("cutlass-dsl-libs-base", "4.3.0")])
    project.lock("v2-01", "v2.in", [("cutlass-dsl", "4.4.0")])

    done = project.build()

    assert done.returncode == 1, done.stderr[-3000:]
    assert "lockstep" in done.stderr and "cutlass-dsl-libs-base 4.3.0" in done.stderr
    assert images_of(project.repository) == {}


def test_a_shell_layer_that_downgrades_by_hand_fails(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    command = (
        f"PIP_CONFIG_FILE=/dev/null {PYTHON} -m pip install -q --no-deps "
        f"--index-url {index.url} alpha==0.9"
    )
    project = make_project(
        tmp_path, index, "byhand", two_stages(f"run = {json.dumps(command)}"), *amd64
    )
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])

    done = project.build()

    assert done.returncode == 1, done.stderr[-3000:]
    assert "alpha" in done.stderr and "1.0 -> 0.9" in done.stderr
    assert "v2 layer 1 (run)" in done.stderr


def test_a_clean_recipe_builds_tags_labels_and_extracts_its_trail_without_leaking_the_ca(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    toml = two_stages('run = "echo built > /etc/built"', smoke=f"{PYTHON} -c 'import alpha'")
    project = make_project(tmp_path, index, "clean", toml, *amd64)
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])
    marker = "LAYER-AUDIT-TEST-CA-7f3a9c"
    bundle = tmp_path / "corp-ca.pem"
    bundle.write_text(f"-----BEGIN CERTIFICATE-----\n{marker}\n-----END CERTIFICATE-----\n")

    done = project.build("--ca-bundle", str(bundle), "--format", "json")

    assert done.returncode == 0, done.stderr[-3000:]
    tags = images_of(project.repository)
    repo = project.repository
    assert set(tags) == {f"{repo}:v1-amd64-cpu", f"{repo}:v2-amd64-cpu", f"{repo}:latest-amd64-cpu"}
    assert tags[f"{repo}:v2-amd64-cpu"] == tags[f"{repo}:latest-amd64-cpu"]
    printed = json.loads(done.stdout)  # stdout holds the JSON alone; progress went to stderr
    assert printed["schema"] == "layer-audit.build/1" and printed["pushed"] == []
    built = {entry["stage"]: entry for entry in printed["stages"]}
    assert set(built["v2"]["tags"]) == {f"{repo}:v2-amd64-cpu", f"{repo}:latest-amd64-cpu"}
    assert built["v1"]["image_id"] == tags[f"{repo}:v1-amd64-cpu"]
    assert built["v2"]["image_id"] == tags[f"{repo}:v2-amd64-cpu"]
    assert {r["stage"]: r["verdict"] for r in printed["reports"]} == {"v1": "pass", "v2": "pass"}
    assert printed["log"] == "build/reports/clean/build.log"
    labels = docker_host.image_info(f"{repo}:v2-amd64-cpu").labels
    assert labels["io.layer-audit.stage"] == "v2"
    assert labels["org.opencontainers.image.created"]
    assert labels["io.layer-audit.recipe.digest"].startswith("sha256:")
    reports = tmp_path / "build" / "reports" / "clean" / "v2"
    report: dict[str, Any] = json.loads((reports / "report.json").read_text())
    assert report["verdict"] == "pass"
    assert (reports / "trail" / "v1-01.snapshot.json").is_file()
    assert (reports / "trail" / "v2-01.findings.json").is_file()
    assert "alpha" in (reports / "report.md").read_text()
    for ref in (f"{repo}:v1-amd64-cpu", f"{repo}:v2-amd64-cpu"):
        history = subprocess.run(
            [CLIENT, "history", "--no-trunc", ref], capture_output=True, text=True, check=True
        ).stdout
        inspect = subprocess.run(
            [CLIENT, "inspect", ref], capture_output=True, text=True, check=True
        ).stdout
        for text in (history, inspect):
            assert marker not in text and str(bundle) not in text
            assert "PIP_CERT=/run" not in text.replace("export PIP_CERT=/run", "")
    assert marker not in json.dumps(report)


def build_alpha_on(
    tmp_path: Path, index: Index, image: str, name: str, cleanup: list[str]
) -> Project:
    """Project ``name``: one pip stage (alpha 1.0) on ``image``, locked and built successfully."""
    base_json = base_record(image, f"linux/{image.rsplit('-', 1)[1]}")
    toml = '[[stage]]\nname = "v1"\n[[stage.layer]]\npip = "requirements/v1.in"\n'
    project = make_project(tmp_path, index, name, toml, image, base_json)
    cleanup.append(project.repository)
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])
    done = project.build()
    assert done.returncode == 0, done.stderr[-3000:]
    return project


@pytest.mark.emulation
def test_an_arm64_build_under_emulation_is_tagged_arm64(
    tmp_path: Path, index: Index, base_image: BaseImageFactory, cleanup: list[str]
) -> None:
    project = build_alpha_on(tmp_path, index, base_image("bookworm", "arm64"), "arm", cleanup)

    ref = f"{project.repository}:v1-arm64-cpu"
    assert set(images_of(project.repository)) == {ref, f"{project.repository}:latest-arm64-cpu"}
    assert docker_host.image_info(ref).architecture == "arm64"


def pyc_files(ref: str) -> set[str]:
    """Every ``.pyc`` in the image outside the packages a layer installs on purpose."""
    argv = ["find", "/", "-xdev", "-name", "*.pyc", "-not", "-path", "*/site-packages/*"]
    return set(docker_host.run_in_image(ref, argv).split())


def test_the_guard_runs_under_python_39_and_writes_no_bytecode(
    tmp_path: Path, index: Index, base_image: BaseImageFactory, cleanup: list[str]
) -> None:
    image = base_image("bullseye", "amd64")
    project = build_alpha_on(tmp_path, index, image, "oldpython", cleanup)

    base_json = json.loads((tmp_path / "locks/oldpython/base.json").read_text())
    assert base_json["snapshot"]["environments"][0]["python"].startswith("3.9.")
    ref = f"{project.repository}:v1-amd64-cpu"
    trail = tmp_path / "build" / "reports" / "oldpython" / "v1" / "trail"
    findings = json.loads((trail / "v1-01.findings.json").read_text())
    assert [(f["rule"], f["package"]) for f in findings["findings"]] == [("added", "alpha")]
    assert pyc_files(ref) == pyc_files(image)
    assert not list((tmp_path / "build" / "oldpython" / "_guard").rglob("__pycache__"))
