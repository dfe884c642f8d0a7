"""Benchmark: the pull-request gate between two commits, on one image and on a fleet of images.

Usage: ``python benchmarks/bench_gate.py [--images 200] [--stages 8] [--packages 300]
[--asks 30] [--repeat 3]``. Builds two git repositories in a temporary folder, one image and
``--images`` images, every image with its own bytes. An image is a base snapshot of 100
distributions and 8 stages, each one pip layer whose requirements file asks for 30 packages:
v1 installs a stack of 200 more (as a vLLM layer does), every stage then upgrades 3 packages
and adds 3. Locks pin what their layer moves, as the project's locks do (``--whole-locks``:
the whole environment each layer leaves, 300+ pins per lock, the heavier file to read). All of
it is fresh (written with the lock helpers) and committed on ``main``. The pull-request commit
changes every image (a fleet-wide bump, the gate's worst case): per stage it upgrades 4 more
packages and adds one, and in v1 it downgrades one under a waiver it adds; the locks are
recompiled. Both commits are packed, as a clone of them is.

Every timed run must pass (exit 0) with exactly the findings the generator planted, or the
benchmark stops with exit 1. Printed side by side, from the same run:

- one image: the gate in-process and as the command (``python -m audit gate``, interpreter
  start included), against the README's target (< 1 s on 2 cores);
- the fleet: the command's wall and CPU time and its peak memory (its own and its git
  children's maximum resident set) against issue 22's targets (<= 5 s, <= 200 MB), beside the
  bare reference:
  git alone reading every file the gate reads at both refs (one ``git ls-tree`` and one
  ``git cat-file --batch`` per ref).

Exit 1 when a target is missed; times are judged on CPU time (the gate runs on one core, so
on a quiet machine its wall time is about its CPU time, and on a shared one only CPU time
means anything).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import date
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_common import as_installed  # noqa: E402

from audit.gate.compare import gate_result  # noqa: E402
from audit.gate.markdown import gate_markdown  # noqa: E402
from audit.host import process as commands  # noqa: E402
from audit.project.gitsource import GitSource  # noqa: E402
from tests.support.project import (  # noqa: E402
    ProjectSpec,
    lock_body,
    pip_recipe_toml,
    system_base,
    write_project,
)

ONE_IMAGE_SECONDS = 1.0  # the README's target: the gate on 8 stages x 300 packages
FLEET_SECONDS = 5.0  # issue 22: the gate over 200 recipes
FLEET_MIB = 200.0
CHANGES = 3  # packages each stage upgrades, and as many it adds, on main
PROPOSED = 4  # packages each stage upgrades more in the pull request (and one it adds)
DOWNGRADED = "pkg-0005"  # what the pull request downgrades in v1, under a waiver
GIT_IDENTITY = ("-c", "user.name=bench", "-c", "user.email=bench@example.com")
Pins = dict[str, str]


@dataclass(frozen=True)
class Shape:
    """What one generated repository holds."""

    images: int
    stages: int
    packages: int
    asks: int  # lines of each stage's requirements file
    whole: bool  # locks pin the whole environment, not only what their layer moves

    def names(self) -> list[str]:
        return [f"img-{n:03d}" for n in range(self.images)]

    def expected(self) -> Counter[tuple[str, str]]:
        """The findings the proposal plants: per image, every upgrade and addition once (at the
        first stage it shows up), the waived downgrade, and the waiver it adds."""
        per_image = {
            ("upgraded", "info"): PROPOSED * self.stages,
            ("added", "info"): self.stages,
            ("downgraded", "warning"): 1,  # waived: a warning with its reason
            ("waiver-added", "warning"): 1,
        }
        return Counter({key: count * self.images for key, count in per_image.items()})


@dataclass(frozen=True)
class Run:
    """One command run: wall and CPU seconds (its own and its git children's, user + system;
    what a shared machine cannot inflate) and peak resident memory (MiB)."""

    seconds: float
    cpu: float
    mib: float


def recipe_text(stages: int, waiver: bool) -> str:
    allowed = (
        f'[[policy.waiver]]\npackage = "{DOWNGRADED}"\nfrom = "*"\nto = "0.9"\nstage = "v1"\n'
        'reason = "benchmark"\n'
    )
    return pip_recipe_toml(
        [f"v{n}" for n in range(1, stages + 1)],
        base="example/base:1",
        interpreter="/usr/bin/python3",
        repository="local/bench",
        extra=allowed if waiver else "",
    )


def environments(image: str, shape: Shape, proposed: bool) -> list[Pins]:
    """The environment of the base (index 0) and after each stage, at one ref: the base holds
    a third of the packages, v1 installs the rest (a stack such as vLLM's), every stage then
    upgrades a few and adds a few."""
    stack = {f"pkg-{i:04d}": "1.0" for i in range(shape.packages - shape.stages * CHANGES)}
    current = {name: v for name, v in stack.items() if int(name[4:]) < shape.packages // 3}
    current[f"{image}-marker"] = "1.0"  # no two images share a file
    envs = [dict(current)]
    for stage in range(1, shape.stages + 1):
        current |= stack if stage == 1 else {}
        for k in range(CHANGES):
            current[f"pkg-{10 + stage * 7 + k:04d}"] = f"1.{stage}"
            current[f"new-{stage:02d}-{k}"] = "0.1"
        if proposed:
            for k in range(PROPOSED):
                current[f"pkg-{200 + stage * PROPOSED + k:04d}"] = f"2.{stage}"
            current[f"pr-new-{stage:02d}"] = "0.1"
            if stage == 1:
                current[DOWNGRADED] = "0.9"  # the waived downgrade
        envs.append(dict(current))
    return envs


def lock_pins(before: Pins, after: Pins, whole: bool) -> Pins:
    """What a stage's lock pins: what the layer moves (the project's lock model), or with
    ``whole`` the whole environment it leaves (a resolver's full closure, the heavier file)."""
    return after if whole else {n: v for n, v in after.items() if before.get(n) != v}


def asks(pins: Pins, count: int) -> str:
    """A stage's requirements file: ``count`` of its packages, ``>=`` the locked version, as a
    real ``.in`` names a stack's top level and its lock the closure."""
    return "".join(f"{name}>={pins[name]}\n" for name in sorted(pins)[-count:])


def write_image(root: Path, image: str, shape: Shape, proposed: bool) -> None:
    envs = environments(image, shape, proposed)
    stages = {f"v{n}": env for n, env in enumerate(envs[1:], start=1)}
    pins = [lock_pins(old, new, shape.whole) for old, new in pairwise(envs)]
    spec = ProjectSpec(
        image,
        recipe_text(shape.stages, waiver=proposed),
        {f"{stage}.in": asks(env, shape.asks) for stage, env in stages.items()},
        system_base(envs[0]),
        {stage: lock_body(moved) for stage, moved in zip(stages, pins, strict=True)},
    )
    write_project(root, spec)


def git(root: Path, *args: str, stdin: str | None = None) -> str:
    return commands.run(["git", "-C", str(root), *GIT_IDENTITY, *args], input_text=stdin).stdout


def make_repository(root: Path, shape: Shape) -> None:
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    for proposed, branch in ((False, "main"), (True, "pr")):
        if proposed:
            git(root, "checkout", "-q", "-b", branch)
        for image in shape.names():
            write_image(root, image, shape, proposed)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", branch)
    # packed, as a clone is (CI checks a pull request out with `git fetch`, which writes a pack);
    # freshly committed loose objects cost git ~3x the CPU to read, none of it the gate's
    git(root, "repack", "-a", "-d", "-q")


def check(found: Counter[tuple[str, str]], code: int, shape: Shape, what: str) -> None:
    """Stop the benchmark unless the run passed with exactly the planted findings."""
    if code != 0 or found != shape.expected():
        raise SystemExit(
            f"{what}: exit {code}, findings {dict(found)}; expected exit 0 and "
            f"{dict(shape.expected())}"
        )


def in_process(root: Path, shape: Shape) -> float:
    """The gate's whole work without the interpreter's start: git reads to Markdown."""
    start = time.perf_counter()
    base = GitSource(root, "main")  # the head shares its blobs and memo, as gate_refs does
    result = gate_result(base, GitSource(root, "pr", share=base), today=date.today())
    gate_markdown(result.report, result.matrices)
    elapsed = time.perf_counter() - start
    found = Counter((f.rule, f.severity) for f in result.report.findings)
    check(found, 1 if result.report.failed else 0, shape, "gate in-process")
    return elapsed


def command(root: Path, shape: Shape, out: Path) -> Run:
    """``python -m audit gate`` as a user runs it, its wall time and peak memory measured."""
    report = out / "gate.json"
    argv = [sys.executable, "-m", "audit", "gate", "--base", "main", "--head", "pr"]
    argv += ["--repo", str(root), "--markdown", str(out / "gate.md"), "--json", str(report)]
    env = as_installed({**os.environ, commands.QUIET_ENV: "1", "PYTHONPATH": str(ROOT)})
    env.pop("GITHUB_STEP_SUMMARY", None)
    start = time.perf_counter()
    # Popen and wait4, not the process wrapper: only wait4 reports the child's peak memory.
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert child.stderr is not None
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - start
    if child.returncode not in (0, 1):
        raise SystemExit(f"gate exited {child.returncode}:\n{errors.decode()[-2000:]}")
    document = json.loads(report.read_text())
    found = Counter(
        (f["rule"], f["severity"]) for section in document["sections"] for f in section["findings"]
    )
    check(found, child.returncode, shape, "python -m audit gate")
    return Run(elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)  # KiB


def bare_git(root: Path) -> float:
    """The reference: git alone lists both refs and prints every blob the gate reads."""
    start = time.perf_counter()
    for ref in ("main", "pr"):
        listing = git(root, "ls-tree", "-r", "--full-tree", ref, "--", "images", "locks")
        oids = [line.split()[2] for line in listing.splitlines()]
        git(root, "cat-file", "--batch", stdin="\n".join(oids) + "\n")
    return time.perf_counter() - start


def median_run(runs: list[Run]) -> Run:
    return Run(
        statistics.median(r.seconds for r in runs),
        statistics.median(r.cpu for r in runs),
        max(r.mib for r in runs),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--packages", type=int, default=300)
    parser.add_argument("--asks", type=int, default=30, help="lines per requirements file")
    parser.add_argument(
        "--whole-locks",
        action="store_true",
        help="every lock pins the whole environment (300 pins), not only what its layer moves",
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ[commands.QUIET_ENV] = "1"
    one = Shape(1, args.stages, args.packages, args.asks, args.whole_locks)
    fleet = Shape(args.images, args.stages, args.packages, args.asks, args.whole_locks)
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as folder:
        tmp = Path(folder)
        start = time.perf_counter()
        make_repository(tmp / "one", one)
        make_repository(tmp / "fleet", fleet)
        made = time.perf_counter() - start
        print(f"gate: images x {args.stages} stages x {args.packages} packages, generated in "
              f"{made:.1f}s; cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")  # fmt: skip
        inside = statistics.median(in_process(tmp / "one", one) for _ in range(args.repeat))
        command(tmp / "one", one, tmp)  # untimed: writes the byte-code the timed runs use
        small = median_run([command(tmp / "one", one, tmp) for _ in range(args.repeat)])
        big = median_run([command(tmp / "fleet", fleet, tmp) for _ in range(args.repeat)])
        bare = statistics.median(bare_git(tmp / "fleet") for _ in range(args.repeat))
    return report(args, inside, small, big, bare)


def report(args: argparse.Namespace, inside: float, small: Run, big: Run, bare: float) -> int:
    """Print every figure beside its reference and target; 0 when every target is met.

    Targets are judged on CPU time: the gate runs on one core, so on a quiet machine its wall
    time is its CPU time, and on a shared one only the CPU time means anything.
    """
    one_ok = small.cpu < ONE_IMAGE_SECONDS
    fleet_ok = big.cpu <= FLEET_SECONDS and big.mib <= FLEET_MIB
    print(f"  medians of {args.repeat} runs; every run passed with the planted findings")
    print(
        f"  1 image:    {small.seconds:6.2f} s wall, {small.cpu:6.2f} s CPU command "
        f"({inside * 1000:.0f} ms wall in-process), {small.mib:.0f} MiB; target < "
        f"{ONE_IMAGE_SECONDS:.0f} s -> {'OK' if one_ok else 'SLOW'}"
    )
    print(
        f"  {args.images} images: {big.seconds:6.2f} s wall, {big.cpu:6.2f} s CPU command, "
        f"{big.mib:.0f} MiB peak | bare git reading the same files {bare:.2f} s wall "
        f"({big.cpu / bare:.1f}x); target <= {FLEET_SECONDS:.0f} s and <= {FLEET_MIB:.0f} MiB "
        f"-> {'OK' if fleet_ok else 'MISSED'}"
    )
    return 0 if one_ok and fleet_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
