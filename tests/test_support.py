"""The test support itself: tiny wheels that pip installs, and the local index that serves them."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.fixtures import Wheelhouse
from tests.support.pkgindex import serve_index, yank
from tests.support.wheels import make_wheel, wheel_filename


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def _hermetic_env(tmp_path: Path) -> dict[str, str]:
    """The machine's pip configuration (find-links, constraints) must not leak into these runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env |= {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    return env


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("venv")
    venv.create(target, with_pip=False, system_site_packages=False)
    return target / "bin" / "python"


def _pip(python: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # pip of the running interpreter installs into the venv (no pip inside it: faster).
    argv = [sys.executable, "-m", "pip", "--python", str(python), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)


def test_wheel_layout_and_record_hashes(tmp_path: Path) -> None:
    path = make_wheel(tmp_path, "Foo_Bar", "1.0+cu130", requires=["dep>=2; python_version>'3'"])
    assert path.name == "foo_bar-1.0+cu130-py3-none-any.whl"
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        metadata = archive.read("foo_bar-1.0+cu130.dist-info/METADATA").decode()
        record = archive.read("foo_bar-1.0+cu130.dist-info/RECORD").decode().splitlines()
        for line in record[:-1]:
            member, digest, size = line.split(",")
            data = archive.read(member)
            assert len(data) == int(size)
            assert digest.startswith("sha256=")
    assert "foo_bar/__init__.py" in names
    assert 'Requires-Dist: dep>=2; python_version > "3"' in metadata
    assert record[-1] == "foo_bar-1.0+cu130.dist-info/RECORD,,"


def test_wheels_are_byte_identical_across_runs(tmp_path: Path) -> None:
    first = make_wheel(tmp_path / "a", "pkg", "2.0rc1").read_bytes()
    second = make_wheel(tmp_path / "b", "pkg", "2.0rc1").read_bytes()
    rebuilt = make_wheel(tmp_path / "c", "pkg", "2.0rc1", files={"pkg/extra.py": "X = 1\n"})
    assert first == second
    assert rebuilt.read_bytes() != first


def test_platform_tag_in_file_name() -> None:
    tag = "cp311-cp311-manylinux_2_28_aarch64"
    assert wheel_filename("torch", "2.9.0+cu130", tag).endswith(f"-{tag}.whl")


def test_index_pages_carry_hashes_and_yanks(wheelhouse: Wheelhouse, local_index: str) -> None:
    wheel = wheelhouse.add("Foo.Bar", "1.0")
    wheelhouse.add("foo-bar", "2.0")
    yank(wheel, "broken build")
    assert '<a href="foo-bar/">' in _fetch(local_index)
    page = _fetch(local_index + "Foo_BAR/")  # any spelling reaches the canonical project
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert f"foo_bar-1.0-py3-none-any.whl#sha256={digest}" in page
    assert 'data-yanked="broken build"' in page
    assert page.count("data-yanked") == 1


def test_unknown_project_is_404(local_index: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        _fetch(local_index + "nothing-here/")
    assert caught.value.code == 404


@pytest.mark.slow
def test_pip_installs_from_local_index_with_dependencies(
    wheelhouse: Wheelhouse, local_index: str, venv_python: Path, tmp_path: Path
) -> None:
    wheelhouse.add("nvidia-nccl-cu13", "2.30.1")
    wheelhouse.add("nvidia-nccl-cu13", "2.29.7")
    wheelhouse.add("serve-kit", "1.0+cu130", requires=["nvidia-nccl-cu13>=2.30"])
    wheelhouse.add("serve-kit", "2.0a1")  # a pre-release: pip must not pick it by default
    env = _hermetic_env(tmp_path)
    args = ("install", "--no-cache-dir", "--index-url", local_index, "serve-kit")
    done = _pip(venv_python, env, *args)
    assert done.returncode == 0, done.stderr
    listing = _pip(venv_python, env, "list", "--format=freeze").stdout
    assert "serve-kit==1.0+cu130" in listing
    assert "nvidia-nccl-cu13==2.30.1" in listing
    probe = [str(venv_python), "-c", "import serve_kit; print(serve_kit.__version__)"]
    shown = subprocess.run(probe, capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "1.0+cu130"


@pytest.mark.slow
def test_pip_skips_yanked_and_honours_hashes(
    wheelhouse: Wheelhouse, venv_python: Path, tmp_path: Path
) -> None:
    wheelhouse.path.mkdir(parents=True)
    good = wheelhouse.add("hashed", "1.0")
    yank(wheelhouse.add("hashed", "1.1"))
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    (tmp_path / "req.txt").write_text(f"hashed==1.0 --hash=sha256:{digest}\n")
    env = _hermetic_env(tmp_path)
    with serve_index(wheelhouse.path) as url:
        loose = _pip(venv_python, env, "install", "--dry-run", "--index-url", url, "hashed")
        assert "Would install hashed-1.0" in loose.stdout, loose.stderr
        pinned = ["install", "--no-cache-dir", "--require-hashes", "-r", str(tmp_path / "req.txt")]
        done = _pip(venv_python, env, *pinned, "--index-url", url)
    assert done.returncode == 0, done.stderr
