"""What the build guard costs: guarded vs ``--no-guard`` builds of one recipe, side by side.

Usage: ``python benchmarks/bench_guard.py [IMAGE | RECIPE_DIR] [--rounds N] [--warm-cache]
[--limit PCT] [--compile-locks]`` (default: demo, 4 rounds, 3 %). IMAGE is a recipe of this
checkout (``images/IMAGE``); RECIPE_DIR is a benchmark recipe folder such as
``benchmarks/recipes/sci-stack`` (``image.toml``, ``requirements/``, ``locks/``), built from a
scratch project under ``build/bench/<name>/`` so that it never mixes with the user's images;
``--compile-locks`` (re)compiles its locks and base snapshot with ``python -m audit lock`` and
copies them back into ``RECIPE_DIR/locks``. Every build is a full
``python -m audit build IMAGE --no-cache`` (each layer runs again), timed from start to exit:
the guarded build also pays for extracting the trail, writing its reports and moving tags,
which the unguarded one skips. Before every
build pip's download cache mount is emptied, so each build downloads its wheels like a first
build does (``--warm-cache`` keeps the cache instead, to see the cost against a faster build).
Rounds alternate the order (guarded first, then unguarded first) so that neither side always
runs first; one untimed build warms the base image and the page cache. Prints every wall time,
both medians and their ratio; exits 1 when the median overhead exceeds the limit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKER = os.environ.get("LAYER_AUDIT_DOCKER", "/usr/bin/docker")
# pip layers mount this cache (audit.render.plan.PIP_CACHE_MOUNT; its id defaults to the target).
PIP_CACHE = "/root/.cache/pip"


def project_for(target: str) -> tuple[Path, str]:
    """(project root, image name): this checkout, or a scratch project around a recipe folder."""
    folder = Path(target)
    if not (folder / "image.toml").is_file():
        return ROOT, target
    name = folder.resolve().name
    project = ROOT / "build" / "bench" / name
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(folder, project / "images" / name, ignore=shutil.ignore_patterns("locks"))
    if (folder / "locks").is_dir():
        shutil.copytree(folder / "locks", project / "locks" / name)
    shutil.copytree(ROOT / "templates", project / "templates")  # the recipe renders with them
    return project, name


def compile_locks(project: Path, image: str, folder: Path) -> None:
    """``python -m audit lock IMAGE --record-base`` in the scratch project, then copy back."""
    argv = [sys.executable, "-m", "audit", "lock", image, "--record-base"]
    done = subprocess.run(argv, cwd=project, env=audit_env(), check=False)
    if done.returncode != 0:
        sys.exit(f"lock failed ({done.returncode})")
    dot_files = shutil.ignore_patterns(".*")  # the lock command's own lock file
    shutil.copytree(
        project / "locks" / image, folder / "locks", ignore=dot_files, dirs_exist_ok=True
    )


def audit_env() -> dict[str, str]:
    """This checkout's ``audit`` package, wherever the project being built lives."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path)


def base_image(project: Path, image: str) -> str:
    with (project / "images" / image / "image.toml").open("rb") as handle:
        return str(tomllib.load(handle)["image"]["base"])


def empty_pip_cache(base: str) -> None:
    """Empty the BuildKit cache mount pip layers use, through a throwaway build of ``base``."""
    dockerfile = (
        f"FROM {base}\nRUN --mount=type=cache,target={PIP_CACHE} "
        f"find {PIP_CACHE} -mindepth 1 -delete\n"
    )
    argv = [DOCKER, "build", "--no-cache", "--output", "type=tar,dest=/dev/null", "-"]
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    done = subprocess.run(
        argv, input=dockerfile, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"cannot empty pip's cache mount:\n{done.stderr[-2000:]}")


def timed_build(project: Path, image: str, guarded: bool) -> float:
    argv = [sys.executable, "-m", "audit", "build", image, "--no-cache"]
    if not guarded:
        argv.append("--no-guard")
    start = time.perf_counter()
    done = subprocess.run(
        argv, cwd=project, env=audit_env(), capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"build failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return elapsed


def one_build(project: Path, image: str, guarded: bool, cold: bool) -> float:
    if cold:
        empty_pip_cache(base_image(project, image))
    return timed_build(project, image, guarded)


def measure(project: Path, image: str, rounds: int, cold: bool) -> tuple[list[float], list[float]]:
    guarded: list[float] = []
    unguarded: list[float] = []
    one_build(project, image, guarded=True, cold=cold)  # untimed: base image, page cache warm
    for index in range(rounds):
        order = (True, False) if index % 2 == 0 else (False, True)
        for with_guard in order:
            seconds = one_build(project, image, with_guard, cold)
            (guarded if with_guard else unguarded).append(seconds)
            label = "guarded" if with_guard else "no-guard"
            print(f"round {index + 1}: {label:8} {seconds:7.2f} s", flush=True)
    return guarded, unguarded


def report(guarded: list[float], unguarded: list[float], limit: float) -> float:
    with_guard, without = statistics.median(guarded), statistics.median(unguarded)
    overhead = 100.0 * (with_guard - without) / without
    print(f"{'':10}{'median':>10}{'min':>10}{'max':>10}")
    for name, values in (("guarded", guarded), ("no-guard", unguarded)):
        print(f"{name:10}{statistics.median(values):10.2f}{min(values):10.2f}{max(values):10.2f}")
    print(
        f"guard overhead: {with_guard - without:+.2f} s, ratio {with_guard / without:.3f} "
        f"({overhead:+.1f} %, limit {limit} %)"
    )
    return overhead


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("image", nargs="?", default="demo", help="IMAGE or RECIPE_DIR")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warm-cache", action="store_true", help="keep pip's download cache")
    parser.add_argument("--limit", type=float, default=3.0, help="allowed overhead, percent")
    parser.add_argument("--compile-locks", action="store_true", help="lock RECIPE_DIR first")
    args = parser.parse_args()
    project, image = project_for(args.image)
    if args.compile_locks:
        compile_locks(project, image, Path(args.image))
    if args.rounds < 1:
        return 0
    cache = "warm pip cache" if args.warm_cache else "pip cache emptied before every build"
    print(f"{image}: {args.rounds} rounds, --no-cache builds, {cache}", flush=True)
    guarded, unguarded = measure(project, image, args.rounds, cold=not args.warm_cache)
    return 0 if report(guarded, unguarded, args.limit) <= args.limit else 1


if __name__ == "__main__":
    raise SystemExit(main())
