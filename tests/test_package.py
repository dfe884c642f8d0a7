"""The installed package, as a user gets it: a wheel in a clean venv, run outside this checkout.

Builds the sdist and, from it, the wheel (``python -m build``, the release workflow's command)
from a copy of the sources committed to a scratch git repository and tagged ``v9.8.7`` (nothing
is written into the checkout; the version comes from the tag), installs the wheel into a fresh
``python -m venv`` (its dependencies from the machine's package index), and runs the
``layer-audit`` console script on scratch git repositories under the temporary folder:
``--help``, ``--version``, ``render`` (from a subfolder and with ``--project``),
``lock --check``, ``audit-deps``, ``gate``, and ``init`` followed by ``render`` and the
scaffold's own noxfile. The venv resolves ``packaging`` to its newest release (26 and later),
with which ``export`` validates its own PEP 751 output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.gitrepo import git
from tests.support.release import VERSION, tagged_sources
from tests.support.vllm_project import CLEAN_PINS, Project, write_project

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]


def run(
    cwd: Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A program as a user runs it: no PYTHONPATH, this checkout nowhere on the path."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        list(argv), cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True,
        check=False, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``dist/`` holding the sdist and the wheel built from it, as the release workflow does."""
    tmp = tmp_path_factory.mktemp("release")
    source = tagged_sources(tmp)
    built = run(tmp, sys.executable, "-m", "build", "--outdir", str(tmp / "dist"), str(source))
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return tmp / "dist"


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin/`` folder of a fresh venv holding the wheel built from these sources."""
    tmp = tmp_path_factory.mktemp("wheel")
    (wheel,) = dist.glob("layer_audit-*.whl")
    venv = tmp / "venv"
    made = run(tmp, sys.executable, "-m", "venv", str(venv))
    assert made.returncode == 0, made.stderr
    done = run(tmp, str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel))
    assert done.returncode == 0, done.stderr
    return venv / "bin"


def test_the_tag_names_the_release(dist: Path, installed: Path, tmp_path: Path) -> None:
    assert sorted(p.name for p in dist.iterdir()) == [
        f"layer_audit-{VERSION}-py3-none-any.whl",
        f"layer_audit-{VERSION}.tar.gz",
    ]
    done = run(tmp_path, str(installed / "layer-audit"), "--version")
    assert (done.returncode, done.stdout) == (0, f"layer-audit {VERSION}\n"), done.stderr


def test_the_wheel_holds_every_package_and_the_docs(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {
        path.parent.relative_to(REPO).as_posix()
        for path in (REPO / "audit").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert {f"{package}/__init__.py" for package in packages} <= names
    docs = {
        f"audit/docs/{p.relative_to(REPO / 'docs').as_posix()}"
        for p in (REPO / "docs").rglob("*.md")
    }
    assert docs and docs <= names


def test_newest_packaging_and_export_validates_its_own_pylock(installed: Path) -> None:
    probe = (
        "import packaging, tomllib; from pathlib import Path\n"
        "from audit.report.pylock_export import validate\n"
        'text = \'lock-version = "1.0"\\ncreated-by = "layer-audit"\\npackages = []\\n\'\n'
        "print(packaging.__version__, validate(text, Path('pylock.toml')))\n"
    )
    done = run(installed, str(installed / "python"), "-c", probe)
    assert done.returncode == 0, done.stderr
    version, validated = done.stdout.split(" ", 1)
    assert int(version.split(".")[0]) >= 26
    assert validated.strip() == f"packaging {version}"


PIPX = Path(sys.executable).parent / "pipx"  # the test extra's, beside this interpreter


@pytest.mark.skipif(not PIPX.is_file(), reason="pipx is not installed beside this interpreter")
def test_pipx_installs_the_wheel(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    env = {"PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    done = run(tmp_path, str(PIPX), "install", str(wheel), env=env)
    assert done.returncode == 0, done.stderr
    shown = run(tmp_path, str(tmp_path / "bin" / "layer-audit"), "--version", env=env)
    assert shown.stdout == f"layer-audit {VERSION}\n"
    helped = run(tmp_path, str(tmp_path / "bin" / "layer-audit"), "--help", env=env)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: layer-audit")


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A git repository outside the checkout: a locked recipe on main, a branch ``pr``."""
    repo = tmp_path / "repo"
    (repo / "images").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    write_project(repo, Project())
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "recipe")
    git(repo, "checkout", "-q", "-b", "pr")
    return repo


