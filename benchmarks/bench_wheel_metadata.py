"""Metadata without payloads, on the real index: bytes and time per pin vs the wheel's size.

Usage: ``python benchmarks/bench_wheel_metadata.py [--index URL] [--repeat K] [PIN ...]``
(default pins: ``torch==2.14.0``, ``nvidia-nccl-cu13==2.30.7``, ``vllm==0.33.0``; target
linux/arm64, CPython 3.12, glibc 2.39). Prints, per pin, the median time of K reads (no cache),
the requests and bytes the reads took, how the metadata was read (PEP 658 file, range
requests, whole download) and the wheel's size from the index, side by side. Exit 1 when a
read fails or downloads more than 1 % of its wheel (the point of reading without payloads).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit.index import wheel_metadata as wm  # noqa: E402

PINS = ["torch==2.14.0", "nvidia-nccl-cu13==2.30.7", "vllm==0.33.0"]
MAX_FRACTION = 0.01


def measure(index: str, pin: str, repeat: int) -> tuple[float, wm.FetchStats, wm.Metadata]:
    name, _, version = pin.partition("==")
    tags = wm.target_tags("linux/arm64", "3.12", "2.39")
    times, stats, meta = [], wm.FetchStats(), None
    for _ in range(repeat):
        stats = wm.FetchStats()
        start = time.perf_counter()
        meta = wm.fetch_metadata(index, name, version, tags=tags, stats=stats)
        times.append(time.perf_counter() - start)
    assert meta is not None and meta.version == version, pin
    return statistics.median(times), stats, meta


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default="https://pypi.org/simple")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("pins", nargs="*", default=PINS)
    args = parser.parse_args()
    failed = 0
    print(
        f"{'pin':26} {'median s':>8} {'requests':>8} {'MB read':>8} {'of which page':>13} "
        f"{'how':>6} {'wheel MB':>9}"
    )
    for pin in args.pins:
        seconds, stats, meta = measure(args.index, pin, args.repeat)
        size, page = meta.file.size, _page_bytes(args.index, pin)
        print(
            f"{pin:26} {seconds:8.2f} {stats.requests:8d} {stats.bytes_downloaded / 1e6:8.2f} "
            f"{page / 1e6:13.2f} {meta.how:>6} {size / 1e6:9.1f}"
        )
        wheel_part = stats.bytes_downloaded - page
        if size and wheel_part > MAX_FRACTION * size:
            print(f"  FAIL: {wheel_part} bytes of a {size}-byte wheel")
            failed += 1
    return 1 if failed else 0


def _page_bytes(index: str, pin: str) -> int:
    """What the project page alone costs (it is not part of the wheel)."""
    stats = wm.FetchStats()
    wm.project_files(index, pin.partition("==")[0], context=wm.tls_context(), stats=stats)
    return stats.bytes_downloaded


if __name__ == "__main__":
    sys.exit(main())
