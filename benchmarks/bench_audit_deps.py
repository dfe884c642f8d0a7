"""Benchmark: audit-deps over 50 recipes of 8 stages with 300 packages each, and its growth.

Generates a project tree in a temporary folder (recipes, requirements, base snapshots and fresh
locks written through the lock module's writers), then times ``python -m audit audit-deps``
(in-process, JSON report to a file) over the first 10, 25 and 50 recipes. Target: a few seconds
for 50 on a 2-core machine, growing linearly.

    python benchmarks/bench_audit_deps.py [--recipes 50] [--stages 8] [--packages 300]
"""

from __future__ import annotations

import argparse
import hashlib
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

from audit import cli, commands
from audit.lock import RESOLVER, layer_inputs, pip_steps
from audit.lockfile import (
    BaseRecord,
    base_relpath,
    forget_parsed,
    render_base,
    render_lock,
    sha256,
)
from audit.recipe_parse import load_recipe
from audit.snapshot import Distribution, Environment
from audit.sources import DirectorySource

INTERPRETER = "/usr/bin/python3"
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
    head = (
        '[image]\nbase = "example/base:1"\nplatform = "linux/arm64"\ncuda = "cu130"\n'
        f'interpreters = ["{INTERPRETER}"]\nrepository = "local/bench"\n'
    )
    body = "".join(
        f'\n[[stage]]\nname = "v{n}"\n  [[stage.layer]]\n  pip = "requirements/v{n}.in"\n'
        for n in range(1, stages + 1)
    )
    return head + body + POLICY


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


def lock_body(pins: dict[str, str]) -> str:
    lines = []
    for name, version in sorted(pins.items()):
        digest = hashlib.sha256(f"{name}-{version}".encode()).hexdigest()
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{digest}\n")
    return "".join(lines)


def base_text(packages: dict[str, str]) -> str:
    dists = tuple(
        Distribution(name, version, SITE, "pip", "sha256:" + "0" * 64, name)
        for name, version in sorted(packages.items())
    )
    env = Environment(INTERPRETER, "3.12.3", {"platform_machine": "aarch64"}, (SITE,), dists)
    return render_base(BaseRecord("example/base:1", "sha256:" + "1" * 64, None, (env,)))


def write_recipe(root: Path, image: str, envs: list[dict[str, str]]) -> None:
    folder = root / "images" / image / "requirements"
    folder.mkdir(parents=True)
    (folder.parent / "image.toml").write_text(recipe_toml(len(envs) - 1))
    for n in range(1, len(envs)):
        (folder / f"v{n}.in").write_text(f"new-{n:02d}-0\n")
    source = DirectorySource(root)
    recipe = load_recipe(source, image)
    base = base_text(envs[0])
    _write(root / base_relpath(recipe), base)
    earlier: dict[str, str] = {}
    for n, step in enumerate(pip_steps(recipe), start=1):
        inputs = layer_inputs(source, recipe, step, sha256(base.encode()), earlier)
        body = lock_body(envs[n])
        _write(root / inputs.relpath, render_lock(image, step, RESOLVER, inputs.digests, body))
        earlier[step.slug] = sha256(body.encode())


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


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
