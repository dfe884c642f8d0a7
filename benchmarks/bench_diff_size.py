"""``diff`` of two big snapshot files: wall time and peak memory, beside the floor.

Usage: ``python benchmarks/bench_diff_size.py [--dists N …]``. For each N, writes two sealed
snapshot files of N distributions (each with ~0.5 KB of Requires-Dist like a real one; the
second file upgrades every tenth and downgrades every hundredth), then runs, side by side,
``python -m audit diff BEFORE AFTER --format json --output …`` and the floor: a bare
``json.load`` of both files in a fresh interpreter. Prints each one's wall time and peak RSS
and their ratios, and the file size, for the README's numbers on ``SNAPSHOT_LIMIT``. Exit 1
when a diff that should run does not exit 1 (downgrades found), or a file over the limit is
not refused with exit 2.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit.history.snapshot import (  # noqa: E402
    SNAPSHOT_LIMIT,
    Distribution,
    Environment,
    dump_snapshot,
)

SITE = "/usr/local/lib/python3.12/site-packages"
REQUIRES = tuple(f"dependency-{n}>=1.{n}; python_version >= '3.9'" for n in range(10))


def environment(count: int, moved: bool) -> Environment:
    dists = []
    for n in range(count):
        version = f"1.{n % 50}.0"
        if moved and n % 10 == 0:
            version = f"2.{n % 50}.0"
        if moved and n % 100 == 1:
            version = "0.1.0"
        dists.append(
            Distribution(
                f"package-{n}",
                version,
                SITE,
                "pip",
                f"sha256:{n:064x}",
                f"package-{n}",
                requires_dist=REQUIRES,
            )
        )
    return Environment("/usr/bin/python3", "3.12.3", {}, (SITE,), tuple(dists))


def timed(argv: list[str]) -> tuple[int, float, float]:
    """(exit code, seconds, peak RSS in MiB) of one child process."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    return os.waitstatus_to_exitcode(status), seconds, usage.ru_maxrss / 1024


def measure(count: int, folder: Path) -> bool:
    before, after = folder / f"before-{count}.json", folder / f"after-{count}.json"
    # written by a child, so this process stays small: a child's peak RSS counts the pages it
    # shares with its parent at fork
    write = [sys.executable, __file__, "--write", str(count), str(before), str(after)]
    subprocess.run(write, check=True)
    size = after.stat().st_size / 2**20
    output = folder / "report.json"
    diff = [sys.executable, "-m", "audit", "diff", str(before), str(after), "--format", "json",
            "--output", str(output)]  # fmt: skip
    floor = [sys.executable, "-c", "import json,sys; [json.load(open(p)) for p in sys.argv[1:]]",
             str(before), str(after)]  # fmt: skip
    code, seconds, rss = timed(diff)
    _, floor_seconds, floor_rss = timed(floor)
    expected = 2 if size * 2**20 > SNAPSHOT_LIMIT else 1
    print(
        f"{count:>7} dists  {size:7.1f} MiB/file  diff: exit {code} {seconds:6.2f} s "
        f"{rss:7.0f} MiB  |  json.load floor: {floor_seconds:5.2f} s {floor_rss:6.0f} MiB  |  "
        f"ratio {seconds / floor_seconds:4.1f}x time, {rss / floor_rss:4.1f}x memory"
    )
    return code == expected


def write_pair(count: int, before: Path, after: Path) -> None:
    before.write_bytes(dump_snapshot([environment(count, moved=False)]))
    after.write_bytes(dump_snapshot([environment(count, moved=True)]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dists", type=int, nargs="+", default=[200, 6_000, 45_000, 60_000])
    parser.add_argument(
        "--write", nargs=3, metavar=("N", "BEFORE", "AFTER"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.write:
        write_pair(int(args.write[0]), Path(args.write[1]), Path(args.write[2]))
        return 0
    print(f"SNAPSHOT_LIMIT = {SNAPSHOT_LIMIT // 2**20} MiB")
    with tempfile.TemporaryDirectory(prefix="bench-diff-") as folder:
        results = [measure(count, Path(folder)) for count in args.dists]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
