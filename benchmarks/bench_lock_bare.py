"""``lock`` against the bare resolver it wraps, side by side in one run (issue 22's targets).

Usage: ``python benchmarks/bench_lock_bare.py [RECIPE_DIR] [--rounds N] [--skip-pip-tools]
[--skip-uv] [--before DIR]``
(default: ``benchmarks/recipes/sci-stack``: numpy, scipy, pandas, scikit-learn, matplotlib from
real PyPI). Three comparisons, each timed as whole processes, medians of ``--rounds`` (>= 3):

- **uv, cold**: ``layer-audit lock`` (``resolver = "uv"``, no locks, empty uv and metadata
  caches) vs bare ``uv pip compile --generate-hashes`` of every layer's requirements in one file
  for the same target (``--python-version``/``--python-platform`` of the base record), with an
  empty cache; bytes written to each cache are the bytes downloaded;
- **uv, one edit**: one line added to the last layer's ``.in``, ``lock`` again, vs the bare
  compile given its previous output (``-o`` the same file) and the same edit, warm caches;
- **pip-tools, one edit**: the same edit with ``resolver = "pip-tools"`` (pip-compile inside the
  base image) vs bare ``pip-compile --generate-hashes`` in the same image, the same pip-tools
  environment, given its previous output and the same edit (warm HTTP cache on both sides).

``--before DIR`` (a copy of an earlier layer-audit, e.g. ``git archive REV | tar -x -C DIR``)
adds the same pip-tools one edit with that code, in the same rounds, beside the current one
(same recipe, same tool cache), so a change is measured before and after in one run.

Every timed run must succeed (exit 0, or the script stops); the ratios print beside the targets
(uv <= 1.3x cold and one edit; pip-tools one edit <= 1.5x). Exit 0 when all targets hold.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit.engines.resolvers.job import ambient_ca_bundle  # noqa: E402
from audit.plan.lock import PIP_TOOLS_VERSION, PIP_VERSION, UV_VERSION  # noqa: E402
from audit.plan.lockfile import parse_base  # noqa: E402

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
    """A scratch project holding the recipe with one resolver, and its own tool cache."""

    def __init__(self, recipe: Path, resolver: str, code: Path = ROOT, tag: str = "") -> None:
        self.name = recipe.resolve().name
        self.root = ROOT / "build" / "bench" / f"bare-{resolver}{tag}"
        shutil.rmtree(self.root, ignore_errors=True)
        target = self.root / "images" / self.name
        shutil.copytree(recipe, target, ignore=shutil.ignore_patterns("locks"))
        toml = target / "image.toml"
        toml.write_text(
            toml.read_text().replace("[image]\n", f'[image]\nresolver = "{resolver}"\n', 1)
        )
        self.cache = self.root.parent / f"bare-{resolver}-cache"  # kept: tools installed once
        self.env = dict(os.environ, PYTHONPATH=str(code), LAYER_AUDIT_CACHE=str(self.cache))
        self.last = sorted((target / "requirements").glob("*.in"))[-1]
        self.original = self.last.read_text()

    def lock(self, *extra: str) -> float:
        argv = [sys.executable, "-m", "audit", "lock", self.name, *extra]
        return timed(argv, cwd=self.root, env=self.env)

    def requirements(self) -> str:
        files = sorted((self.root / "images" / self.name / "requirements").glob("*.in"))
        return "".join(p.read_text() for p in files)

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


def measure_uv(recipe: Path, rounds: int) -> dict[str, tuple[float, float, int, int]]:
    project = Project(recipe, "uv")
    project.lock("--record-base")  # records the base and installs uv (untimed)
    work, bare_cache = project.root / "bare", project.root / "bare-cache"
    work.mkdir(exist_ok=True)
    cold_project, cold_bare, project_bytes, bare_bytes = [], [], [], []
    for _ in range(rounds):
        project.drop_locks()
        for folder in uv_caches(project):
            shutil.rmtree(folder, ignore_errors=True)
        cold_project.append(project.lock())
        project_bytes.append(sum(folder_bytes(f) for f in uv_caches(project)))
        shutil.rmtree(bare_cache, ignore_errors=True)
        (work / "all.txt").unlink(missing_ok=True)
        cold_bare.append(bare_uv(project, work, bare_cache))
        bare_bytes.append(folder_bytes(bare_cache))
    edit_project, edit_bare = [], []
    for _ in range(rounds):
        project.edit(True)
        edit_project.append(project.lock())
        edit_bare.append(bare_uv(project, work, bare_cache))
        project.edit(False)
        project.lock()
        bare_uv(project, work, bare_cache)
    return {
        "uv cold": (statistics.median(cold_project), statistics.median(cold_bare),
                    int(statistics.median(project_bytes)), int(statistics.median(bare_bytes))),
        "uv one edit": (statistics.median(edit_project), statistics.median(edit_bare), 0, 0),
    }  # fmt: skip


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


def measure_pip_tools(
    recipe: Path, rounds: int, before: Path | None = None
) -> dict[str, tuple[float, float, int, int]]:
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
    parser.add_argument("--before", type=Path, help="an earlier layer-audit, timed beside")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds: medians of at least 3")
    if args.before and not (args.before / "audit" / "__main__.py").is_file():
        parser.error(f"--before {args.before}: not a copy of layer-audit (no audit/__main__.py)")
    recipe = Path(args.recipe)
    results = {} if args.skip_uv else measure_uv(recipe, args.rounds)
    print(json.dumps(results), flush=True)  # kept even if the pip-tools part stops the script
    if not args.skip_pip_tools:
        before = args.before.resolve() if args.before else None
        results |= measure_pip_tools(recipe, args.rounds, before)
    print(f"{'case':29} {'layer-audit':>12} {'bare tool':>10} {'ratio':>7} {'target':>7}  bytes")
    met = True
    for case, (mine, bare, mine_bytes, bare_bytes) in results.items():
        ratio, target = mine / bare, TARGETS.get(case)
        met = met and (target is None or ratio <= target)
        sizes = f"{mine_bytes / 1e6:.1f} MB vs {bare_bytes / 1e6:.1f} MB" if bare_bytes else ""
        goal = f"{target:6.1f}x" if target else f"{'-':>7}"
        print(f"{case:29} {mine:11.2f}s {bare:9.2f}s {ratio:6.2f}x {goal}  {sizes}")
    print(json.dumps({case: [round(v, 3) for v in values] for case, values in results.items()}))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
