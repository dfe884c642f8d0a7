"""Snapshot script vs ``pip list --format=json`` on one environment of 150+ distributions.

Usage: ``python benchmarks/bench_snapshot.py [--dists N] [--repeat K]``. Builds (once, cached under
``build/bench/``) a virtual environment holding N small generated wheels plus pip, then times both
commands side by side, K runs each, and prints the medians and their ratio. Exit 1 when the
snapshot is less than 15 times faster (the target in the README's Performance table).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import statistics
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit.core.snapshot import SCRIPT_PATH, parse_snapshot  # noqa: E402
from audit.engines import process as commands  # noqa: E402

TARGET_RATIO = 15.0
BENCH_DIR = ROOT / "build" / "bench"
# Hermetic pip: the machine's pip configuration (find-links, constraints) must not leak in.
PIP_ENV = {
    "PATH": os.environ.get("PATH", ""),
    "HOME": os.environ.get("HOME", "/tmp"),
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_INPUT": "1",
    commands.QUIET_ENV: "1",
}


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


# Sized like the median distribution of a real environment: ~5.6 kB METADATA, ~2.7 kB RECORD.
MODULES_PER_WHEEL = 20
CLASSIFIERS = "".join(
    f"Classifier: Programming Language :: Python :: 3.{n}\n" for n in range(9, 14)
)
DESCRIPTION = "".join(
    f"Line {n} of a README that pip list parses and the snapshot skips.\n" for n in range(80)
)


def _wheel_files(name: str, version: str) -> dict[str, bytes]:
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/mod_{n:02d}.py": f'VERSION = "{version}"  # {n}\n'.encode()
        for n in range(MODULES_PER_WHEEL)
    }
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: benchmark\n"
        f"Requires-Python: >=3.9\n{CLASSIFIERS}Description-Content-Type: text/markdown\n\n"
        f"{DESCRIPTION}"
    ).encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    return files


def write_wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal valid pure-Python wheel with a correct RECORD."""
    files = _wheel_files(name, version)
    module = name.replace("-", "_")
    record_name = f"{module}-{version}.dist-info/RECORD"
    lines = [f"{path},{_record_hash(data)},{len(data)}" for path, data in files.items()]
    files[record_name] = ("\n".join([*lines, f"{record_name},,"]) + "\n").encode()
    wheel = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def build_venv(count: int) -> Path:
    """The cached benchmark venv with ``count`` generated distributions (rebuilt if absent)."""
    venv = BENCH_DIR / f"venv-{count}-v2"
    python = venv / "bin" / "python"
    stamp = venv / ".bench-complete"
    if stamp.is_file():
        return python
    wheels = BENCH_DIR / f"wheels-{count}"
    wheels.mkdir(parents=True, exist_ok=True)
    paths = [write_wheel(wheels, f"bench-pkg-{i:03d}", f"1.{i}.0") for i in range(count)]
    commands.run([sys.executable, "-m", "venv", "--clear", venv], env=PIP_ENV)
    install: list[str | Path] = [python, "-m", "pip", "install", "--no-index", "--no-deps", "-q"]
    install.extend(paths)
    commands.run(install, env=PIP_ENV)
    stamp.write_text("ok\n")
    return python


def _timed(argv: list[str | Path]) -> tuple[float, str]:
    start = time.perf_counter()
    output = commands.run(argv, env=PIP_ENV).stdout
    return time.perf_counter() - start, output


def time_side_by_side(
    first: list[str | Path], second: list[str | Path], repeat: int
) -> tuple[float, float, str, str]:
    """Median wall times of both commands, run alternately so both see the same machine load."""
    _timed(first), _timed(second)  # warm the file cache
    times: tuple[list[float], list[float]] = ([], [])
    out_first = out_second = ""
    for _ in range(repeat):
        elapsed, out_first = _timed(first)
        times[0].append(elapsed)
        elapsed, out_second = _timed(second)
        times[1].append(elapsed)
    return statistics.median(times[0]), statistics.median(times[1]), out_first, out_second


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dists", type=int, default=160, help="generated distributions")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per command")
    args = parser.parse_args()
    os.environ[commands.QUIET_ENV] = "1"  # printing each timed command would skew the timings
    python = build_venv(args.dists)
    snap_time, pip_time, snap_out, pip_out = time_side_by_side(
        [python, SCRIPT_PATH], [python, "-m", "pip", "list", "--format=json"], args.repeat
    )
    seen = len(parse_snapshot(snap_out.encode(), "snapshot")[0].distributions)
    listed = len(json.loads(pip_out))
    ratio = pip_time / snap_time
    print(f"environment: {python.parent.parent} ({seen} distributions; pip lists {listed})")
    print(f"snapshot script          median {snap_time * 1000:8.1f} ms ({args.repeat} runs)")
    print(f"pip list --format=json   median {pip_time * 1000:8.1f} ms ({args.repeat} runs)")
    print(f"ratio: snapshot is {ratio:.1f}x faster (target >= {TARGET_RATIO:.0f}x)")
    return 0 if ratio >= TARGET_RATIO and seen == listed else 1


if __name__ == "__main__":
    raise SystemExit(main())
