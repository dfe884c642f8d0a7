"""The layer walk vs the engine's own export (``docker save IMAGE >/dev/null``), side by side.

Usage: ``python benchmarks/bench_walk.py [--gb 3] [--small-gb 0.75] [--rounds 3] [--keep]``.

Builds two images from the offline base (``layer-audit/base:bookworm-amd64``; ``python -m audit
base-image`` makes it) with BuildKit: random-content files of several hundred MB, layers of many
small files, and a layer of pip-installed wheels, spread over ~10 layers; ``--gb`` and
``--small-gb`` set their sizes. For each image, alternately ``--rounds`` times: ``docker save``
to /dev/null, then the walk from the engine with an empty cache (in a fresh process: its wall
time inside ``walk()``, and its peak memory, ``VmHWM``). Then a second walk of the big
image, whose layers are cached (in-process, the call only; and a fresh process end to end).
Also, on the base image's layer: the walk's own tar reader vs :mod:`tarfile` in stream mode;
and a 600 MB CUDA-family library (gcc-built, ``--library-mb``) streamed through the layer
scanner with the walk's ELF hook (pyelftools) and without: what the hook costs in time and
peak memory (traced), in both layouts GNU ld writes (``-z separate-code``, the default, and
``noseparate-code``, where the tables share the first segment with the code).

Prints the numbers and the targets (walk <= 1.3x docker save; memory flat in the image's size;
a second walk under 0.3 s); asserts nothing. The images are removed at the end unless ``--keep``.
Names start with ``la-walk-bench`` (``$AUDIT_TEST_REPOSITORY`` overrides the prefix).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit.history.walk.layer import LayerScanner  # noqa: E402
from audit.history.walk.tarstream import TarReader  # noqa: E402

CLIENT = os.environ.get("LAYER_AUDIT_DOCKER", "/usr/bin/docker")
BASE = "layer-audit/base:bookworm-amd64"
PREFIX = os.environ.get("AUDIT_TEST_REPOSITORY", "la-walk") + "-bench"
TARGET_RATIO = 1.3
TARGET_SECOND = 0.3

DOCKERFILE = """\
ARG BASE
FROM ${BASE}
ARG MB
RUN mkdir -p /data && head -c ${MB}M /dev/urandom > /data/blob1
RUN head -c ${MB}M /dev/urandom > /data/blob2
RUN python3 -c "import os; [os.makedirs(f'/data/small/{i // 1000}', exist_ok=True) or \\
open(f'/data/small/{i // 1000}/{i}.txt', 'wb').write(os.urandom(1024 + i % 3072)) \\
for i in range(20000)]"
RUN head -c ${MB}M /dev/urandom > /data/blob3
COPY wheels /wheels
RUN /opt/venv/bin/pip install --no-index --find-links /wheels bench-pkg-0 bench-pkg-1 \\
    bench-pkg-2 bench-pkg-3 bench-pkg-4 bench-pkg-5 bench-pkg-6 bench-pkg-7
RUN head -c ${MB}M /dev/urandom > /data/blob4
RUN python3 -c "import os; [os.makedirs(f'/srv/lib/{i // 500}', exist_ok=True) or \\
open(f'/srv/lib/{i // 500}/mod{i}.py', 'w').write('x = %d\\\\n' % i) for i in range(15000)]"
RUN head -c $((${MB} / 2))M /dev/urandom > /data/blob5 && rm /data/blob1
"""

# The child's peak memory is its VmHWM (ru_maxrss survives exec: it would count the parent's)
CHILD = """\
import json, sys, time
from pathlib import Path
from audit.history.walk import run
from audit.history.walk.run import WalkContext, walk
fetching = []
fetch = run._fetch
def timed(*args):
    started = time.perf_counter()
    try:
        return fetch(*args)
    finally:
        fetching.append(time.perf_counter() - started)
run._fetch = timed
started = time.perf_counter()
result = walk(sys.argv[1], WalkContext(cache_root=Path(sys.argv[2])))
seconds = time.perf_counter() - started
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
print(json.dumps({"seconds": seconds, "fetch": fetching[0],
                  "maxrss_kib": int(status["VmHWM"].split()[0]),
                  "exported": result.image.exported, "bytes": result.image.bytes_read,
                  "layers": len(result.image.layers), "hits": result.cache.layer_hits}))
