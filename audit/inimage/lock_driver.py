"""The pip-tools lock driver: runs under the target interpreter, in the base image or on a host.

Python 3.9+, standard library only. Usage: ``python -I lock_driver.py WORK`` where ``WORK`` holds
``job.json`` (everything this run needs: the tool versions, the cache folder, the tools index, the
CA bundle, pip-compile's and pip's arguments), the recipe's files under ``recipe/``, the stand-in
wheels, ``installed.txt`` (what is installed before the layer) and ``compiled.txt`` (the output
pip-compile starts from).

1. Builds the pip-tools virtual environment once per interpreter and tool versions, under a file
   lock (two runs may share the cache), by ``venv`` + ``pip install`` into ``NAME.partial`` and a
   rename, so a killed run never leaves a half-built environment in use.
2. Runs pip-compile (unless the layer is ``no_deps``) in an environment made from nothing: no
   ``PIP_*`` from anywhere, ``PIP_CONFIG_FILE=/dev/null``; pip's HTTP cache lives in the cache
   folder, so it persists across runs.
3. Runs ``pip install --dry-run --report`` of what the layer installs or moves, for its metadata
   (and, for a no_deps layer and overrides, its hashes): only the moved pins whose metadata the
   host does not hold already (``known``: the layer's previous lock), so a one-line edit whose
   pins did not move downloads nothing here. Every moved pin is listed in ``moved.txt``.

Exits with the first failing step's code; a base that cannot make a virtual environment exits
:data:`EXIT_NO_VENV` after one ``layer-audit: no-venv`` line, and tools that cannot be installed
exit :data:`EXIT_TOOLS_FAILED` after ``layer-audit: tools-install-failed`` (the host explains
both, from pip's own output above the marker).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Set, Tuple

STEP_PREFIX = "layer-audit: "
NO_VENV = "no-venv"
EXIT_NO_VENV = 86
TOOLS_FAILED = "tools-install-failed"
EXIT_TOOLS_FAILED = 87
JOB_FILE = "job.json"
INSTALLED = "installed.txt"
OUTPUT = "compiled.txt"
MOVED = "moved.txt"
READ = "read.txt"
REPORT = "report.json"


def step(text: str) -> None:
    """One progress line on stderr, which the host shows as the current step."""
    sys.stderr.write(STEP_PREFIX + text + "\n")
    sys.stderr.flush()


def key(line: str) -> Tuple[str, str]:
    """(PEP 503 name, version) of a ``name==version`` line."""
    name, _, version = line.partition("==")
    return re.sub(r"[-_.]+", "-", name).lower().strip(), version.split(";")[0].strip()


def environment(job: Dict[str, Any]) -> Dict[str, str]:
    """The tools' environment, made from nothing; the caches live under the cache folder."""
    cache = job["cache"]
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": os.path.join(cache, "home"),
        "XDG_CACHE_HOME": os.path.join(cache, "http"),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INPUT": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "LC_ALL": "C.UTF-8",
        "PYTHONNOUSERSITE": "1",
        "TMPDIR": os.path.join(cache, "tmp"),
    }
    if job["cert"]:
        env["SSL_CERT_FILE"] = job["cert"]
    for folder in (env["HOME"], env["TMPDIR"], env["XDG_CACHE_HOME"]):
        os.makedirs(folder, exist_ok=True)
    return env


def certs(job: Dict[str, Any]) -> List[str]:
    return ["--cert", job["cert"]] if job["cert"] else []


def tools_folder(job: Dict[str, Any]) -> str:
    """Where this interpreter's pip-tools environment lives, keyed by the tool versions."""
    tag = "py%d%d-%s" % (sys.version_info[0], sys.version_info[1], platform.machine())
    name = "pip-tools-%s-pip-%s-%s" % (job["pip_tools"], job["pip"], tag)
    return os.path.join(job["cache"], name)


