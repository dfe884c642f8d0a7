"""``lock`` against the bare resolver it wraps, side by side in one run (issue 22's targets).

Usage: ``python benchmarks/bench_lock_bare.py [RECIPE_DIR] [--rounds N] [--skip-pip-tools]
[--skip-uv] [--before REF]``
(default: ``benchmarks/recipes/sci-stack``: numpy, scipy, pandas, scikit-learn, matplotlib from
real PyPI). Three comparisons, each timed as whole processes, medians of ``--rounds`` (>= 3):

- **uv, cold**: ``layer-audit lock`` (``resolver = "uv"``, no locks, empty uv and metadata
  caches) vs bare ``uv pip compile --generate-hashes`` of every layer's requirements in one file
  for the same target (``--python-version``/``--python-platform`` of the base record), with an
  empty cache; bytes downloaded: what lands in uv's cache, plus (layer-audit) what its own
  metadata reads fetched (the ``N requests, X MB downloaded`` its lock logs note); with
  ``--before REF``, the lock of the code at git ``REF`` (exported under ``build/bench``) is
  timed cold in the same rounds, with its own empty caches;
- **uv, one edit**: one line added to the last layer's ``.in``, ``lock`` again, vs the bare
  compile given its previous output (``-o`` the same file) and the same edit, warm caches;
- **pip-tools, one edit**: the same edit with ``resolver = "pip-tools"`` (pip-compile inside the
  base image) vs bare ``pip-compile --generate-hashes`` in the same image, the same pip-tools
  environment, given its previous output and the same edit (warm HTTP cache on both sides);
  with ``--before REF``, the same one edit with the code of ``REF`` in the same rounds.

Every timed run must succeed (exit 0, or the script stops); the ratios print beside the targets
(uv <= 1.3x cold and one edit; pip-tools one edit <= 1.5x). Exit 0 when all targets hold.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_common import as_installed  # noqa: E402

from audit.lock.files import parse_base  # noqa: E402
from audit.lock.plan import PIP_TOOLS_VERSION, PIP_VERSION, UV_VERSION  # noqa: E402
from audit.lock.resolvers.job import ambient_ca_bundle  # noqa: E402

EDIT = "joblib>=1.3  # one edit\n"
INDEX = "https://pypi.org/simple"
TARGETS = {"uv cold": 1.3, "uv one edit": 1.3, "pip-tools one edit": 1.5}


def timed(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> float:
    """Wall time of one run of ``argv``; the script stops unless it exits 0."""
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(argv[:6])} …\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


class Project:
    """A scratch project holding the recipe with one resolver, and its own tool cache; its
    ``lock`` runs the code under ``src`` (this checkout by default)."""

    def __init__(self, recipe: Path, resolver: str, src: Path = ROOT, tag: str = "") -> None:
        self.name = recipe.resolve().name
        self.root = ROOT / "build" / "bench" / f"bare-{resolver}{tag}"
        shutil.rmtree(self.root, ignore_errors=True)
        target = self.root / "images" / self.name
        shutil.copytree(recipe, target, ignore=shutil.ignore_patterns("locks"))
        toml = target / "image.toml"
        toml.write_text(
            toml.read_text().replace("[image]\n", f'[image]\nresolver = "{resolver}"\n', 1)
        )
        self.cache = self.root.parent / f"bare-{resolver}{tag}-cache"  # kept: tools installed once
        env = dict(os.environ, PYTHONPATH=str(src), LAYER_AUDIT_CACHE=str(self.cache))
        self.env = as_installed(env)  # byte-compiled, as an install runs
        self.last = sorted((target / "requirements").glob("*.in"))[-1]
        self.original = self.last.read_text()

    def lock(self, *extra: str) -> float:
        argv = [sys.executable, "-m", "audit", "lock", self.name, *extra]
        return timed(argv, cwd=self.root, env=self.env)

    def requirements(self) -> str:
        files = sorted((self.root / "images" / self.name / "requirements").glob("*.in"))
        return "".join(p.read_text() for p in files)

    def fetched_bytes(self) -> int:
        """What the last run downloaded beside uv's shared cache, as its lock logs note it:
        each layer's own metadata reads, the read-ahead's reads and the project pages uv kept in
        the run's own cache (both cumulative: their largest note counts)."""
        own, ahead, pages = 0.0, 0.0, 0.0
        for log in (self.root / "build" / ".layer-audit" / "lock-logs" / self.name).glob("*.log"):
            for line in log.read_text().splitlines():
                found = re.search(r"([\d.]+) MB downloaded", line)
                kept = re.search(r"project pages of this run so far: ([\d.]+) MB", line)
                if found and "read ahead so far" in line:
                    ahead = max(ahead, float(found.group(1)))
                elif found and "moved pins" in line:
                    own += float(found.group(1))
                if kept:
                    pages = max(pages, float(kept.group(1)))
        return int((own + ahead + pages) * 1e6)

    def drop_logs(self) -> None:
        shutil.rmtree(self.root / "build" / ".layer-audit" / "lock-logs", ignore_errors=True)

    def drop_locks(self) -> None:
        for path in (self.root / "locks" / self.name).glob("v*.txt"):
            path.unlink()

    def edit(self, on: bool) -> None:
        self.last.write_text(self.original + (EDIT if on else ""))

    def base(self) -> dict[str, str]:
        record = parse_base((self.root / "locks" / self.name / "base.json").read_bytes(), "base")
        env = record.environments[0]
        glibc = env.libc.split()[-1].replace(".", "_") if env.libc.startswith("glibc") else "2_28"
        machine = env.markers.get("platform_machine", "x86_64")
        return {
            "python": env.python,
            "platform": f"{machine}-manylinux_{glibc}",
            "id": record.image_id,
        }


