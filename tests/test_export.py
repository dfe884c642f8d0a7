"""``export --format pylock`` and the Renovate loop, end to end with the real pip-tools.

A project locked by ``lock --host`` against tiny wheels (named like the field's packages) on a
127.0.0.1 index is exported stage by stage; each ``pylock.<stage>.toml`` is read back by the
PEP 751 reader of ``packaging`` 26 (installed into a virtual environment of its own: the
project's ``packaging`` stays below 26 for the build guard's Python 3.9 images). Then what
Renovate does: bump a version in a ``.in`` file, run ``lock``, and the lock is fresh and audited.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.cli import main as cli
from audit.errors import EXIT_BAD_INPUT, EXIT_OK
from audit.history.snapshot import Distribution
from audit.host import process as commands
from audit.lock.resolvers.job import DEFAULT_TOOLS_INDEX, ambient_ca_bundle
from tests.support.fixtures import Wheelhouse
from tests.support.pkgindex import serve_index
from tests.support.project import ProjectSpec, base_record, pip_recipe_toml, write_project

POLICY = """
[policy.lockstep]
cutlass-dsl = ["nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-*"]
"""
V1 = "nvidia-cutlass-dsl==4.8.1\n"
V2 = "flashinfer-python==0.7.2\n"


def field_wheels(wheelhouse: Wheelhouse) -> None:
    for version in ("4.8.1", "4.9.0"):
        libs = f"nvidia-cutlass-dsl-libs-base=={version}"
        wheelhouse("nvidia-cutlass-dsl", version, requires=[libs])
        wheelhouse("nvidia-cutlass-dsl-libs-base", version)
    wheelhouse("flashinfer-python", "0.7.2", requires=["tqdm"])
    wheelhouse("tqdm", "1.0")


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    wheels = Wheelhouse(tmp_path_factory.mktemp("wheels"))
    field_wheels(wheels)
    with serve_index(wheels.path) as url:
        yield url


@pytest.fixture
def project(tmp_path: Path, index: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Recipe ``dsl`` (v1 cutlass-dsl, v2 FlashInfer) over a base holding ``vllm`` (a
    vendor build no index carries), locked by the real pip-tools."""
    monkeypatch.setenv(commands.QUIET_ENV, "1")
    vendor = Distribution("vllm", "0.11.1.dev5+g1234abc.cu130", requires_dist=())
    base = base_record(vendor, python=platform.python_version())
    recipe = pip_recipe_toml(["v1", "v2"], index_url=index, cuda="cu130", extra=POLICY)
    root = write_project(tmp_path, ProjectSpec("dsl", recipe, {"v1.in": V1, "v2.in": V2}, base))
    monkeypatch.chdir(root)
    assert cli.main(["lock", "dsl", "--host"]) == EXIT_OK
    return root


