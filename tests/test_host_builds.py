"""``lock`` runs no index's code on this machine: a source distribution is built only inside the
base image, or on this machine when ``--build-on-host NAME`` says so.

The index serves ``markerpkg``, an sdist whose build writes a marker file wherever it runs
(:mod:`tests.support.sdists`). uv (and pip-compile with ``--host``) take wheels only and refuse
it by name, naming the two ways on; with ``--build-on-host markerpkg`` it is built here, the
marker appears and the lock pins the sdist; pip-tools in the base image builds it inside the
container: the lock is made and no marker appears on the host. Two layers make the uv run's
background read-ahead compile resolve the sdist too: it must not build it either.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from audit.history.snapshot import Distribution
from audit.lock.files import parse_lock
from audit.lock.host_builds import HostBuilds, newest_sdist, refused
from audit.lock.resolvers import uv
from tests.support.cli import fails, run_lock
from tests.support.fixtures import BaseImageFactory, Wheelhouse
from tests.support.project import ProjectSpec, base_record, pip_recipe_toml, write_project
from tests.support.sdists import make_marker_sdist

SITE = "/opt/venv/lib/python3/site-packages"
ZERO = "sha256:" + "0" * 64
HOST_PYTHON = platform.python_version()
LAYERS = {"v1.in": "alpha\n", "v2.in": "markerpkg\n"}  # v2's sdist needs alpha, from v1

UV_REFUSAL = """\
  × No solution found when resolving dependencies:
  ╰─▶ Because markerpkg==1.0 has no usable wheels and only markerpkg==1.0 is available, we can
      conclude that all versions of markerpkg cannot be used.
      And because you require markerpkg, we can conclude that your requirements are
      unsatisfiable.

      hint: Wheels are required for `markerpkg` because building from source is disabled for
      all packages (i.e., with `--no-build`)
"""


def test_only_wheels_unless_a_package_is_named() -> None:
    assert HostBuilds().resolver_args() == ["--only-binary", ":all:"]
    named = HostBuilds.of(["Marker_Pkg", "alpha"]).resolver_args()
    assert named == ["--only-binary", ":all:", "--no-binary", "alpha", "--no-binary", "marker-pkg"]


def test_the_newest_source_distribution_of_a_listing() -> None:
    files = ["a-1.0.tar.gz", "a-1.10.zip", "a-2.0-py3-none-any.whl", "a-1.2.tar.gz", "x.txt"]
    assert newest_sdist(files) == "1.10"
    assert newest_sdist(["a-2.0-py3-none-any.whl"]) is None


def test_uvs_refusal_is_read_as_the_package_and_its_version() -> None:
    assert uv.source_only(UV_REFUSAL) == ("markerpkg", "1.0")
    assert uv.source_only("error: No solution found when resolving dependencies") is None
    error = refused("v1 layer 1 (requirements/v1.in)", "markerpkg", "1.0", in_image_route="X")
    assert error.exit_code == 2
    assert "markerpkg 1.0 has no wheel for the target" in error.message
    assert error.hint.startswith("X to build it inside the base image")
    assert "--build-on-host markerpkg" in error.hint


def _index(wheelhouse: Wheelhouse, marker: Path) -> None:
    wheelhouse.add("alpha", "1.0")
    make_marker_sdist(wheelhouse.path, "markerpkg", "1.0", marker, requires=["alpha"])


def _uv_project(root: Path, index: str) -> None:
    toml = pip_recipe_toml(["v1", "v2"], index_url=index).replace(
        "[image]\n", '[image]\nresolver = "uv"\n', 1
    )
    base = (Distribution("setuptools", "68.0", SITE, "pip", ZERO, "setuptools", requires_dist=()),)
    record = base_record(*base, python=HOST_PYTHON)
    write_project(root, ProjectSpec("t", toml, LAYERS, record))


def _pins(root: Path, slug: str) -> dict[str, str]:
    lock = parse_lock((root / f"locks/t/{slug}.txt").read_bytes(), slug)
    return {name: pin.version for name, pin in lock.pins.items()}


@pytest.mark.slow
@pytest.mark.parametrize("resolver", ["uv", "pip-tools --host"])
def test_an_sdist_is_refused_on_this_machine_unless_named(
    tmp_path: Path,
    wheelhouse: Wheelhouse,
    local_index: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    resolver: str,
) -> None:
    marker = tmp_path / "built-on-the-host"
    _index(wheelhouse, marker)
    project = tmp_path / "project"
    host = ["--host"] if resolver != "uv" else []
    if resolver == "uv":
        _uv_project(project, local_index)
    else:
        toml = pip_recipe_toml(["v1", "v2"], index_url=local_index)
        record = base_record(python=HOST_PYTHON)
        spec = ProjectSpec("t", toml, LAYERS, record)
        write_project(project, spec)
    monkeypatch.chdir(project)

    err = fails(capsys, 2, "lock", "t", *host)
    assert not marker.exists(), "lock ran the sdist's build code on this machine"
    assert "v2 layer 1 (requirements/v2.in): markerpkg 1.0 has no wheel for the target" in err
    assert "--build-on-host markerpkg" in err
    assert ('resolver = "pip-tools"' if resolver == "uv" else "drop --host") in err
    assert _pins(project, "v1-01") == {"alpha": "1.0"}  # the layer before stands

    assert run_lock("t", *host, "--build-on-host", "MarkerPkg") == 0, capsys.readouterr().err
    assert marker.read_text() == "built here"  # where the message said: on this machine
    assert _pins(project, "v2-01") == {"markerpkg": "1.0"}


@pytest.mark.docker
@pytest.mark.slow
def test_pip_tools_builds_an_sdist_inside_the_base_image_only(
    tmp_path: Path,
    wheelhouse: Wheelhouse,
    local_index: str,
    base_image: BaseImageFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    marker = tmp_path / "built-on-the-host"
    _index(wheelhouse, marker)
    image = base_image("bookworm", "amd64")
    toml = pip_recipe_toml(["v1", "v2"], base=image, index_url=local_index)
    spec = ProjectSpec("t", toml, LAYERS)
    write_project(tmp_path / "project", spec)
    monkeypatch.chdir(tmp_path / "project")
    assert run_lock("t") == 0, capsys.readouterr().err
    assert not marker.exists(), "lock ran the sdist's build code on this machine"
    assert _pins(tmp_path / "project", "v2-01") == {"markerpkg": "1.0"}
