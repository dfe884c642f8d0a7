"""The front door: one nox session per job. All logic lives in the ``audit`` package.

Every job session runs ``python -m audit <command>`` in one shared virtual environment,
``.nox/tools`` (the project, editable), and ``lint`` and ``tests`` share ``.nox/dev`` (the
project with its ``dev`` extra): each is made once and the project is reinstalled only when
pyproject.toml changes, so a session starts in about a second and the disk holds two
environments, not one per session.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "tests"]
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
PYTHON = "3.11"
SHARED = "none"  # sessions on a shared environment: nox makes none, _shared_env does


def _base_python() -> str:
    """What shared environments are made with: python3.11 when on PATH, else nox's own Python
    (the project's requires-python then refuses one that is too old, loudly)."""
    return shutil.which(f"python{PYTHON}") or sys.executable


def _shared_env(session: nox.Session, name: str, extras: str = "") -> Path:
    """``.nox/<name>`` made once, the project installed editable unless already current.

    Invariant: the stamp file is written only after a successful install, and it holds the
    digest of pyproject.toml and the install spec, so an edit or a failed install reinstalls.
    Returns the venv's ``bin`` folder; :func:`_in_env` runs its programs.
    """
    location = ROOT / ".nox" / name
    python = location / "bin" / "python"
    if not python.is_file():
        session.run(_base_python(), "-m", "venv", str(location), external=True)
    spec = f".[{extras}]" if extras else "."
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + spec.encode()).hexdigest()
    stamp = location / ".layer-audit-installed"
    if not (stamp.is_file() and stamp.read_text() == digest):
        session.run(str(python), "-m", "pip", "install", "-q", "-e", spec, external=True)
        stamp.write_text(digest)
    return location / "bin"


def _in_env(session: nox.Session, bin_dir: Path, program: str, *args: str) -> None:
    """Run ``bin_dir/program`` with that venv first on PATH (for what it starts in turn)."""
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {"PATH": path, "VIRTUAL_ENV": str(bin_dir.parent)}
    session.run(str(bin_dir / program), *args, env=env, external=True)


def _audit(session: nox.Session, command: str) -> None:
    _in_env(
        session, _shared_env(session, "tools"), "python", "-m", "audit", command, *session.posargs
    )


@nox.session(venv_backend=SHARED)
def render(session: nox.Session) -> None:
    """Render an image's build context: nox -s render -- IMAGE [--stage vK]."""
    _audit(session, "render")


@nox.session(venv_backend=SHARED, name="base-image")
def base_image(session: nox.Session) -> None:
    """Make an offline Debian base image: nox -s base-image -- [--suite bookworm] [--arch amd64]."""
    _audit(session, "base-image")


@nox.session(venv_backend=SHARED)
def lock(session: nox.Session) -> None:
    """Compile stale per-layer locks: nox -s lock -- IMAGE [--stage vK] [--check]."""
    _audit(session, "lock")


@nox.session(venv_backend=SHARED, name="audit-deps")
def audit_deps(session: nox.Session) -> None:
    """Audit recipes before a build (no Docker), or images: nox -s audit-deps -- [IMAGE ...]."""
    _audit(session, "audit-deps")


@nox.session(venv_backend=SHARED, name="build-image")
def build_image(session: nox.Session) -> None:
    """Build and tag an image with the guard: nox -s build-image -- [IMAGE] [--stage vK]."""
    _audit(session, "build")


@nox.session(venv_backend=SHARED)
def gate(session: nox.Session) -> None:
    """Pull-request gate: nox -s gate -- --base origin/main [--head REF] [--output FILE]."""
    _audit(session, "gate")


@nox.session(venv_backend=SHARED, name="import-dockerfile")
def import_dockerfile(session: nox.Session) -> None:
    """Turn a Dockerfile into a recipe: nox -s import-dockerfile -- Dockerfile [--image NAME]."""
    _audit(session, "import")


@nox.session(venv_backend=SHARED)
def export(session: nox.Session) -> None:
    """Export each stage as a PEP 751 pylock.toml: nox -s export -- IMAGE [--stage vK]."""
    _audit(session, "export")


def _workers(posargs: list[str]) -> list[str]:
    """pytest-xdist's options unless the caller chose (``-n``, ``-p no:xdist``) or runs a few
    tests by node id: one worker per core plus one, since most tests wait on a resolver, a
    local index or the Docker engine; Docker tests stay on one worker (``tests/conftest.py``)."""
    chosen = any(arg.startswith(("-n", "--numprocesses", "--dist")) for arg in posargs)
    if chosen or "no:xdist" in " ".join(posargs) or any("::" in arg for arg in posargs):
        return []
    return ["-n", str((os.cpu_count() or 1) + 1), "--dist", "loadgroup"]


@nox.session(venv_backend=SHARED)
def tests(session: nox.Session) -> None:
    """The fast tier in parallel workers; ``-- --docker`` runs the full suite (Docker and slow
    tests too: what CI runs), ``-- --slow`` the slow tests without Docker."""
    posargs = list(session.posargs)
    bin_dir = _shared_env(session, "dev", "dev")
    _in_env(session, bin_dir, "pytest", *_workers(posargs), *posargs)


@nox.session(venv_backend=SHARED)
def lint(session: nox.Session) -> None:
    """Ruff and mypy --strict over the package, noxfile, tests and benchmarks."""
    bin_dir = _shared_env(session, "dev", "dev")
    _in_env(session, bin_dir, "ruff", "check", ".")
    _in_env(session, bin_dir, "ruff", "format", "--check", ".")
    _in_env(session, bin_dir, "mypy")


@nox.session(venv_backend=SHARED)
def docs(session: nox.Session) -> None:
    """docs/commands.md from the argument parser (tests/test_command_reference.py checks it)."""
    bin_dir = _shared_env(session, "tools")
    _in_env(session, bin_dir, "python", "-m", "audit.cli.reference", "docs/commands.md")
