"""Benchmark: audit-deps over many recipes of 8 stages with 300 packages each, at the margin.

Generates a project tree in a temporary folder (recipes, requirements, base snapshots and fresh
locks written through the lock module's writers; every recipe's base and locks are its own
bytes), then times ``python -m audit audit-deps`` in-process (JSON report to a file) over the
first 10, 25 and N recipes. Every timed run must pass with exactly the findings the generator
planted (each stage upgrades three packages and adds three: 6 infos per stage, nothing else),
or the benchmark stops with exit 1.

Beside each figure, in the same run, the floor: reading and parsing the same files with the
standard library alone (``tomllib`` for recipes, ``json`` for base records, a line split of
every lock). The target (issue 22) is the margin, the cost of one more recipe: the slope
between the smallest and the largest run, at most 40 ms per recipe, judged on CPU time (the
run is single-threaded: on a quiet machine wall equals CPU; on a shared one only CPU means
anything).

    python benchmarks/bench_audit_deps.py [--recipes 50] [--stages 8] [--packages 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import Callable
from contextlib import chdir
from dataclasses import dataclass
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.cli import main as cli
from audit.host import process as commands
from tests.support.project import (
    SYSTEM_PYTHON,
    ProjectSpec,
    lock_body,
    pip_recipe_toml,
    system_base,
    write_project,
)

SITE = "/usr/local/lib/python3.12/dist-packages"
CHANGES_PER_STAGE = 6  # packages each stage upgrades or adds; the rest are re-pinned as is
TARGET_MS = 40.0  # per recipe, at the margin (issue 22)

POLICY = """
[policy]
require = ["pkg-0001>=1.0"]
forbid = ["chardet"]

[policy.lockstep]
group = ["pkg-0002", "pkg-0003"]
"""


@dataclass(frozen=True)
class Timing:
    """Medians of one measurement: wall and CPU seconds."""

    wall: float
    cpu: float


def recipe_toml(stages: int) -> str:
    names = [f"v{n}" for n in range(1, stages + 1)]
    head = pip_recipe_toml(
        names,
        base="example/base:1",
        platform="linux/arm64",
        cuda="cu130",
        interpreter=SYSTEM_PYTHON,
        repository="local/bench",
    )
    return head + POLICY


def stage_versions(packages: int, stages: int) -> list[dict[str, str]]:
    """The environment after the base (index 0) and after each stage: a few changes per stage."""
    current = {f"pkg-{i:04d}": "1.0" for i in range(packages - stages * CHANGES_PER_STAGE // 2)}
    envs = [dict(current)]
    for stage in range(1, stages + 1):
        for k in range(CHANGES_PER_STAGE // 2):
            current[f"pkg-{10 + stage * 7 + k:04d}"] = f"1.{stage}"  # upgrades
            current[f"new-{stage:02d}-{k}"] = "0.1"  # additions
        envs.append(dict(current))
    return envs


def write_recipe(root: Path, image: str, envs: list[dict[str, str]]) -> None:
    """Recipe ``image``: stage ``vN`` asks for one new package; its lock holds ``envs[N]``.

    The base also holds a package named after the image, so no two recipes share a file.
    """
    markers = {"platform_machine": "aarch64"}
    own = {**envs[0], f"{image}-marker": "1.0"}
    base = system_base(own, site=SITE, python="3.12.3", markers=markers)
    stages = [f"v{n}" for n in range(1, len(envs))]
    spec = ProjectSpec(
        image,
        recipe_toml(len(stages)),
        {f"v{n}.in": f"new-{n:02d}-0\n" for n in range(1, len(envs))},
        base,
        {stage: lock_body(env) for stage, env in zip(stages, envs[1:], strict=True)},
    )
    write_project(root, spec)


def timed(action: Callable[[], object], repeat: int) -> Timing:
    """Median wall and CPU seconds (CPU time is what a busy shared machine cannot inflate)."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return Timing(statistics.median(walls), statistics.median(cpus))


def audit(root: Path, images: list[str], stages: int) -> None:
    """One audit-deps run; SystemExit unless it passes with exactly the planted findings."""
    with chdir(root):
        code = cli.main(["audit-deps", *images, "--format", "json", "--output", "report.json"])
    report = json.loads((root / "report.json").read_text())
    found = Counter(
        (finding["rule"], finding["severity"])
        for section in report["sections"]
        for finding in section["findings"]
    )
    per_stage = CHANGES_PER_STAGE // 2
    expected = Counter(
        {
            ("upgraded", "info"): per_stage * stages * len(images),
            ("added", "info"): per_stage * stages * len(images),
        }
    )
    if code != 0 or found != expected:
        raise SystemExit(f"audit-deps exited {code} with {dict(found)}, expected {dict(expected)}")


def floor(root: Path, images: list[str]) -> None:
    """The bare reference: read and parse every file audit-deps reads, standard library only."""
    for image in images:
        folder = root / "images" / image
        tomllib.loads((folder / "image.toml").read_text())
        for requirements in sorted((folder / "requirements").iterdir()):
            requirements.read_text().splitlines()
        locks = root / "locks" / image
        json.loads((locks / "base.json").read_bytes())
        for lock in sorted(locks.glob("*.txt")):
            [line.split("==", 1) for line in lock.read_text().splitlines()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--recipes", type=int, default=50)
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--packages", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    os.environ[commands.QUIET_ENV] = "1"
    envs = stage_versions(options.packages, options.stages)
    counts = sorted({10, 25, options.recipes} & set(range(1, options.recipes + 1)))
    results: dict[int, tuple[Timing, Timing]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-audit-deps-") as folder:
        root = Path(folder)
        start = time.perf_counter()
        images = [f"recipe-{n:03d}" for n in range(options.recipes)]
        for image in images:
            write_recipe(root, image, envs)
        print(
            f"generated {options.recipes} recipes x {options.stages} stages x "
            f"{len(envs[-1])} packages in {time.perf_counter() - start:.1f}s; "
            f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}"
        )
        for count in counts:
            chosen = images[:count]
            project = timed(partial(audit, root, chosen, options.stages), options.repeat)
            bare = timed(partial(floor, root, chosen), options.repeat)
            results[count] = project, bare
            print(
                f"audit-deps over {count:3d} recipes: {project.wall:6.2f}s wall, "
                f"{project.cpu:6.2f}s CPU | floor (stdlib read+parse) {bare.wall:6.3f}s wall | "
                f"{project.wall / bare.wall:5.1f}x; passed with the planted findings"
            )
    return report_margin(results, counts)


def report_margin(results: dict[int, tuple[Timing, Timing]], counts: list[int]) -> int:
    """Print the cost of one more recipe (slope, smallest to largest run) against the target."""
    low, high = counts[0], counts[-1]
    if low == high:
        wall = results[low][0].wall / low
        cpu = results[low][0].cpu / low
        bare = results[low][1].wall / low
    else:
        wall = (results[high][0].wall - results[low][0].wall) / (high - low)
        cpu = (results[high][0].cpu - results[low][0].cpu) / (high - low)
        bare = (results[high][1].wall - results[low][1].wall) / (high - low)
    verdict = "OK" if cpu * 1000 <= TARGET_MS else "SLOW"  # CPU: what sharing cannot inflate
    print(
        f"margin ({low} -> {high} recipes): {wall * 1000:.1f} ms wall, {cpu * 1000:.1f} ms CPU "
        f"per recipe vs floor {bare * 1000:.1f} ms; target <= {TARGET_MS:.0f} ms -> {verdict}"
    )
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    raise SystemExit(main())
