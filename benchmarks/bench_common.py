"""What the benchmarks share: running the project as an installed tool runs.

An install (``pip install``) byte-compiles the project's modules; a checkout run with
``PYTHONDONTWRITEBYTECODE=1`` (this machine sets it) compiles every module from source at
every start, about 40 ms for ``lock`` and 150 ms for the gate that no user pays. The timed
commands run with byte-code kept under ``build/bench/pycache`` (``PYTHONPYCACHEPREFIX``, so the
source tree stays clean), written by each benchmark's untimed first run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYCACHE = ROOT / "build" / "bench" / "pycache"


def as_installed(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a timed command: the project's byte-code kept, as an install keeps it."""
    found = {key: value for key, value in env.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return found | {"PYTHONPYCACHEPREFIX": str(PYCACHE)}
