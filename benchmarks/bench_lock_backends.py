"""The two resolver backends side by side: pip-tools in the base image vs uv on this machine.

Usage: ``python benchmarks/bench_lock_backends.py [RECIPE_DIR] [--arm64] [--rounds N]``
(default: ``benchmarks/recipes/sci-stack``, real PyPI: numpy, scipy, pandas, scikit-learn,
matplotlib). Each backend locks a scratch copy of the recipe (under ``build/bench/``):

- **cold**: no locks and empty package caches (the tools themselves installed: timed apart);
- **one edit**: one line added to the last layer's ``.in``, then ``lock`` again (only that
  layer is stale);
- ``--arm64``: the recipe retargeted at ``linux/arm64`` on the arm64 offline base, cold:
  pip-tools runs under qemu, uv resolves for ``aarch64-manylinux`` with no emulation.

Both backends must produce the same pins (compared and printed); every time is wall time of a
whole ``python -m audit lock`` process, median over ``--rounds``. Prints a table and the ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit.lock.files import parse_lock  # noqa: E402

BACKENDS = ("pip-tools", "uv")
EDIT = "joblib>=1.3  # one edit\n"


def scratch(folder: Path, backend: str, arm64: bool) -> tuple[Path, str]:
    """A project holding a copy of the recipe for ``backend``, with no locks."""
    name = folder.resolve().name
    project = ROOT / "build" / "bench" / f"locks-{backend}{'-arm64' if arm64 else ''}"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(folder, project / "images" / name, ignore=shutil.ignore_patterns("locks"))
    toml = project / "images" / name / "image.toml"
    text = toml.read_text().replace("[image]\n", f'[image]\nresolver = "{backend}"\n', 1)
    if arm64:
        text = text.replace("linux/amd64", "linux/arm64").replace(
            "bookworm-amd64", "bookworm-arm64"
        )
    toml.write_text(text)
    return project, name


def env(cache: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), LAYER_AUDIT_CACHE=str(cache))


def lock(project: Path, name: str, cache: Path, *extra: str) -> float:
    started = time.perf_counter()
    argv = [sys.executable, "-m", "audit", "lock", name, *extra]
    done = subprocess.run(
        argv, cwd=project, env=env(cache), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"lock failed in {project}:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def empty_package_caches(cache: Path) -> None:
    """Keep the installed tools, drop what pip and uv downloaded."""
    for path in cache.rglob("*"):
        if path.is_dir() and path.name in ("uv-cache", ".cache", "http", "metadata", "tmp"):
            shutil.rmtree(path, ignore_errors=True)


def pins(project: Path, name: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted((project / "locks" / name).glob("v*.txt")):
        lock_file = parse_lock(path.read_bytes(), path.name)
        found |= {f"{path.stem}:{n}": p.version for n, p in lock_file.pins.items()}
    return found


@dataclass(frozen=True)
class Result:
    first: float  # records the base, installs the tools, compiles from nothing
    cold: float  # median: no locks, empty package caches
    edit: float  # median: one .in line added to the last layer
    pins: dict[str, str]


def measure(folder: Path, backend: str, arm64: bool, rounds: int) -> Result:
    project, name = scratch(folder, backend, arm64)
    cache = project / "cache"
    first = lock(project, name, cache, "--record-base")
    cold, edit = [], []
    for _ in range(rounds):
        for path in (project / "locks" / name).glob("v*.txt"):
            path.unlink()
        empty_package_caches(cache)
        cold.append(lock(project, name, cache))
        last = sorted((project / "images" / name / "requirements").glob("*.in"))[-1]
        original = last.read_text()
        last.write_text(original + EDIT)
        edit.append(lock(project, name, cache))
        last.write_text(original)
        lock(project, name, cache)  # back to the unedited locks for the next round
    return Result(first, statistics.median(cold), statistics.median(edit), pins(project, name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", nargs="?", default=str(ROOT / "benchmarks/recipes/sci-stack"))
    parser.add_argument("--arm64", action="store_true", help="retarget at linux/arm64")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    results: dict[str, Result] = {
        b: measure(Path(args.recipe), b, args.arm64, args.rounds) for b in BACKENDS
    }
    target = "linux/arm64" if args.arm64 else "linux/amd64"
    print(f"{'backend':10} {'first run':>10} {'cold':>9} {'one edit':>9}   ({target})")
    for backend, found in results.items():
        print(f"{backend:10} {found.first:10.2f} {found.cold:9.2f} {found.edit:9.2f}")
    slow, fast = results["pip-tools"], results["uv"]
    print(
        f"cold: uv is {slow.cold / fast.cold:.1f}x faster; one edit: "
        f"{slow.edit / fast.edit:.1f}x; first run: {slow.first / fast.first:.1f}x"
    )
    print(f"same pins: {slow.pins == fast.pins} ({len(slow.pins)} pins)")
    for key in sorted(set(slow.pins) | set(fast.pins)):
        if slow.pins.get(key) != fast.pins.get(key):
            print(f"  {key}: pip-tools {slow.pins.get(key)}  uv {fast.pins.get(key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