# -- uv ----------------------------------------------------------------------------------------


def uv_binary(project: Project) -> Path:
    return project.cache / "host" / f"uv-{UV_VERSION}" / "bin" / "uv"


def bare_uv(project: Project, work: Path, cache: Path) -> float:
    """``uv pip compile --generate-hashes`` of every layer in one file, for the same target."""
    base = project.base()
    (work / "all.in").write_text(project.requirements())
    argv = [str(uv_binary(project)), "pip", "compile", "all.in", "-o", "all.txt",
            "--generate-hashes", "--no-header", "--no-config", "--index-url", INDEX,
            "--python-version", base["python"], "--python-platform", base["platform"]]  # fmt: skip
    env = dict(os.environ, UV_CACHE_DIR=str(cache))
    return timed(argv, cwd=work, env=env)


def uv_caches(project: Project) -> list[Path]:
    return [project.cache / "host" / "uv-cache", project.cache / "host" / "metadata"]


def cold_lock(project: Project) -> tuple[float, int]:
    """(seconds, bytes downloaded) of one lock with no locks and empty uv and metadata caches."""
    project.drop_locks()
    project.drop_logs()
    for folder in uv_caches(project):
        shutil.rmtree(folder, ignore_errors=True)
    seconds = project.lock()
    return seconds, folder_bytes(uv_caches(project)[0]) + project.fetched_bytes()


def export(ref: str) -> Path:
    """The project's code at git ``ref``, exported (read-only use) under build/bench."""
    target = ROOT / "build" / "bench" / f"src-{re.sub(r'[^A-Za-z0-9_.-]', '_', ref)}"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref, "audit"], cwd=ROOT, capture_output=True,
                             check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


Row = tuple[float, float, int, int]


def measure_uv(recipe: Path, rounds: int, before: Path | None) -> dict[str, Row]:
    project = Project(recipe, "uv")
    project.lock("--record-base")  # records the base and installs uv (untimed)
    old = Project(recipe, "uv", before, "-before") if before else None
    if old is not None:
        old.lock("--record-base")
    work, bare_cache = project.root / "bare", project.root / "bare-cache"
    work.mkdir(exist_ok=True)
    cold: dict[str, list[tuple[float, int]]] = {"project": [], "before": [], "bare": []}
    for _ in range(rounds):
        cold["project"].append(cold_lock(project))
        if old is not None:
            cold["before"].append(cold_lock(old))
        shutil.rmtree(bare_cache, ignore_errors=True)
        (work / "all.txt").unlink(missing_ok=True)
        cold["bare"].append((bare_uv(project, work, bare_cache), folder_bytes(bare_cache)))
    edit_project, edit_bare = [], []
    for _ in range(rounds):
        project.edit(True)
        edit_project.append(project.lock())
        edit_bare.append(bare_uv(project, work, bare_cache))
        project.edit(False)
        project.lock()
        bare_uv(project, work, bare_cache)
    bare, mine = _medians(cold["bare"]), _medians(cold["project"])
    results = {"uv cold": (mine[0], bare[0], mine[1], bare[1])}
    if old is not None:
        mine = _medians(cold["before"])
        results["uv cold, --before"] = (mine[0], bare[0], mine[1], bare[1])
    results["uv one edit"] = (statistics.median(edit_project), statistics.median(edit_bare), 0, 0)
    return results


