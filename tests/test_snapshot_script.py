"""The in-image snapshot script, run for real: in a venv, the system interpreter, Python 3.9."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.markers import default_environment
from packaging.utils import canonicalize_name

from audit.history.snapshot import SCRIPT_PATH, Environment, parse_snapshot
from tests.support.wheels import make_wheel

PY39 = Path("/root/.pyenv/versions/3.9.18/bin/python3.9")
HERMETIC_PIP = {
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_NO_INDEX": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
}


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inimage_snapshot", SCRIPT_PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script: Any = _load_script()


def run_script(python: str | Path, *args: str, env: dict[str, str] | None = None) -> bytes:
    # Tests run the script the way images do: a plain interpreter and a file path.
    done = subprocess.run(
        [str(python), str(SCRIPT_PATH), *args], capture_output=True, env=env, check=True
    )
    return done.stdout


def snapshot_of(python: str | Path, env: dict[str, str] | None = None) -> Environment:
    (environment,) = parse_snapshot(run_script(python, env=env), f"{python}")
    return environment


def _pip(python: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | HERMETIC_PIP
    subprocess.run([str(python), "-m", "pip", "-q", *args], check=True, env=env)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real venv holding Foo_Bar 1.0 (installed by pip from a local wheel)."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root / "env")], check=True)
    wheel = make_wheel(root / "wheels", "Foo_Bar", "1.0")
    python = root / "env" / "bin" / "python"
    _pip(python, "install", "--no-deps", str(wheel))
    return python


def _site(python: Path) -> str:
    return next(p for p in snapshot_of(python).paths if p.endswith("site-packages"))


@pytest.mark.slow
def test_venv_snapshot_records_name_version_location_installer_digest(venv: Path) -> None:
    env = snapshot_of(venv)
    foo = env.winners()["foo-bar"]
    assert (foo.version, foo.raw_name, foo.installer, foo.metadata) == (
        "1.0",
        "Foo_Bar",
        "pip",
        "dist-info",
    )
    assert foo.location == _site(venv) and foo.digest.startswith("sha256:")
    assert env.interpreter == str(venv) and "pip" in env.winners()


def test_markers_equal_packaging_default_environment() -> None:
    assert snapshot_of(sys.executable).markers == default_environment()


def test_output_is_deterministic_and_written_atomically(venv: Path, tmp_path: Path) -> None:
    target = tmp_path / "snap.json"
    run_script(venv, "--output", str(target))
    assert target.read_bytes() == run_script(venv)
    assert [p.name for p in tmp_path.iterdir()] == ["snap.json"]


@pytest.mark.slow
def test_same_version_reinstalled_with_other_files_changes_the_digest(
    venv: Path, tmp_path: Path
) -> None:
    before = snapshot_of(venv).winners()["foo-bar"]
    other = make_wheel(tmp_path, "foo-bar", "1.0", files={"foo_bar/extra.py": "X = 1\n"})
    _pip(venv, "install", "--no-deps", "--force-reinstall", str(other))
    after = snapshot_of(venv).winners()["foo-bar"]
    assert after.version == before.version and after.digest != before.digest


def test_a_copy_earlier_on_the_path_shadows_and_egg_info_is_read(
    venv: Path, tmp_path: Path
) -> None:
    extra = tmp_path / "extra"
    (extra / "foo_bar-2.0.egg-info").mkdir(parents=True)
    (extra / "foo_bar-2.0.egg-info" / "PKG-INFO").write_text(
        "Name: foo.bar\nVersion: 2.0\n\nName: no\n"
    )
    (extra / "old_dist-0.1.egg-info").write_text(
        "Metadata-Version: 1.0\nName: Old-Dist\nVersion: 0.1\n"
    )
    env = snapshot_of(venv, env={"PYTHONPATH": str(extra), "PATH": os.environ["PATH"]})
    copies = [d for d in env.distributions if d.name == "foo-bar"]
    assert [(d.version, d.metadata) for d in copies] == [("2.0", "egg-info"), ("1.0", "dist-info")]
    assert env.winners()["old-dist"].version == "0.1"


def test_system_interpreter() -> None:
    python = shutil.which("python3", path="/usr/bin") or sys.executable
    env = snapshot_of(python)
    assert env.distributions and all(d.name == canonicalize_name(d.name) for d in env.distributions)


@pytest.mark.skipif(not PY39.exists(), reason="no Python 3.9 interpreter on this machine")
def test_runs_under_python_39() -> None:
    env = snapshot_of(PY39)
    assert env.markers["python_version"] == "3.9" and env.python.startswith("3.9.")


@pytest.mark.docker
@pytest.mark.parametrize("python", ["/usr/bin/python3", "python3"])
def test_runs_in_a_debian_bullseye_image(base_image: Any, docker_client: Any, python: str) -> None:
    """Python 3.9, both the system interpreter and the one first on PATH (a venv there)."""
    image = base_image("bullseye")
    output = docker_client.containers.run(
        image,
        [python, "/probe/snapshot.py"],
        volumes={str(SCRIPT_PATH.parent): {"bind": "/probe", "mode": "ro"}},
        remove=True,
        network_disabled=True,
    )
    (env,) = parse_snapshot(output, f"{image}:{python}")
    assert env.markers["python_version"] == "3.9" and env.python.startswith("3.9.")
    assert env.paths[0] == "/usr/lib/python3.9" and "/probe" not in env.paths


def test_bad_arguments_exit_2() -> None:
    argv = [sys.executable, str(SCRIPT_PATH), "--bogus"]
    done = subprocess.run(argv, capture_output=True, check=False)
    assert done.returncode == 2 and b"usage" in done.stderr


def test_header_reading_stops_at_the_first_blank_line(tmp_path: Path) -> None:
    metadata = tmp_path / "METADATA"
    metadata.write_bytes(b"Metadata-Version: 2.1\nName: a\n\nVersion: 9\n" + b"x" * 20000)
    assert script.read_header(str(metadata)) == ("a", "", [], "")
    late = b"Metadata-Version: 2.1\n" + b"Classifier: x\n" * 2000 + b"Name: b\nVersion: 2\n\n"
    metadata.write_bytes(late)
    assert script.read_header(str(metadata)) == ("b", "2", [], "")


names = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?", fullmatch=True)
json_values = st.recursive(
    st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20
)


@given(names)
def test_script_canonical_name_agrees_with_packaging(name: str) -> None:
    assert script.canonical_name(name) == canonicalize_name(name)


@given(json_values)
def test_script_json_matches_json_dumps(value: Any) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert script.canonical_json(value) == expected


def test_requirements_are_read_from_the_header(tmp_path: Path) -> None:
    metadata = tmp_path / "METADATA"
    metadata.write_bytes(
        b"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.18\n"
        b"License: Apache\n        a folded: continuation line\n"
        b"Requires-Python: >=3.9\nRequires-Dist: nvidia-nccl-cu13==2.29.7\n"
        b'Requires-Dist: pytest ; extra == "test"\n\nRequires-Dist: not-a-header\n'
    )
    assert script.read_header(str(metadata)) == (
        "flashinfer-python",
        "0.6.18",
        ["nvidia-nccl-cu13==2.29.7", 'pytest ; extra == "test"'],
        ">=3.9",
    )


def test_an_egg_info_folder_gives_its_requires_txt_as_pep_508(tmp_path: Path) -> None:
    egg = tmp_path / "legacy-1.0.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: legacy\nVersion: 1.0\n\n")
    (egg / "requires.txt").write_text(
        "six>=1\n\n[socks]\nPySocks\n\n[:python_version < '3.8']\nx\n"
    )
    record = script.describe(str(tmp_path), egg.name, "egg-info", True)
    assert record["requires_dist"] == [
        "six>=1",
        'PySocks; extra == "socks"',
        "x; (python_version < '3.8')",
    ]