def can_make_venv() -> bool:
    """Whether ``python -m venv`` can work here: venv and ensurepip both importable."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("venv", "ensurepip"))


def install_tools(job: Dict[str, Any], env: Dict[str, str]) -> str:
    """The pip-tools environment's folder, built once (under the cache's file lock)."""
    import fcntl

    tools = tools_folder(job)
    with open(os.path.join(job["cache"], ".tools.lock"), "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(tools, ".complete")):
            build_tools(job, env, tools)
    return tools


def build_tools(job: Dict[str, Any], env: Dict[str, str], tools: str) -> None:
    """venv + pip install into ``tools.partial``, then the rename; exits on a failed step."""
    step("installing pip-tools " + job["pip_tools"])
    partial = tools + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    if not can_make_venv() or subprocess.call([sys.executable, "-m", "venv", partial], env=env):
        step(NO_VENV)
        sys.exit(EXIT_NO_VENV)
    # wheels only: the tools' own sources are never built (run) where the lock runs
    pip = [os.path.join(partial, "bin", "python"), "-m", "pip", "install", "--isolated", "-q"]
    pip += ["--only-binary", ":all:"]
    wanted = ["pip==" + job["pip"], "pip-tools==" + job["pip_tools"]]
    index = ["--index-url", job["tools_index"]]
    if subprocess.call(pip + index + certs(job) + wanted, env=env):
        step(TOOLS_FAILED)
        sys.exit(EXIT_TOOLS_FAILED)
    open(os.path.join(partial, ".complete"), "w").close()
    shutil.rmtree(tools, ignore_errors=True)
    os.rename(partial, tools)


def pin_lines(path: str) -> List[str]:
    """``name==version`` of every requirement line of a pip-compile output."""
    with open(path) as handle:
        lines = [line for line in handle if line[:1].isalnum() and "==" in line]
    return [line.split(" ")[0].split(";")[0].strip() for line in lines]


def moved(work: str, overrides: List[str]) -> List[str]:
    """What the compiled layer installs or moves: not installed at that version."""
    with open(os.path.join(work, INSTALLED)) as handle:
        installed: Set[Tuple[str, str]] = {key(line) for line in handle if "==" in line}
    overridden = {key(line)[0] for line in overrides}
    pins = [p for p in pin_lines(os.path.join(work, OUTPUT)) if key(p)[0] not in overridden]
    return [p for p in pins + overrides if key(p) not in installed]


def to_read(lines: List[str], job: Dict[str, Any]) -> List[str]:
    """The moved pins pip must report: overrides (their hashes come from the report) and every
    pin whose metadata the host does not already hold (``known``)."""
    known = {key(line) for line in job.get("known", [])}
    overridden = {key(line)[0] for line in job["overrides"]}
    return [line for line in lines if key(line) not in known or key(line)[0] in overridden]


def write_lines(path: str, lines: List[str]) -> None:
    with open(path, "w") as handle:
        handle.write("".join(line + "\n" for line in lines))


def report_wanted(job: Dict[str, Any], work: str) -> List[str]:
    """pip's requirement arguments for the report: the moved pins it must read (all of them are
    written to ``moved.txt``), or a no_deps layer's file."""
    if not job["compile"]:
        return ["-r", job["requirements"]]
    lines = moved(work, list(job["overrides"]))
    write_lines(os.path.join(work, MOVED), lines)
    wanted = to_read(lines, job)
    write_lines(os.path.join(work, READ), wanted)
    return ["-r", os.path.join(work, READ)] if wanted else []


def report_argv(python: str, job: Dict[str, Any], work: str) -> List[str]:
    return [
        python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
        "--isolated", "--no-input", "--retries", "2", "--timeout", "30",
        "--report", os.path.join(work, REPORT), *certs(job), *job["report"],
    ]  # fmt: skip


def run(work: str) -> int:
    """Do the job in ``work``; the exit code of the first failing step (0 when all passed)."""
    with open(os.path.join(work, JOB_FILE)) as handle:
        job = json.load(handle)
    env = environment(job)
    python = os.path.join(install_tools(job, env), "bin", "python")
    recipe = os.path.join(work, "recipe")
    if job["compile"]:
        step("resolving with pip-compile")
        argv = [python, "-m", "piptools", "compile", *certs(job), *list(job["compile"])]
        code = subprocess.call(argv, env=env, cwd=recipe)
        if code:
            return code
    wanted = report_wanted(job, work)
    if not wanted:
        return 0
    step("reading what moves (pip --report)")
    return subprocess.call(report_argv(python, job, work) + wanted, env=env, cwd=recipe)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