def _medians(runs: list[tuple[float, int]]) -> tuple[float, int]:
    return statistics.median(r[0] for r in runs), int(statistics.median(r[1] for r in runs))


# -- pip-tools ---------------------------------------------------------------------------------


def tools_env(project: Project) -> Path:
    """The project's cached pip-tools environment for the base image (made by its own lock)."""
    found = sorted(project.cache.glob(f"*/pip-tools-{PIP_TOOLS_VERSION}-pip-{PIP_VERSION}-*"))
    if not found:
        sys.exit(f"no pip-tools environment under {project.cache}")
    return found[0]


def bare_pip_compile(project: Project, work: Path) -> float:
    """pip-compile --generate-hashes in the base image, its previous output given (``-o``)."""
    base, tools = project.base(), tools_env(project)
    (work / "all.in").write_text(project.requirements())
    cache, bundle = tools.parent, ambient_ca_bundle()  # TLS as lock's own runs have it
    certs = ["-v", f"{bundle}:/run/ca.pem:ro", "-e", "SSL_CERT_FILE=/run/ca.pem"] if bundle else []
    argv = ["docker", "run", "--rm", "--network", "host", "--user", f"{os.getuid()}:{os.getgid()}",
            "-v", f"{cache}:/cache", "-v", f"{work}:/work", "-w", "/work", *certs,
            "-e", "HOME=/cache/bare-home", "-e", "PIP_CONFIG_FILE=/dev/null",
            "--entrypoint", f"/cache/{tools.name}/bin/python", base["id"],
            "-m", "piptools", "compile", "--generate-hashes", "--no-header", "--no-config",
            *(["--cert", "/run/ca.pem"] if bundle else []),
            "--index-url", INDEX, "-o", "all.txt", "all.in"]  # fmt: skip
    return timed(argv)


def one_edit(project: Project) -> float:
    """The timed relock after the edit; the edit is then undone and relocked (untimed)."""
    project.edit(True)
    seconds = project.lock()
    project.edit(False)
    project.lock()
    return seconds


def measure_pip_tools(recipe: Path, rounds: int, before: Path | None = None) -> dict[str, Row]:
    project = Project(recipe, "pip-tools")
    project.lock("--record-base")  # records the base, installs pip-tools, compiles (untimed)
    earlier = Project(recipe, "pip-tools", before, "-before") if before else None
    if earlier:
        earlier.lock("--record-base")
    work = project.root / "bare"
    work.mkdir(exist_ok=True)
    bare_pip_compile(project, work)  # the bare previous output, and a warm HTTP cache
    project_runs, earlier_runs, bare_runs = [], [], []
    for _ in range(rounds):
        project_runs.append(one_edit(project))
        if earlier:
            earlier_runs.append(one_edit(earlier))
        project.edit(True)
        bare_runs.append(bare_pip_compile(project, work))
        project.edit(False)
        bare_pip_compile(project, work)
    bare = statistics.median(bare_runs)
    found = {"pip-tools one edit": (statistics.median(project_runs), bare, 0, 0)}
    if earlier_runs:
        found["pip-tools one edit, --before"] = (statistics.median(earlier_runs), bare, 0, 0)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", nargs="?", default=str(ROOT / "benchmarks/recipes/sci-stack"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-pip-tools", action="store_true")
    parser.add_argument("--skip-uv", action="store_true")
    parser.add_argument("--before", metavar="REF", help="also time the code of git REF beside")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: medians of at least 3")
    recipe = Path(args.recipe)
    before = export(args.before) if args.before else None  # one export for both backends
    results = {} if args.skip_uv else measure_uv(recipe, args.rounds, before)
    print(json.dumps(results), flush=True)  # kept even if the pip-tools part stops the script
    if not args.skip_pip_tools:
        results |= measure_pip_tools(recipe, args.rounds, before)
    print(f"{'case':29} {'layer-audit':>12} {'bare tool':>10} {'ratio':>7} {'target':>7}  "
          "bytes downloaded")  # fmt: skip
    met = True
    for case, (mine, bare, mine_bytes, bare_bytes) in results.items():
        ratio = mine / bare
        target = TARGETS.get(case)  # the --before row has none: it is the reference
        met = met and (target is None or ratio <= target)
        sizes = f"{mine_bytes / 1e6:.1f} MB vs {bare_bytes / 1e6:.1f} MB" if bare_bytes else ""
        goal = f"{target:6.1f}x" if target else "      -"
        print(f"{case:29} {mine:11.2f}s {bare:9.2f}s {ratio:6.2f}x {goal}  {sizes}")
    print(json.dumps({case: [round(v, 3) for v in values] for case, values in results.items()}))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
