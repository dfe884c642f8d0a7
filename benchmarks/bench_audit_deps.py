"""Benchmark: audit-deps over 50 recipes of 8 stages with 300 packages each, and its growth.

Generates a project tree in a temporary folder (recipes, requirements, base snapshots and fresh
locks written through the lock module's writers), then times ``python -m audit audit-deps``
(in-process, JSON report to a file) over the first 10, 25 and 50 recipes. Target: a few seconds
for 50 on a 2-core machine, growing linearly.

    python benchmarks/bench_audit_deps.py [--recipes 50] [--stages 8] [--packages 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import chdir
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.cli import main as cli
from audit.engines import process as commands
from audit.plan.lockfile import forget_parsed
from tests.support.project import (
    ProjectSpec,
    lock_body,
    pip_recipe_toml,
    system_base,
    write_project,
)

SITE = "/usr/local/lib/python3.12/dist-packages"
CHANGES_PER_STAGE = 6  # packages each stage upgrades or adds; the rest are re-pinned as is

POLICY = """
[policy]
require = ["pkg-0001>=1.0"]
forbid = ["chardet"]

[policy.lockstep]
group = ["pkg-0002", "pkg-0003"]
"""


def recipe_toml(stages: int) -> str:
    names = [f"v{n}" for n in range(1, stages + 1)]
    return (
        pip_recipe_toml(
            names,
            base="example/base:1",
            platform="linux/arm64",
            cuda="cu130",
            repository="local/bench",
        )
        + POLICY
    )


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
    """Recipe ``image``: stage ``vN`` asks for one new package; its lock holds ``envs[N]``."""
    markers = {"platform_machine": "aarch64"}
    base = system_base(envs[0], site=SITE, python="3.12.3", markers=markers)
    stages = [f"v{n}" for n in range(1, len(envs))]
    spec = ProjectSpec(
        image,
        recipe_toml(len(stages)),
        {f"v{n}.in": f"new-{n:02d}-0\n" for n in range(1, len(envs))},
        base,
        {stage: lock_body(env) for stage, env in zip(stages, envs[1:], strict=True)},
    )
    write_project(root, spec)


def timed(action: Callable[[], int], repeat: int) -> tuple[float, float, int]:
    """Median wall and CPU seconds (CPU time is what a busy shared machine cannot inflate)."""
    walls, cpus, code = [], [], 0
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        code = action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), code


def audit(root: Path, images: list[str]) -> int:
    forget_parsed()  # every run parses every lock, as one command does
    with chdir(root):
        return cli.main(["audit-deps", *images, "--format", "json", "--output", "report.json"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", type=int, default=50)
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--packages", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    os.environ[commands.QUIET_ENV] = "1"
    envs = stage_versions(options.packages, options.stages)
    with tempfile.TemporaryDirectory(prefix="bench-audit-deps-") as folder:
        root = Path(folder)
        start = time.perf_counter()
        images = [f"recipe-{n:03d}" for n in range(options.recipes)]
        for image in images:
            write_recipe(root, image, envs)
        print(
            f"generated {options.recipes} recipes x {options.stages} stages x "
            f"{len(envs[-1])} packages in {time.perf_counter() - start:.1f}s"
        )
        for count in sorted({10, 25, options.recipes} & set(range(1, options.recipes + 1))):
            wall, cpu, code = timed(partial(audit, root, images[:count]), options.repeat)
            print(
                f"audit-deps over {count:3d} recipes: {wall:6.2f}s wall, {cpu:6.2f}s CPU "
                f"({cpu / count * 1000:.0f} ms CPU/recipe, exit {code})"
            )


if __name__ == "__main__":
    main()
