"""What the build guard costs: guarded vs ``--no-guard`` builds of one recipe, side by side.

Usage: ``python benchmarks/bench_guard.py [IMAGE] [--rounds N] [--limit PCT]`` (default: demo,
3 rounds, 3 %). Each round builds the image twice with ``--no-cache`` (every layer runs again;
pip's download cache mount stays warm for both), guarded and unguarded in alternating order so
that neither always runs first. The whole ``python -m audit build`` is timed: the guarded run
also pays for extracting the trail. Exit 1 when the median overhead exceeds the limit.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_build(image: str, guarded: bool) -> float:
    argv = [sys.executable, "-m", "audit", "build", image, "--no-cache"]
    if not guarded:
        argv.append("--no-guard")
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"build failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return elapsed


def measure(image: str, rounds: int) -> tuple[list[float], list[float]]:
    guarded: list[float] = []
    unguarded: list[float] = []
    timed_build(image, guarded=True)  # warm pip's cache mount and the base image
    for index in range(rounds):
        order = (True, False) if index % 2 == 0 else (False, True)
        for with_guard in order:
            seconds = timed_build(image, with_guard)
            (guarded if with_guard else unguarded).append(seconds)
            label = "guarded" if with_guard else "no-guard"
            print(f"round {index + 1}: {label:8} {seconds:7.2f} s", flush=True)
    return guarded, unguarded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("image", nargs="?", default="demo")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=float, default=3.0, help="allowed overhead, percent")
    args = parser.parse_args()
    guarded, unguarded = measure(args.image, args.rounds)
    with_guard, without = statistics.median(guarded), statistics.median(unguarded)
    overhead = 100.0 * (with_guard - without) / without
    print(f"{'':10}{'median':>10}{'min':>10}{'max':>10}")
    for name, values in (("guarded", guarded), ("no-guard", unguarded)):
        print(f"{name:10}{statistics.median(values):10.2f}{min(values):10.2f}{max(values):10.2f}")
    print(
        f"guard overhead: {with_guard - without:+.2f} s ({overhead:+.1f} %, limit {args.limit} %)"
    )
    return 0 if overhead <= args.limit else 1


if __name__ == "__main__":
    raise SystemExit(main())
