"""Re-running ``lock`` on unchanged inputs vs one real pip-compile of one layer, side by side.

Usage: ``python benchmarks/bench_lock.py [--image IMAGE] [--repeat K]``. Without ``--image`` it
builds a throwaway project (two pip layers over a local index of tiny wheels, served on
127.0.0.1) and compiles on the host; with ``--image`` it uses that recipe of this project and
compiles inside its base image, as ``lock`` does. It locks once, then times K unchanged re-runs
of the whole ``python -m audit lock`` process (what a user waits for: interpreter start-up
included; the headline: answered from the verified-fresh stamp), the bare interpreter start-up
(what no command can avoid), the same re-run with the stamp removed (the full check, which
rewrites it), the work in-process, the re-run on an interpreter that runs no ``.pth`` start-up
code (both for reference), and K/3 real pip-compile runs of the first pip layer with its real
constraints. Exit 1 when the whole process is less than 30 times faster
than one compile (the target in the README's Performance table).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit.cli import lock as cmd_lock  # noqa: E402
from audit.cli.context import RunContext  # noqa: E402
from audit.host import console  # noqa: E402
from audit.host import process as commands  # noqa: E402
from audit.lock import stamp as lock_stamp  # noqa: E402
from audit.lock.plan import (  # noqa: E402
    base_constraints,
    existing_pins,
    layer_inputs,
    pip_steps,
    read_base_digest,
)
from audit.lock.resolvers.job import CompileJob  # noqa: E402
from audit.lock.resolvers.piptools import host_target, image_target, run_compile  # noqa: E402
from audit.lock.standins import standin_wheels  # noqa: E402
from audit.project.sources import DirectorySource  # noqa: E402
from audit.recipe.parse import load_recipe  # noqa: E402
from tests.support.pkgindex import serve_index  # noqa: E402
from tests.support.project import (  # noqa: E402
    ProjectSpec,
    base_record,
    pip_recipe_toml,
    write_project,
)
from tests.support.wheels import make_wheel  # noqa: E402

TARGET_RATIO = 30.0


def median_seconds(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@contextlib.contextmanager
def synthetic_project() -> Iterator[Path]:
    """Two layers over 20 tiny wheels on a local index, and a base record for this host."""
    with tempfile.TemporaryDirectory(prefix="bench-lock-") as tmp:
        root, wheels = Path(tmp) / "project", Path(tmp) / "wheels"
        for number in range(20):
            requires = [f"pkg{number + 1}>=1"] if number < 19 else []
            for version in ("1.0", "1.1"):
                make_wheel(wheels, f"pkg{number}", version, requires=requires)
        with serve_index(wheels) as index:
            spec = ProjectSpec(
                "bench",
                pip_recipe_toml(["v1", "v2"], repository="local/bench", index_url=index),
                {"v1.in": "pkg0\n", "v2.in": "pkg10\n"},
                base_record(python=platform.python_version(), paths=(), image_id="sha256:bench"),
            )
            yield write_project(root, spec)


def lock_args(image: str, host: bool) -> list[str]:
    return [image, "--host"] if host else [image]


def rerun_in_process(image: str, host: bool) -> None:
    parser = argparse.ArgumentParser()
    cmd_lock.add_arguments(parser)
    args = parser.parse_args(lock_args(image, host))
    if cmd_lock.handle(args, RunContext()) != 0:
        raise SystemExit("lock failed")


def rerun_process_without_pth(image: str, host: bool) -> None:
    """The re-run on an interpreter that runs no ``.pth`` start-up code (this machine's imports
    certifi, ~20 ms): ``-S``, with site-packages on PYTHONPATH instead. For reference only."""
    argv = [sys.executable, "-S", "-m", "audit", "lock", *lock_args(image, host)]
    path = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
    subprocess.run(argv, check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=path))


def bare_interpreter_without_pth() -> None:
    subprocess.run([sys.executable, "-S", "-c", "pass"], check=True, capture_output=True)


def rerun_process_without_stamp(root: Path, image: str, host: bool) -> None:
    """The full check (recipe, requirements, every lock): what a run does when the stamp misses."""
    Path(lock_stamp.stamp_path(str(root), image)).unlink(missing_ok=True)
    rerun_process(image, host)


def bare_interpreter() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True, capture_output=True)


def rerun_process(image: str, host: bool) -> None:
    argv = [sys.executable, "-m", "audit", "lock", *lock_args(image, host)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run(argv, check=True, capture_output=True, env=env)


def compile_first_layer(root: Path, image: str, host: bool) -> Callable[[], object]:
    """One real pip-compile of the first pip layer, with what lock would hand it."""
    source = DirectorySource(root)
    recipe = load_recipe(source, image)
    found = read_base_digest(source, recipe)
    assert found is not None
    record, digest = found
    step = pip_steps(recipe)[0]
    inputs = layer_inputs(source, recipe, step, digest, {})
    where, front = "base", source.front
    installed = {c.name: c for c in base_constraints(record, recipe.interpreters[0], where, front)}
    job = CompileJob(inputs, existing_pins(installed), standin_wheels(installed))
    if host:
        target = host_target(recipe.platform, record, recipe.interpreters[0])
    else:
        target = image_target(recipe, record)

    def compile_once() -> None:
        if run_compile(target, job).returncode != 0:
            raise SystemExit("pip-compile failed")

    return compile_once


def measure(root: Path, image: str, host: bool, repeat: int) -> float:
    os.chdir(root)
    os.environ[commands.QUIET_ENV] = "1"
    rerun_in_process(image, host)  # lock once: every later run finds its inputs unchanged
    whole = median_seconds(lambda: rerun_process(image, host), repeat)
    start_up = median_seconds(bare_interpreter, repeat)
    full_check = median_seconds(lambda: rerun_process_without_stamp(root, image, host), repeat)
    in_process = median_seconds(lambda: rerun_in_process(image, host), repeat)
    no_pth = median_seconds(lambda: rerun_process_without_pth(image, host), repeat)
    no_pth_start_up = median_seconds(bare_interpreter_without_pth, repeat)
    compiling = median_seconds(compile_first_layer(root, image, host), max(1, repeat // 3))
    rows = [
        ("re-run, unchanged inputs (python -m audit lock)", whole),
        ("  of which: python start-up (python -c pass)", start_up),
        ("re-run, stamp removed: the full check", full_check),
        ("re-run, unchanged inputs (in-process)", in_process),
        ("re-run, no .pth start-up code (python -S)", no_pth),
        ("  of which: python -S start-up", no_pth_start_up),
        ("one pip-compile of one layer", compiling),
    ]
    for label, seconds in rows:
        print(f"{label:<50} {seconds * 1000:9.1f} ms")
    print(f"ratio, whole process: {compiling / whole:.1f}x (target {TARGET_RATIO:.0f}x); "
          f"in-process: {compiling / in_process:.0f}x; "
          f"bound by start-up alone: {compiling / start_up:.1f}x; "
          f"without .pth start-up code: {compiling / no_pth:.1f}x")  # fmt: skip
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set: every run compiles its modules from source")
    return compiling / whole


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="a recipe of this project (default: synthetic)")
    parser.add_argument("--repeat", type=int, default=9)
    options = parser.parse_args()
    console.stdout.quiet = True  # the in-process runs' own lines would bury the numbers
    with contextlib.ExitStack() as stack:
        if options.image:
            root, image, host = ROOT, options.image, False
        else:
            root, image, host = stack.enter_context(synthetic_project()), "bench", True
        ratio = measure(root, image, host, options.repeat)
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