@pytest.fixture(scope="session")
def pylock_reader(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with ``packaging`` 26 (its ``packaging.pylock``), from the public index the
    suite's tool wheels come from, without this machine's pip configuration."""
    venv = tmp_path_factory.mktemp("pylock-reader")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    argv = [str(python), "-m", "pip", "install", "--isolated", "--quiet", "--only-binary", ":all:"]
    bundle = ambient_ca_bundle()
    argv += ["--cert", str(bundle)] if bundle else []
    argv += ["--index-url", DEFAULT_TOOLS_INDEX, "packaging>=26,<27"]
    subprocess.run(argv, check=True, env=env, timeout=300)
    return python


READ = """
import json, sys, tomllib
from packaging.pylock import Pylock
lock = Pylock.from_dict(tomllib.load(open(sys.argv[1], "rb")))
print(json.dumps([[p.name, str(p.version), [w.filename for w in p.wheels or ()]]
                  for p in lock.packages]))
"""


def read_pylock(python: Path, path: Path) -> list[list[Any]]:
    done = subprocess.run(
        [str(python), "-c", READ, str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    result: list[list[Any]] = json.loads(done.stdout)
    return result


@pytest.mark.slow
def test_each_stage_exports_a_pylock_that_packaging_reads(
    project: Path, pylock_reader: Path, index: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert cli.main(["export", "dsl", "--format", "pylock", "--json"]) == EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    assert [f["path"] for f in printed["files"]] == [
        "build/export/dsl/pylock.v1.toml",
        "build/export/dsl/pylock.v2.toml",
    ]
    v1 = read_pylock(pylock_reader, project / "build/export/dsl/pylock.v1.toml")
    assert v1 == [
        ["nvidia-cutlass-dsl", "4.8.1", ["nvidia_cutlass_dsl-4.8.1-py3-none-any.whl"]],
        ["nvidia-cutlass-dsl-libs-base", "4.8.1",
         ["nvidia_cutlass_dsl_libs_base-4.8.1-py3-none-any.whl"]],
    ]  # fmt: skip
    v2_path = project / "build/export/dsl/pylock.v2.toml"
    v2 = read_pylock(pylock_reader, v2_path)
    assert [name for name, _, _ in v2] == [
        "flashinfer-python", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "tqdm"
    ]  # fmt: skip
    document = tomllib.loads(v2_path.read_text())
    [dsl] = [p for p in document["packages"] if p["name"] == "nvidia-cutlass-dsl"]
    assert dsl["index"] == index and dsl["wheels"][0]["url"].startswith(index.rsplit("/", 2)[0])
    lock = (project / "locks/dsl/v1-01.txt").read_text()
    assert dsl["wheels"][0]["hashes"]["sha256"] in lock
    tool = document["tool"]["layer-audit"]
    assert tool["installed-by-base"] == [{"name": "vllm", "version": "0.11.1.dev5+g1234abc.cu130"}]
    assert tool["stage"] == "v2" and document["requires-python"].startswith("==3.")
    again = v2_path.read_bytes()
    assert cli.main(["export", "dsl", "--stage", "v2"]) == EXIT_OK
    assert v2_path.read_bytes() == again  # deterministic


@pytest.mark.slow
def test_an_unknown_stage_or_a_stale_lock_is_refused_and_nothing_is_written(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export", "dsl", "--stage", "v9"]) == EXIT_BAD_INPUT
    assert "has no such stage" in capsys.readouterr().err
    (project / "images/dsl/requirements/v2.in").write_text("flashinfer-python==0.7.2\ntqdm\n")
    assert cli.main(["export", "dsl"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert (
        "locks/dsl/v2-01.txt: stale (inputs changed: requirements/v2.in)" in err
        and "nox -s lock -- dsl" in err
    )
    assert not (project / "build/export").exists()  # v1 was fine: still nothing written
    assert cli.main(["export", "dsl", "--stage", "v1"]) == EXIT_OK  # v1's locks are fresh


@pytest.mark.slow
def test_renovate_bumps_an_in_file_then_lock_gives_a_fresh_audited_lock(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the documented Renovate set-up does: its regex manager rewrites ``==4.8.1`` in
    ``requirements/v1.in``; the post-upgrade command ``layer-audit lock`` recompiles."""
    infile = project / "images/dsl/requirements/v1.in"
    assert cli.main(["lock", "dsl", "--check"]) == EXIT_OK
    manager = renovate_manager()
    files = re.compile(manager["managerFilePatterns"][0].strip("/"))
    assert files.search(infile.relative_to(project).as_posix())
    [found] = re.finditer(js_regex(manager["matchStrings"][0]), infile.read_text())
    assert (found["depName"], found["currentValue"]) == ("nvidia-cutlass-dsl", "4.8.1")
    text = infile.read_text()
    start, end = found.span("currentValue")
    infile.write_text(text[:start] + "4.9.0" + text[end:])  # Renovate's update of the pin
    assert cli.main(["lock", "dsl", "--check"]) != EXIT_OK  # stale until re-locked
    assert cli.main(["lock", "dsl", "--host"]) == EXIT_OK
    assert cli.main(["lock", "dsl", "--check"]) == EXIT_OK
    lock = (project / "locks/dsl/v1-01.txt").read_text()
    assert "nvidia-cutlass-dsl==4.9.0" in lock and "nvidia-cutlass-dsl-libs-base==4.9.0" in lock
    capsys.readouterr()
    assert cli.main(["audit-deps", "dsl", "--format", "json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "pass"
    assert not [f for s in report["sections"] for f in s["findings"] if f["rule"] == "lockstep"]


def renovate_manager() -> dict[str, Any]:
    """The regex manager of the Renovate set-up docs/gate.md documents."""
    readme = (Path(__file__).resolve().parents[1] / "docs" / "gate.md").read_text()
    block = readme.split("<!-- renovate-config:", 1)[1].split("```json\n", 1)[1]
    config = json.loads(block.split("```", 1)[0])
    assert config["postUpgradeTasks"]["fileFilters"] == ["locks/**"]
    assert "layer-audit lock" in config["postUpgradeTasks"]["commands"][0]
    manager: dict[str, Any] = config["customManagers"][0]
    assert manager["datasourceTemplate"] == "pypi"
    return manager


def js_regex(pattern: str) -> str:
    """An ECMAScript named group ``(?<name>`` as Python spells it."""
    return re.sub(r"\(\?<([A-Za-z]\w*)>", r"(?P<\1>", pattern)
