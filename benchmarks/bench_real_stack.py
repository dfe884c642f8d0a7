"""The real-stack example (``images/vllm-arm64-cu13``) end to end, beside the bare tools.

Usage: ``python benchmarks/bench_real_stack.py [--rounds N] [--skip-replica]`` (needs Docker,
the arm64 offline base and the network to PyPI). In one run, median of ``--rounds``:

- **replica build**: ``base-image --replica`` of the committed 198-pin list, cold (empty
  metadata cache, image removed) and cached (metadata cache warm); bytes downloaded and the
  wheels' total size from the index, side by side;
- **uv lock, cold**: a scratch copy of the recipe (its ``base.json``, no locks, empty uv cache;
  uv itself installed, for both) vs bare ``uv pip compile`` of the same ``.in`` files for the
  same target, cold;
- **uv lock, one edit**: one line added to the last ``.in`` vs bare ``uv pip compile`` again;
- **``lock --check``** on fresh locks and **``audit-deps``** of the recipe.

Every timed run must succeed (exit 0), else the script stops with exit 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "vllm-arm64-cu13"
LIST = ROOT / "images" / IMAGE / "replica" / "vllm-0.33.0.txt"
TAG = "layer-audit-bench/replica:vllm-0.33.0-arm64"  # not the recipe's: its record stays valid
EDIT = "nvtx==0.2.15  # one edit\n"
TARGET = ["--python-version", "3.11", "--python-platform", "aarch64-manylinux_2_36"]
WORK = ROOT / "build" / "bench" / "real-stack"


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"FAILED ({done.returncode}): {' '.join(argv)}\n{done.stderr[-3000:]}")
    return seconds, done.stdout + done.stderr


def audit_env(cache: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), LAYER_AUDIT_CACHE=str(cache))


def audit(project: Path, cache: Path, *argv: str) -> tuple[float, str]:
    return run([sys.executable, "-m", "audit", *argv], project, audit_env(cache))


def median(rounds: int, once: Callable[[], float]) -> float:
    return statistics.median(once() for _ in range(rounds))


def replica(rounds: int) -> list[str]:
    cache = WORK / "replica-cache"

    def build(cold: bool) -> float:
        if cold:
            shutil.rmtree(cache, ignore_errors=True)
            subprocess.run(["docker", "rmi", "-f", TAG], capture_output=True, check=False)
        argv = ("base-image", "--replica", str(LIST), "--arch", "arm64", "--tag", TAG)
        seconds, out = audit(ROOT, cache, *argv)
        build.said = out  # type: ignore[attr-defined]
        return seconds

    cold = median(rounds, lambda: build(True))
    said = build.said  # type: ignore[attr-defined]
    cached = median(rounds, lambda: build(False))
    gigabytes = wheels_gb()
    subprocess.run(["docker", "rmi", "-f", TAG], capture_output=True, check=False)
    found = re.search(r"(\d+) requests, ([\d.]+) MB downloaded", said)
    mb = f"{found.group(2)} MB in {found.group(1)} requests" if found else "?"
    return [
        f"replica build, cold: {cold:.1f} s, {mb} (metadata of 198 wheels; their payloads: "
        f"{gigabytes:.1f} GB, never downloaded)",
        f"replica build, metadata cached: {cached:.1f} s",
    ]


def wheels_gb() -> float:
    """Total size of the wheels the replica's metadata came from (its manifest names them)."""
    sys.path.insert(0, str(ROOT))
    from audit.base.replica import manifest_of

    listed: list[dict[str, str]] = manifest_of(TAG)["distributions"]  # type: ignore[assignment]
    names = {d["name"]: d.get("file", "") for d in listed}
    from audit.index import wheel_metadata as wm

    stats, total = wm.FetchStats(), 0
    for name, filename in names.items():
        for file in wm.project_files(
            "https://pypi.org/simple", name, context=wm.tls_context(), stats=stats
        ):
            if file.filename == filename:
                total += file.size
    return total / 1e9


def scratch() -> Path:
    project = WORK / "project"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(ROOT / "images" / IMAGE, project / "images" / IMAGE)
    shutil.copytree(ROOT / "templates", project / "templates")
    (project / "locks" / IMAGE).mkdir(parents=True)
    shutil.copy(ROOT / "locks" / IMAGE / "base.json", project / "locks" / IMAGE / "base.json")
    return project


def bare_uv(project: Path, cache: Path) -> float:
    from audit.lock.resolvers.uv import uv_binary

    env = {"PATH": os.defpath, "HOME": str(cache), "UV_CACHE_DIR": str(cache / "uv")}
    env["SSL_CERT_FILE"] = os.environ.get("SSL_CERT_FILE", "")
    total = 0.0
    for source in sorted((project / "images" / IMAGE / "requirements").glob("*.in")):
        argv = [str(uv_binary()), "pip", "compile", "--no-config", "--generate-hashes",
                *TARGET, "--index-url", "https://pypi.org/simple", str(source),
                "-o", os.devnull]  # fmt: skip
        total += run(argv, project, env)[0]
    return total


def locks(rounds: int) -> list[str]:
    def cold_project() -> float:
        # cold package caches; uv itself stays installed (installing it is timed by neither)
        project, cache = scratch(), WORK / "lock-cache"
        shutil.rmtree(cache / "host" / "uv-cache", ignore_errors=True)
        shutil.rmtree(cache / "metadata", ignore_errors=True)
        return audit(project, cache, "lock", IMAGE)[0]

    def cold_bare() -> float:
        cache = WORK / "bare-cache"
        shutil.rmtree(cache, ignore_errors=True)
        return bare_uv(scratch(), cache)

    ours, bare = median(rounds, cold_project), median(rounds, cold_bare)
    project, cache = WORK / "project", WORK / "lock-cache"
    edited = project / "images" / IMAGE / "requirements" / "v1-flashinfer.in"

    def edit_project() -> float:
        edited.write_text(edited.read_text().replace(EDIT, "") + EDIT)
        seconds = audit(project, cache, "lock", IMAGE)[0]
        edited.write_text(edited.read_text().replace(EDIT, ""))
        audit(project, cache, "lock", IMAGE)
        return seconds

    one, bare_one = median(rounds, edit_project), bare_uv(project, WORK / "bare-cache")
    check = median(rounds, lambda: audit(project, cache, "lock", IMAGE, "--check")[0])
    deps = median(rounds, lambda: audit(project, cache, "audit-deps", IMAGE)[0])
    return [
        f"uv lock, cold: {ours:.1f} s vs bare uv pip compile {bare:.1f} s ({ours / bare:.2f}x)",
        f"uv lock, one edit: {one:.1f} s vs bare uv pip compile {bare_one:.1f} s "
        f"({one / bare_one:.2f}x)",
        f"lock --check on fresh locks: {check * 1000:.0f} ms",
        f"audit-deps {IMAGE}: {deps * 1000:.0f} ms",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-replica", action="store_true")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    lines = [] if args.skip_replica else replica(args.rounds)
    lines += locks(args.rounds)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
