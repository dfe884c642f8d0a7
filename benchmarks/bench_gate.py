"""The pull-request gate on 1 image x 8 stages x 300 locked packages, between two commits.

Usage: ``python benchmarks/bench_gate.py [--stages N] [--packages N] [--repeat K]``. Builds a
git repository in a temporary folder: a base snapshot of 300 distributions and one lock of 300
pins per stage (written with the lock helpers, so every lock is fresh), committed on ``main``;
then a pull-request commit that upgrades, adds and (with a waiver) downgrades packages in every
stage and recompiles the locks. Times the gate in-process (git reads, prediction, policy,
the change view's Markdown and HTML) and as the whole command (``python -m audit gate``,
interpreter start included), K runs each, and prints the medians. Exit 1 when the command's
median is 1 s or more (the target in DESIGN.md, on a 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit.engines import process as commands  # noqa: E402
from audit.engines.gitsource import GitSource  # noqa: E402
from audit.plan.change_render import gate_html  # noqa: E402
from audit.plan.gate import gate_result  # noqa: E402
from audit.plan.gate_markdown import gate_markdown  # noqa: E402
from audit.plan.lockfile import forget_parsed  # noqa: E402
from tests.support.project import (  # noqa: E402
    ProjectSpec,
    pip_recipe_toml,
    system_base,
    write_project,
)

TARGET_SECONDS = 1.0
IMAGE = "bench"
SHARED = 50  # packages every stage re-pins, as real stages re-pin torch, numpy, nccl...
GIT_IDENTITY = ("-c", "user.name=bench", "-c", "user.email=bench@example.com")
Pins = dict[str, str]


def recipe_text(stages: int, waiver: bool) -> str:
    """One waiver per stage: an unscoped waiver allows its change in the first stage only."""
    names = [f"v{n}" for n in range(1, stages + 1)]
    allowed = "".join(
        f'[[policy.waiver]]\npackage = "shared-000"\nfrom = "*"\nto = "0.9.0"\n'
        f'stage = "{name}"\nreason = "benchmark"\n'
        for name in names
    )
    return pip_recipe_toml(
        names,
        base="example/base:1",
        interpreter="/usr/bin/python3",
        repository="local/bench",
        extra=allowed if waiver else "",
    )


def stage_pins(stage: int, packages: int, proposed: bool) -> Pins:
    """300 pins: the shared packages plus the stage's own; the proposal moves some of each."""
    pins = {f"shared-{i:03d}": f"1.{stage}.0" for i in range(SHARED)}
    pins |= {f"s{stage}-pkg-{i:03d}": "1.0.0" for i in range(packages - SHARED)}
    if proposed:
        pins |= {f"s{stage}-pkg-{i:03d}": "1.1.0" for i in range(0, packages - SHARED, 7)}
        pins[f"s{stage}-new"] = "0.1.0"
        pins["shared-000"] = "0.9.0"  # a waived downgrade
    return pins


def write_repository_project(root: Path, stages: int, packages: int, proposed: bool) -> None:
    base = system_base({f"base-{i:03d}": "2.0.0" for i in range(packages)})
    pins = {f"v{n}": stage_pins(n, packages, proposed) for n in range(1, stages + 1)}
    recipe = recipe_text(stages, waiver=proposed)
    write_project(root, ProjectSpec.locked(IMAGE, recipe, base, pins, operator=">="))


def git(root: Path, *args: str) -> None:
    commands.run(["git", "-C", str(root), *GIT_IDENTITY, *args])


def make_repository(root: Path, stages: int, packages: int) -> None:
    git(root, "init", "-q", "-b", "main")
    write_repository_project(root, stages, packages, proposed=False)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "main")
    git(root, "checkout", "-q", "-b", "pr")
    write_repository_project(root, stages, packages, proposed=True)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "pull request")


def time_in_process(root: Path) -> tuple[float, int, bool]:
    forget_parsed()  # every run parses every lock, as one command does
    start = time.perf_counter()
    result = gate_result(GitSource(root, "main"), GitSource(root, "pr"), today=date.today())
    report = result.report
    gate_markdown(report, result.matrices, result.views)  # the change view, as the command
    gate_html(report, result.views, [m.changes for m in result.matrices if m.changes])
    return time.perf_counter() - start, len(report.findings), report.failed


def time_command(root: Path, markdown: Path) -> float:
    argv = [sys.executable, "-m", "audit", "gate", "--base", "main", "--head", "pr"]
    env = {**os.environ, commands.QUIET_ENV: "1", "PYTHONPATH": str(ROOT)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    start = time.perf_counter()
    done = commands.run(
        [*argv, "--repo", str(root), "--markdown", str(markdown), "--format", "json"],
        env=env,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"gate exited {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--packages", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ[commands.QUIET_ENV] = "1"
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as folder:
        root = Path(folder) / "repo"
        root.mkdir()
        make_repository(root, args.stages, args.packages)
        runs = [time_in_process(root) for _ in range(args.repeat)]
        command = [time_command(root, Path(folder) / "gate.md") for _ in range(args.repeat)]
    seconds, findings, failed = statistics.median(r[0] for r in runs), runs[0][1], runs[0][2]
    wall = statistics.median(command)
    load = os.getloadavg()[0]  # other work on the machine skews every number below
    print(f"gate: 1 image x {args.stages} stages x {args.packages} packages")
    print(f"  cpus: {os.cpu_count()}, load average (1 min): {load:.2f}")
    print(f"  findings: {findings} (verdict: {'fail' if failed else 'pass'})")
    print(f"  in-process median: {seconds * 1000:.0f} ms over {args.repeat} runs")
    print(f"  command median:    {wall * 1000:.0f} ms (python -m audit gate, start-up included)")
    print(
        f"  target: < {TARGET_SECONDS * 1000:.0f} ms -> {'OK' if wall < TARGET_SECONDS else 'SLOW'}"
    )
    return 0 if wall < TARGET_SECONDS else 1


if __name__ == "__main__":
    raise SystemExit(main())