"""


def _run(argv: list[str], **options: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **options)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv[:3])} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return done  # type: ignore[no-any-return]


def _wheels(folder: Path) -> None:
    from tests.support.wheels import make_wheel

    files = {f"bench_pkg/data/{i}.py": f"X = {i}\n" * 50 for i in range(300)}
    for index in range(8):
        make_wheel(folder, f"bench-pkg-{index}", "1.0", files=files)


def build(tag: str, megabytes: int, workdir: Path) -> int:
    """Build the image; its size in bytes (the engine's)."""
    context = workdir / tag.replace("/", "_").replace(":", "_")
    context.mkdir(parents=True)
    (context / "Dockerfile").write_text(DOCKERFILE)
    _wheels(context / "wheels")
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    _run(
        [
            CLIENT,
            "build",
            "--network",
            "none",
            "--build-arg",
            f"BASE={BASE}",
            "--build-arg",
            f"MB={megabytes}",
            "-t",
            tag,
            str(context),
        ],
        env=env,
        timeout=3600,
    )
    shown = _run([CLIENT, "image", "inspect", "--format", "{{.Size}}", tag]).stdout
    return int(shown.strip())


def docker_save(tag: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [CLIENT, "save", tag], stdout=subprocess.DEVNULL, check=False, timeout=3600
    )
    if done.returncode:
        raise SystemExit(f"docker save {tag} failed")
    return time.perf_counter() - started


def walk_in_child(tag: str, cache: Path) -> tuple[dict[str, float], float]:
    """(the child's report, its wall time including start-up and imports)."""
    started = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = _run([sys.executable, "-c", CHILD, tag, str(cache)], env=env, timeout=3600)
    return json.loads(done.stdout.strip().splitlines()[-1]), time.perf_counter() - started


@dataclass(frozen=True)
class Compared:
    """Medians of the rounds (seconds), the ratio, the walk's peak memory, every round."""

    save: float
    walk: float
    rss_mib: float
    saves: tuple[float, ...]
    walks: tuple[float, ...]
    fetches: tuple[float, ...]  # of each walk: reading the image (the export); the rest folds

    @property
    def ratio(self) -> float:
        return self.walk / self.save


def compare(tag: str, rounds: int, workdir: Path) -> Compared:
    saves, walks, rss, fetches = [], [], [], []
    for index in range(rounds):
        saves.append(docker_save(tag))
        cache = Path(tempfile.mkdtemp(prefix=f"cache{index}-", dir=workdir))
        report, _ = walk_in_child(tag, cache)
        assert report["exported"] and report["hits"] == 0, report
        walks.append(report["seconds"])
        fetches.append(report["fetch"])
        rss.append(report["maxrss_kib"])
    return Compared(statistics.median(saves), statistics.median(walks), max(rss) / 1024,
                    tuple(saves), tuple(walks), tuple(fetches))  # fmt: skip


def second_walk(tag: str, workdir: Path) -> tuple[float, float]:
    """(in-process walk() time of a cached image, a fresh process's wall time end to end)."""
    from audit.history.walk.run import WalkContext, walk

    cache = workdir / "second-cache"
    walk(tag, WalkContext(cache_root=cache))
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        result = walk(tag, WalkContext(cache_root=cache))
        timings.append(time.perf_counter() - started)
        assert not result.image.exported
    _, fresh = walk_in_child(tag, cache)
    return statistics.median(timings), fresh


def reader_vs_tarfile() -> tuple[float, float, int]:
    """Seconds to read the base image's layer with the walk's scanner and with tarfile (stream
    mode, every member visited, data skipped), and its member count."""
    data = subprocess.run([CLIENT, "save", BASE], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as outer:
        layer_member = next(
            m
            for m in outer
            if m.name.endswith("layer.tar") or (m.name.startswith("blobs/") and m.size > 1e6)
        )
        layer = outer.extractfile(layer_member).read()  # type: ignore[union-attr]
    started = time.perf_counter()
    scanner = LayerScanner()
    for at in range(0, len(layer), 1 << 20):
        scanner.feed(layer[at : at + (1 << 20)])
    scanner.finish()
    ours = time.perf_counter() - started
    started = time.perf_counter()
    members = 0
    with tarfile.open(fileobj=io.BytesIO(layer), mode="r|") as archive:
        for _ in archive:
            members += 1
    theirs = time.perf_counter() - started
    count = TarReader(lambda m: None)
    count.feed(layer)
    return ours, theirs, count.members


def big_library(megabytes: int, workdir: Path, separate: bool) -> tuple[float, float, int, str]:
    """(seconds without the hook, seconds with it, peak traced bytes with it, SONAME read) for
    a layer holding one ``megabytes`` library (gcc ``.incbin`` of random bytes)."""
    import tracemalloc

    from audit.native.elfread import layer_facts

    blob, source = workdir / "blob.bin", workdir / "big.c"
    with blob.open("wb") as handle:
        for _ in range(megabytes):
            handle.write(os.urandom(1 << 20))
    source.write_text(f'__asm__(".section .rodata\\n.incbin \\"{blob}\\"\\n.previous");\n'
                      "int cudnnThing(void) { return 1; }\n")  # fmt: skip
    library = workdir / "libcudnn_engines_precompiled.so.9.19.0"
    layout = "separate-code" if separate else "noseparate-code"
    _run(["gcc", "-shared", "-fPIC", f"-Wl,-z,{layout}", "-o", str(library), str(source),
          "-Wl,-soname,libcudnn_engines_precompiled.so.9"])  # fmt: skip
    blob.unlink()
    info = tarfile.TarInfo(f"usr/lib/x86_64-linux-gnu/{library.name}")
    info.size = library.stat().st_size
    padding = b"\0" * ((512 - info.size % 512) % 512) + b"\0" * 1024

    def scan(hook: object) -> tuple[float, object]:
        scanner = LayerScanner(hook)  # type: ignore[arg-type]
        started = time.perf_counter()
        scanner.feed(info.tobuf(tarfile.PAX_FORMAT))
        with library.open("rb") as handle:
            while chunk := handle.read(4 << 20):
                scanner.feed(chunk)
        scanner.feed(padding)
        return time.perf_counter() - started, scanner.finish().facts[0]

    bare, _ = scan(None)
    tracemalloc.start()
    hooked, fact = scan(layer_facts)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    library.unlink()
    elf = getattr(fact, "elf", None) or {}
    return bare, hooked, peak, str(elf.get("soname") or elf.get("unreadable", "?"))


def _seconds(values: tuple[float, ...]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gb", type=float, default=3.0)
    parser.add_argument("--small-gb", type=float, default=0.75)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--library-mb", type=int, default=600)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="la-walk-bench-"))
    tags = {"small": f"{PREFIX}/walk:small", "big": f"{PREFIX}/walk:big"}
    sizes = {"small": args.small_gb, "big": args.gb}
    results: dict[str, Compared] = {}
    try:
        ours, theirs, members = reader_vs_tarfile()
        print(
            f"tar reading, base layer ({members} members): walk scanner {ours:.3f} s, "
            f"tarfile stream mode {theirs:.3f} s ({theirs / ours:.2f}x)"
        )
        for separate in (True, False):
            bare, hooked, peak, soname = big_library(args.library_mb, workdir, separate)
            print(
                f"a {args.library_mb} MB library ({'separate' if separate else 'noseparate'}-"
                f"code): scanned {bare:.2f} s without the ELF hook, {hooked:.2f} s with it "
                f"(read {soname}); peak memory traced with it {peak / 2**20:.0f} MiB"
            )
        for name in ("small", "big"):
            per_blob = int(sizes[name] * 1024 / 4.5)
            size = build(tags[name], per_blob, workdir)
            results[name] = compare(tags[name], args.rounds, workdir)
            r = results[name]
            rounds = (
                f"rounds: save {_seconds(r.saves)}, walk {_seconds(r.walks)} (of which "
                f"reading the export {_seconds(r.fetches)})"
            )
            print(
                f"{name}: image {size / 1e9:.2f} GB; docker save {r.save:.2f} s, walk "
                f"{r.walk:.2f} s: {r.ratio:.2f}x (target <= {TARGET_RATIO}x); "
                f"walk peak RSS {r.rss_mib:.0f} MiB; {rounds}"
            )
        cached, fresh = second_walk(tags["big"], workdir)
        print(
            f"second walk of the big image: {cached * 1000:.0f} ms in-process (target < "
            f"{TARGET_SECOND * 1000:.0f} ms), {fresh:.2f} s as a fresh process "
            "(interpreter start-up and imports included)"
        )
        print(
            f"memory: {results['small'].rss_mib:.0f} MiB at {args.small_gb} GB, "
            f"{results['big'].rss_mib:.0f} MiB at {args.gb} GB"
        )
    finally:
        if not args.keep:
            for tag in tags.values():
                subprocess.run([CLIENT, "rmi", tag], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", str(workdir)], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
