"""The CycloneDX SBOM of a stage, made from a guard trail: valid against the CycloneDX schema,
the same distributions as the trail, purls, lock hashes and the installing layer."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from audit.cli.main import main
from audit.errors import EXIT_BAD_INPUT
from audit.history.snapshot import Environment, dump_snapshot
from audit.history.system import OsPackage, System
from audit.lock.files import BaseRecord
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe
from audit.report.sbom import SBOM_NAME, write_sbom
from tests.support.cli import fails
from tests.support.fixtures import BaseImageFactory
from tests.support.project import (
    VENV_PYTHON,
    ProjectSpec,
    base_record,
    installed,
    lock_body,
    pip_recipe_toml,
    write_project,
)

SITE = "/opt/venv/lib/python3.11/site-packages"
CREATED = "2026-01-01T00:00:00Z"


def snapshot(packages: dict[str, str]) -> bytes:
    env = Environment(VENV_PYTHON, "3.11.7", {}, (SITE,), installed(packages, SITE))
    return dump_snapshot([env])


def project(root: Path) -> None:
    base = base_record(*installed({"pip": "24.0"}, SITE))
    pins = {"v1": {"alpha": "1.0"}, "v2": {"beta": "2.0"}}
    spec = ProjectSpec(
        "demo",
        pip_recipe_toml(["v1", "v2"]),
        {"v1.in": "alpha\n", "v2.in": "beta\n"},
        base,
        {stage: lock_body(wanted) for stage, wanted in pins.items()},
    )
    write_project(root, spec)


def trail() -> dict[str, bytes]:
    return {
        "v1-01.snapshot.json": snapshot({"pip": "24.0", "alpha": "1.0"}),
        "v2-01.snapshot.json": snapshot({"pip": "24.0", "alpha": "1.0", "beta": "2.0"}),
    }


def components(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in document["components"]}


def test_the_sbom_of_a_stage_validates_and_lists_the_trail(tmp_path: Path) -> None:
    project(tmp_path)
    recipe = load_recipe(DirectorySource(tmp_path), "demo")

    path = write_sbom(tmp_path, recipe, "v2", trail(), CREATED)

    text = path.read_text()
    assert path == tmp_path / "build" / "reports" / "demo" / "v2" / SBOM_NAME
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    document = json.loads(text)
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    assert document["metadata"]["timestamp"].startswith("2026-01-01T00:00:00")
    found = components(document)
    assert set(found) == {"pip", "alpha", "beta"}  # exactly the trail's distributions
    assert found["beta"]["purl"] == "pkg:pypi/beta@2.0"
    properties = {p["name"]: p["value"] for p in found["alpha"]["properties"]}
    assert properties["layer-audit:layer"] == "v1 layer 1 (requirements/v1.in)"
    assert properties["layer-audit:interpreter"] == VENV_PYTHON
    pip = {p["name"]: p["value"] for p in found["pip"]["properties"]}
    assert pip["layer-audit:layer"] == "base image"
    [digest] = found["beta"]["hashes"]
    assert digest["alg"] == "SHA-256" and len(digest["content"]) == 64
    assert "hashes" not in found["pip"]  # the base's packages have no lock


def test_an_earlier_stage_lists_only_what_it_ships_and_the_document_is_deterministic(
    tmp_path: Path,
) -> None:
    project(tmp_path)
    recipe = load_recipe(DirectorySource(tmp_path), "demo")
    first = write_sbom(tmp_path, recipe, "v1", trail(), CREATED).read_text()
    second = write_sbom(tmp_path, recipe, "v1", trail(), CREATED).read_text()
    assert first == second
    assert set(components(json.loads(first))) == {"pip", "alpha"}


def test_a_stage_of_a_trail_without_snapshots_is_the_base(tmp_path: Path) -> None:
    project(tmp_path)
    recipe = load_recipe(DirectorySource(tmp_path), "demo")
    document = json.loads(write_sbom(tmp_path, recipe, "v1", {}, CREATED).read_text())
    assert set(components(document)) == {"pip"}


def test_cyclonedx_is_for_one_existing_image(capsys: pytest.CaptureFixture[str]) -> None:
    err = fails(capsys, EXIT_BAD_INPUT, "audit-deps", "demo", "--format", "cyclonedx")
    assert "--image REF" in err


@pytest.mark.docker
def test_an_existing_image_gets_a_valid_sbom_of_every_interpreter(
    tmp_path: Path, base_image: BaseImageFactory
) -> None:
    image = base_image("bookworm", "amd64")
    output = tmp_path / "base.cdx.json"
    argv = ["audit-deps", "--image", image, "--format", "cyclonedx", "--output", str(output)]
    assert main(argv) == 0
    text = output.read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    document = json.loads(text)
    assert document["metadata"]["component"]["name"] == image.rpartition(":")[0]
    found = components(document)
    assert found["pip"]["purl"].startswith("pkg:pypi/pip@")
    interpreters = {
        p["value"]
        for c in document["components"]
        for p in c["properties"]
        if p["name"] == "layer-audit:interpreter"
    }
    assert "/opt/venv/bin/python" in interpreters


def _system(packages: dict[str, str]) -> System:
    found = tuple(OsPackage(name, version, "amd64", name) for name, version in packages.items())
    return System("dpkg", "", found, (), "debian-12")


def test_debian_packages_are_components_with_deb_purls_and_their_layer(tmp_path: Path) -> None:
    """The base's packages come from the base image; one a layer installed names that layer."""
    dists = installed({"pip": "24.0"}, SITE)
    system = _system({"libc6": "2.36-9"})
    base_env = Environment(VENV_PYTHON, "3.11.7", {}, ("/opt/venv",), dists, "", system)
    base = BaseRecord("layer-audit/base:bookworm-amd64", "sha256:test", None, (base_env,))
    inputs = {"v1.in": "alpha\n", "v2.in": "beta\n"}
    locks = {"v1": lock_body({"alpha": "1.0"}), "v2": lock_body({"beta": "2.0"})}
    spec = ProjectSpec("demo", pip_recipe_toml(["v1", "v2"]), inputs, base, locks)
    write_project(tmp_path, spec)
    recipe = load_recipe(DirectorySource(tmp_path), "demo")
    after = replace(base_env, distributions=installed({"pip": "24.0", "alpha": "1.0"}, SITE),
                    system=_system({"libc6": "2.36-9", "jq": "1.6-2.1"}))  # fmt: skip
    files = {"v1-01.snapshot.json": dump_snapshot([after])}

    text = write_sbom(tmp_path, recipe, "v1", files, CREATED).read_text()

    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    found = components(json.loads(text))
    assert set(found) == {"pip", "alpha", "libc6", "jq"}
    assert found["jq"]["purl"] == "pkg:deb/debian/jq@1.6-2.1?arch=amd64&distro=debian-12"
    layers = {n: {p["name"]: p["value"] for p in c["properties"]}["layer-audit:layer"]
              for n, c in found.items()}  # fmt: skip
    assert layers["jq"] == "v1 layer 1 (requirements/v1.in)" and layers["libc6"] == "base image"