def test_the_wheel_ships_templates_scripts_and_skeleton(installed: Path) -> None:
    python = str(installed / "python")
    where = run(
        installed, python, "-c", "import audit, pathlib; print(pathlib.Path(audit.__file__).parent)"
    )
    package = Path(where.stdout.strip())
    assert package.is_relative_to(installed.parent), "imported from the checkout, not the venv"
    for relpath in (
        "templates/Dockerfile.j2", "templates/layers/pip.j2", "templates/parts/guard.j2",
        "inimage/guard.py", "inimage/snapshot.py", "skeleton/noxfile.py.tmpl",
        "skeleton/image/image.toml.tmpl", "py.typed",
    ):  # fmt: skip
        assert (package / relpath).is_file(), relpath


def test_help_names_the_console_script_and_the_reference(installed: Path, tmp_path: Path) -> None:
    done = run(tmp_path, str(installed / "layer-audit"), "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: layer-audit")
    assert "--project" in done.stdout and "init" in done.stdout and "import" in done.stdout
    shown = " ".join(done.stdout.split())
    folder = shown.split("reference: ", 1)[1].split(" ", 1)[0]
    assert Path(folder).is_relative_to(installed.parent) and (Path(folder) / "recipes.md").is_file()


def test_commands_run_from_a_subfolder_and_with_project(installed: Path, scratch: Path) -> None:
    tool = str(installed / "layer-audit")
    inside = scratch / "images" / "vllm"
    rendered = run(inside, tool, "render", "vllm")
    assert rendered.returncode == 0, rendered.stderr
    assert (scratch / "build/vllm/Dockerfile").read_text().startswith("# Rendered by layer-audit")
    assert run(inside, tool, "lock", "vllm", "--check").returncode == 0
    audited = run(inside, tool, "audit-deps")
    assert audited.returncode == 0, audited.stdout + audited.stderr
    elsewhere = scratch.parent
    assert (
        run(elsewhere, tool, "--project", str(scratch), "lock", "vllm", "--check").returncode == 0
    )
    assert run(elsewhere, tool, "render", "vllm", "--project", str(scratch)).returncode == 0
    lost = run(elsewhere, tool, "render", "vllm")
    assert lost.returncode == 2 and "no images/ folder" in lost.stderr
    assert "Traceback" not in lost.stderr


def test_the_gate_passes_a_clean_branch_and_fails_a_downgrade(
    installed: Path, scratch: Path
) -> None:
    tool = str(installed / "layer-audit")
    clean = run(scratch, tool, "gate", "--base", "main")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    pins = {**CLEAN_PINS, "v3": {"rich": "14.0.0", "nvidia-nccl-cu13": "2.29.7"}}
    write_project(scratch, Project(pins=pins))
    git(scratch, "commit", "-q", "-am", "the nightly moves nccl")
    failed = run(scratch / "locks", tool, "gate", "--base", "main")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "nvidia-nccl-cu13" in failed.stdout + failed.stderr


def test_init_then_render_and_the_scaffold_noxfile(installed: Path, tmp_path: Path) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    git(repo, "init", "-q")
    tool = str(installed / "layer-audit")
    first = run(repo, tool, "init")
    assert first.returncode == 0, first.stderr
    rendered = run(repo, tool, "render", "example")
    assert rendered.returncode == 0, rendered.stderr
    nox = Path(sys.executable).parent / "nox"
    if not nox.is_file():
        pytest.skip("nox is not installed beside this interpreter")
    path = f"{installed}{os.pathsep}{os.environ['PATH']}"
    session = run(repo, str(nox), "-s", "render", "--", "example", env={"PATH": path})
    assert session.returncode == 0, session.stdout + session.stderr
    assert str(installed / "layer-audit") in session.stdout + session.stderr
