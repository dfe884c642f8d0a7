"""The front door: one nox session per job. All logic lives in the ``audit`` package.

Every job session runs ``python -m audit <command>`` in one reused virtual environment, so a
repeated session starts in seconds: the project is reinstalled only when pyproject.toml changes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "tests"]
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
PYTHON = "3.11"


def _install(session: nox.Session, extras: str = "") -> None:
    """Install the project (editable) unless this venv already has this pyproject.toml."""
    spec = f".[{extras}]" if extras else "."
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + spec.encode()).hexdigest()
    stamp = Path(session.virtualenv.location) / ".layer-audit-installed"
    if stamp.is_file() and stamp.read_text() == digest:
        return
    session.install("-e", spec)
    stamp.write_text(digest)


def _audit(session: nox.Session, command: str) -> None:
    _install(session)
    session.run("python", "-m", "audit", command, *session.posargs)


@nox.session(python=PYTHON)
def render(session: nox.Session) -> None:
    """Render an image's build context: nox -s render -- IMAGE [--stage vK]."""
    _audit(session, "render")


@nox.session(python=PYTHON, name="base-image")
def base_image(session: nox.Session) -> None:
    """Make an offline Debian base image: nox -s base-image -- [--suite bookworm] [--arch amd64]."""
    _audit(session, "base-image")


@nox.session(python=PYTHON)
def lock(session: nox.Session) -> None:
    """Compile stale per-layer locks: nox -s lock -- IMAGE [--stage vK] [--check]."""
    _audit(session, "lock")


@nox.session(python=PYTHON, name="audit-deps")
def audit_deps(session: nox.Session) -> None:
    """Audit recipes before a build (no Docker), or images: nox -s audit-deps -- [IMAGE ...]."""
    _audit(session, "audit-deps")


@nox.session(python=PYTHON, name="build-image")
def build_image(session: nox.Session) -> None:
    """Build and tag an image with the guard: nox -s build-image -- [IMAGE] [--stage vK]."""
    _audit(session, "build")


@nox.session(python=PYTHON)
def gate(session: nox.Session) -> None:
    """Pull-request gate: nox -s gate -- --base origin/main [--head REF] [--markdown FILE]."""
    _audit(session, "gate")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite; pass --docker to include tests against a real Docker daemon."""
    _install(session, "test")
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Ruff and mypy --strict over the package, noxfile, tests and benchmarks."""
    _install(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
