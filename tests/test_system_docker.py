"""Below Python in a real BuildKit build (``pytest --docker``): a ``run`` layer that installs a
system NCCL shadowing the wheel's copy, and one whose ``apt-get install`` downgrades a Debian
package, each fail the build at that layer; the stage's SBOM lists the image's Debian packages
exactly as ``dpkg-query -W`` in the same image does.

Real parts: shared objects compiled with gcc (real SONAME, NEEDED and RUNPATH), wheels and
``.deb`` packages built here, served and copied without any network, the offline Debian base.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.docker import host as docker_host
from tests.support.docker_build import (
    Index,
    Project,
    amd64,
    cleanup,
    images_of,
    make_project,
)
from tests.support.native import debian_package, needs_cc, shared_object
from tests.support.pkgindex import serve_index
from tests.support.wheels import make_wheel

__all__ = ["amd64", "cleanup"]  # fixtures, from tests/support/docker_build.py
pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_cc]

NCCL_DIR = "/usr/local/nccl/lib"
WHEEL_NCCL = "nvidia/nccl/lib/libnccl.so.2"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """``nvidia-nccl-cu13 2.30.7`` (its libnccl.so.2) and ``torchish 1.0`` (a library that needs
    libnccl.so.2 through ``RUNPATH=$ORIGIN/../../nvidia/nccl/lib``, like torch's)."""
    wheels = tmp_path_factory.mktemp("wheels")
    build = tmp_path_factory.mktemp("elf")
    nccl = shared_object(build / "wheel" / "libnccl.so.2", "libnccl.so.2")
    torch = shared_object(build / "libtorchish_cuda.so", "libtorchish_cuda.so", needs=[nccl],
                          runpath="$ORIGIN/../../nvidia/nccl/lib")  # fmt: skip
    make_wheel(wheels, "nvidia-nccl-cu13", "2.30.7", files={WHEEL_NCCL: nccl.read_bytes()})
    make_wheel(wheels, "torchish", "1.0", requires=["nvidia-nccl-cu13==2.30.7"],
               files={"torchish/lib/libtorchish_cuda.so": torch.read_bytes()})  # fmt: skip
    make_wheel(wheels, "alpha", "1.0")
    with serve_index(wheels) as url:
        yield Index(url, wheels)


def project_with(
    tmp_path: Path, index: Index, name: str, toml: str, base: tuple[str, str]
) -> Project:
    project = make_project(tmp_path, index, name, toml, *base)
    recipe = tmp_path / "images" / name / "image.toml"
    recipe.write_text(recipe.read_text().replace('cuda = "cpu"', 'cuda = "cu130"'))
    return project


def system_nccl_deb(folder: Path, build: Path) -> Path:
    """``libnccl2 2.29.7-1+cuda13.0``: NVIDIA's layout, the real library name and SONAME."""
    library = shared_object(build / "libnccl.so.2.29.7", "libnccl.so.2")
    return debian_package(folder, "libnccl2", "2.29.7-1+cuda13.0",
                          {f"{NCCL_DIR}/libnccl.so.2.29.7": library.read_bytes()},
                          links={f"{NCCL_DIR}/libnccl.so.2": "libnccl.so.2.29.7"})  # fmt: skip


SHADOW = f"""
[[stage]]
name = "v1"
  [[stage.layer]]
  pip = "requirements/v1.in"

[[stage]]
name = "v2"
  [[stage.layer]]
  copy = {{ src = "debs", dest = "/tmp/debs" }}
  [[stage.layer]]
  env = {{ LD_LIBRARY_PATH = "{NCCL_DIR}" }}
  [[stage.layer]]
  run = "dpkg -i /tmp/debs/libnccl2_2.29.7-1+cuda13.0_amd64.deb"
"""


def test_a_system_nccl_that_shadows_the_wheel_fails_its_layer(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    project = project_with(tmp_path, index, "shadow", SHADOW, amd64)
    cleanup.append(project.repository)
    system_nccl_deb(tmp_path / "images" / "shadow" / "debs", tmp_path / "elf")
    project.lock("v1-01", "v1.in", [("nvidia-nccl-cu13", "2.30.7"), ("torchish", "1.0")])

    done = project.build()

    assert done.returncode == 1, done.stderr[-3000:]
    out = done.stderr
    assert "shadowed-native" in out and "v2 layer 3" in out
    assert f"{NCCL_DIR}/libnccl.so.2.29.7 (2.29.7)" in out
    assert f"site-packages/{WHEEL_NCCL}" in out and "nvidia-nccl-cu13 2.30.7" in out
    assert "torchish/lib/libtorchish_cuda.so" in out
    assert images_of(project.repository) == {}  # a failed build moves no tag


DOWNGRADE = """
[[stage]]
name = "v1"
  [[stage.layer]]
  pip = "requirements/v1.in"
  [[stage.layer]]
  copy = { src = "debs", dest = "/tmp/debs" }
  [[stage.layer]]
  run = "dpkg -i /tmp/debs/layer-audit-probe_2.0-1_all.deb"

[[stage]]
name = "v2"
  [[stage.layer]]
  run = "apt-get install -y -q --allow-downgrades /tmp/debs/layer-audit-probe_1.0-1_all.deb"
"""


def test_an_apt_get_install_that_downgrades_a_debian_package_fails(
    tmp_path: Path, index: Index, amd64: tuple[str, str], cleanup: list[str]
) -> None:
    project = project_with(tmp_path, index, "aptdown", DOWNGRADE, amd64)
    cleanup.append(project.repository)
    debs = tmp_path / "images" / "aptdown" / "debs"
    for version in ("2.0-1", "1.0-1"):
        data = f"probe {version}\n".encode()
        debian_package(debs, "layer-audit-probe", version,
                       {"/usr/share/layer-audit-probe/VERSION": data}, arch="all")  # fmt: skip
    project.lock("v1-01", "v1.in", [("alpha", "1.0")])

    done = project.build()

    assert done.returncode == 1, done.stderr[-3000:]
    out = done.stderr
    assert "deb:layer-audit-probe" in out and "2.0-1 -> 1.0-1" in out
    assert "downgraded" in out and "v2 layer 1 (run)" in out
    assert images_of(project.repository) == {}


def test_record_of_the_base_lists_its_debian_packages(amd64: tuple[str, str]) -> None:
    """The base record holds what ``dpkg-query -W`` lists in the same image."""
    image, record = amd64
    system = json.loads(record)["snapshot"]["environments"][0]["system"]
    recorded = {(p["name"], p["version"]) for p in system["os"]["packages"]}
    listed = docker_host.run_in_image(
        image, ["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\n"], platform="linux/amd64"
    )
    queried = {tuple(line.split("\t")) for line in listed.splitlines() if line}
    assert recorded == queried and len(recorded) > 50


def test_the_sbom_of_an_image_lists_exactly_its_debian_packages(
    tmp_path: Path, amd64: tuple[str, str]
) -> None:
    """``audit-deps --image --format cyclonedx``: one ``pkg:deb`` component per package that
    ``dpkg-query -W`` lists in the same image, beside the Python ones, schema-valid."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    from audit.cli.main import main

    image = amd64[0]
    output = tmp_path / "sbom.cdx.json"
    argv = ["audit-deps", "--image", image, "--format", "cyclonedx", "--output", str(output)]
    assert main(argv) == 0
    text = output.read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    purls = [c["purl"] for c in json.loads(text)["components"]]
    debs = {p.split("?")[0] for p in purls if p.startswith("pkg:deb/")}
    listed = docker_host.run_in_image(
        image, ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"], platform="linux/amd64"
    )
    queried = {_deb_purl(*line.split(" ")) for line in listed.splitlines() if line}
    assert debs == queried
    assert any(p.startswith("pkg:pypi/pip@") for p in purls)
    assert all("distro=debian-12" in p for p in purls if p.startswith("pkg:deb/"))


def _deb_purl(name: str, version: str) -> str:
    from packageurl import PackageURL

    return str(PackageURL("deb", "debian", name, version).to_string())
