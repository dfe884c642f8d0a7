"""Snapshot script vs ``pip list --format=json`` on a real environment of 178 distributions.

Usage: ``python benchmarks/bench_snapshot.py [--synthetic N] [--repeat K]``. Builds once, cached
under ``build/bench/``, a virtual environment from the pinned list ``benchmarks/data/
snapshot-venv-178.txt`` (real wheels from the public index, ``--no-deps``, the machine's pip
configuration left out), or with ``--synthetic N`` one of N generated wheels (offline). Then it
times, side by side and alternately, K runs each of: the snapshot script with ``--no-system``
(Python only), the snapshot script as the guard runs it (with the OS packages and native
libraries), and ``pip list --format=json``; and in-process, the ways to digest RECORD files.
Prints the medians and ratios; exit 1 when the Python snapshot is less than 15 times faster than
pip list, or the one with the system costs more than twice the Python-only one (the targets of
the README's Performance table), or when a timed run fails or lists another number of
distributions than pip.
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

from audit.history.snapshot import SCRIPT_PATH, parse_snapshot  # noqa: E402
from audit.host import process as commands  # noqa: E402

TARGET_RATIO = 15.0
SYSTEM_BUDGET = 2.0  # the snapshot with OS packages and native libraries vs the Python-only one
BENCH_DIR = ROOT / "build" / "bench"
REAL_LIST = ROOT / "benchmarks" / "data" / "snapshot-venv-178.txt"
# Hermetic pip: the machine's pip configuration (find-links, constraints) must not leak in; the
# CA bundle and proxy settings a network needs do.
_PASSED = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "HTTPS_PROXY", "https_proxy",
           "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")  # fmt: skip
PIP_ENV = {
    "PATH": os.environ.get("PATH", ""),
    "HOME": os.environ.get("HOME", "/tmp"),
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_INPUT": "1",
    commands.QUIET_ENV: "1",
    **{name: os.environ[name] for name in _PASSED if name in os.environ},
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


def build_real_venv() -> Path:
    """The cached venv of the pinned real list (rebuilt when the list changes)."""
    key = hashlib.sha256(REAL_LIST.read_bytes()).hexdigest()[:12]
    venv = BENCH_DIR / f"real-venv-{key}"
    python = venv / "bin" / "python"
    stamp = venv / ".bench-complete"
    if stamp.is_file():
        return python
    commands.run([sys.executable, "-m", "venv", "--clear", venv], env=PIP_ENV)
    install: list[str | Path] = [python, "-m", "pip", "install", "--no-deps", "-q", "-r", REAL_LIST]
    commands.run(install, env=PIP_ENV)
    stamp.write_text("ok\n")
    return python


def _timed(argv: list[str | Path]) -> tuple[float, str]:
    start = time.perf_counter()
    output = commands.run(argv, env=PIP_ENV).stdout  # raises on a failed run
    return time.perf_counter() - start, output


def time_side_by_side(
    commands_: dict[str, list[str | Path]], repeat: int
) -> tuple[dict[str, float], dict[str, str]]:
    """Median wall time and last output of each command, run in turn so all see the same load."""
    for argv in commands_.values():
        _timed(argv)  # warm the file cache
    times: dict[str, list[float]] = {name: [] for name in commands_}
    outputs: dict[str, str] = {}
    for _ in range(repeat):
        for name, argv in commands_.items():
            elapsed, outputs[name] = _timed(argv)
            times[name].append(elapsed)
    return {name: statistics.median(values) for name, values in times.items()}, outputs


DIGEST_PROBE = """
import os, statistics, sys, time
sys.path.insert(0, sys.argv[1])
import snapshot as s
try:
    from _sha256 import sha256 as builtin
except ImportError:
    from _sha2 import sha256 as builtin
from _hashlib import openssl_sha256

def stat_key(folder, metadata_file):
    try:
        st = os.stat("%s/RECORD" % folder)
    except OSError:
        return ""
    return "%d:%d" % (st.st_size, st.st_mtime_ns)

def hashed(function):
    def digest(folder, metadata_file):
        data = s._read("%s/RECORD" % folder)
        return function(data).hexdigest() if data is not None else ""
    return digest

ways = {
    "sha256 of RECORD, builtin": hashed(builtin),
    "sha256 of RECORD, OpenSSL (chosen)": hashed(openssl_sha256),
    "size+mtime of RECORD (stat)": stat_key,
    "no digest (the floor)": lambda folder, metadata_file: "",
}
sites = s.site_directories(sys.path, sys.argv[1])
times = {name: [] for name in ways}
for _ in range(int(sys.argv[2])):
    for name, way in ways.items():
        s._digest = way
        start = time.perf_counter()
        s.described(sites)
        times[name].append(time.perf_counter() - start)
for name, values in times.items():
    print("%-36s %7.1f ms" % (name, statistics.median(values) * 1000))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", type=int, metavar="N", help="N generated wheels instead")
    parser.add_argument("--repeat", type=int, default=9, help="timed runs per command")
    args = parser.parse_args()
    os.environ[commands.QUIET_ENV] = "1"  # printing each timed command would skew the timings
    python = build_venv(args.synthetic) if args.synthetic else build_real_venv()
    runs: dict[str, list[str | Path]] = {
        "python": [python, SCRIPT_PATH, "--no-system"],
        "system": [python, SCRIPT_PATH],
        "pip": [python, "-m", "pip", "list", "--format=json"],
    }
    medians, outputs = time_side_by_side(runs, args.repeat)
    envs = parse_snapshot(outputs["system"].encode(), "snapshot")
    seen = len(envs[0].distributions)
    listed = len(json.loads(outputs["pip"]))
    system = envs[0].system
    packages = len(system.packages) if system else 0
    ratio = medians["pip"] / medians["python"]
    cost = medians["system"] / medians["python"]
    print(f"environment: {python.parent.parent} ({seen} distributions; pip lists {listed})")
    python_ms = medians["python"] * 1000
    print(f"snapshot, Python only       median {python_ms:8.1f} ms ({args.repeat} runs)")
    print(f"snapshot with the system    median {medians['system'] * 1000:8.1f} ms "
          f"({packages} OS packages)")  # fmt: skip
    print(f"pip list --format=json      median {medians['pip'] * 1000:8.1f} ms")
    print(f"ratio: snapshot is {ratio:.1f}x faster than pip list (target >= {TARGET_RATIO:.0f}x)")
    print(f"cost of the system: {cost:.2f}x the Python-only snapshot (budget <= {SYSTEM_BUDGET}x)")
    print("RECORD digest, in-process, median of the walk over every distribution:")
    probe = commands.run([python, "-c", DIGEST_PROBE, SCRIPT_PATH.parent, str(args.repeat)])
    print(probe.stdout.rstrip())
    ok = ratio >= TARGET_RATIO and cost <= SYSTEM_BUDGET and seen == listed
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
