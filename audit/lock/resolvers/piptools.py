"""The pip-tools resolver: pip-compile for one layer, hermetically, for the recipe's target.

By default inside the base image (a container, emulated with ``--platform`` when foreign), with
pip-tools in a throwaway virtual environment made from the image's own interpreter and cached in a
host folder keyed by image id (mounted at /cache), so the next run starts at once. ``--host`` runs
the same driver (:mod:`audit.inimage.lock_driver`) with the host's interpreter, allowed only when
the host's platform and Python match the base record; there pip takes wheels only, but for the
packages ``lock --build-on-host`` names (:mod:`audit.lock.host_builds`): in the image, pip
builds a source distribution inside the container, on the host it would run its code here.

Hermetic: the driver builds pip-compile's environment from scratch (no ``PIP_*`` from anywhere,
``PIP_CONFIG_FILE=/dev/null``, pip ``--isolated``, ``--no-config``), names only the recipe's
indexes, and emits no index URL, find-links or trusted host. A CA bundle only reaches TLS.
Failures are explained from pip's log (:func:`explain_failure`).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import sys
import tempfile
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

from audit.docker import host as docker_host
from audit.docker.container import Container
from audit.docker.run_label import run_labels, work_prefix
from audit.errors import EnvironmentProblem, LockError, ResolutionConflict, UsageError
from audit.host import console
from audit.host import process as commands
from audit.inimage import lock_driver
from audit.lock.files import BaseRecord
from audit.lock.host_builds import WHEELS_ONLY, HostBuilds, refused
from audit.lock.plan import PIP_TOOLS_VERSION, PIP_VERSION, Constraint, LayerInputs
from audit.lock.plan import RESOLVER as PIP_TOOLS_RESOLVER
from audit.lock.resolvers.job import (
    CONSTRAINTS,
    OUTPUT,
    REPORT,
    STANDINS,
    WORK_PREFIX,
    CompileJob,
    OnLine,
    Outcome,
    ambient_ca_bundle,
    cache_root,
    disk_full,
    last_word,
    metadata_item,
    network_failure,
    prepare_work,
    probe_indexes,
    sources_only,
    tail,
    tools_index,
    unreachable_index,
)
from audit.recipe.model import Recipe
from audit.redact import redact

CA_TARGET = "/run/layer-audit-ca.pem"
ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
DRIVER_SCRIPT = Path(lock_driver.__file__)  # copied into each work folder
IN_IMAGE_ROUTE = "drop --host (pip-compile then runs inside the base image)"


@dataclass(frozen=True)
class CompileTarget:
    """Where pip-compile runs: in ``image`` (its interpreter) or on the host (``image`` None)."""

    image: str | None
    image_id: str
    interpreter: str
    platform: str  # linux/arm64
    ca_bundle: Path | None
    # on the host, the source distributions pip may build there (no other); in the image, None:
    # pip builds inside the container, as the image's own pip install will
    builds: HostBuilds | None = None

    def pip_options(self) -> list[str]:
        """pip's options of where sources may be built: none on the host but those allowed."""
        return self.builds.resolver_args() if self.builds is not None else []


# -- host checks ----------------------------------------------------------------------------


def host_platform() -> str:
    machine = platform.machine().lower()
    return f"{platform.system().lower()}/{ARCHES.get(machine, machine)}"


def host_problem(recipe_platform: str, record: BaseRecord, interpreter: str) -> str | None:
    """Why the host cannot compile for this recipe (other platform or Python), or None."""
    if host_platform() != recipe_platform:
        return f"the host is {host_platform()}, the recipe targets {recipe_platform}"
    wanted = next((e.python for e in record.environments if e.interpreter == interpreter), "")
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
    if ".".join(wanted.split(".")[:2]) != have:
        return f"the host runs Python {have}, {interpreter} in the base is Python {wanted or '?'}"
    return None


def host_target(
    recipe_platform: str, record: BaseRecord, interpreter: str, builds: HostBuilds = WHEELS_ONLY
) -> CompileTarget:
    problem = host_problem(recipe_platform, record, interpreter)
    if problem:
        raise UsageError(
            f"--host: cannot compile on this machine: {problem}",
            "drop --host to compile inside the base image (emulated when foreign)",
        )
    return CompileTarget(None, "host", sys.executable, recipe_platform, ambient_ca_bundle(), builds)


def image_target(recipe: Recipe, record: BaseRecord) -> CompileTarget:
    """The base image (pulled by digest when pinned), warning when it is not the recorded one."""
    from audit.docker.registry import ensure_image

    ref = recipe.recorded_ref  # a base without Python: its prelude (lock built it first)
    if recipe.base_stage is None:
        ensure_image(ref, f"compiling {recipe.name}'s locks in its base")
    info = docker_host.image_info(ref)
    if info.id != record.image_id:
        console.stderr.print(
            f"[yellow]warning:[/] {ref} is now {info.id}, the base record has "
            f"{record.image_id}: re-record it with --record-base"
        )
    interpreter = recipe.interpreters[0]
    return CompileTarget(ref, info.id, interpreter, recipe.platform, ambient_ca_bundle())


# -- arguments and the job file ---------------------------------------------------------------


def index_args(inputs: LayerInputs) -> list[str]:
    args = ["--index-url", inputs.index_url]
    if inputs.extra_index_url:
        args += ["--extra-index-url", inputs.extra_index_url]
    return [*args, "--pre"] if inputs.pre else args


def compile_args(
    inputs: LayerInputs, constrained: bool = False, pip_options: Sequence[str] = ()
) -> list[str]:
    """pip-compile's arguments: hashes (reused from the existing output for pins that did not
    move), explicit indexes, the stand-ins as find-links; nothing machine-specific emitted.
    ``pip_options`` join pip's own (where sources may be built: :meth:`CompileTarget.pip_options`).
    """
    pip_args = " ".join(["--isolated --no-input --retries 2 --timeout 30", *pip_options])
    args = [
        "--no-header", "--no-config", "--generate-hashes", "--reuse-hashes", "--strip-extras",
        "--allow-unsafe", "--no-emit-index-url", "--no-emit-trusted-host",
        "--no-emit-find-links", "--newline", "LF",
        "--pip-args", pip_args,
        "--find-links", f"../{STANDINS}",
    ]  # fmt: skip
    limits = ["-c", f"../{CONSTRAINTS}"] if constrained else []
    return [*args, *index_args(inputs), *limits, "-o", f"../{OUTPUT}", inputs.requirements]


def job_document(
    job: CompileJob, cache: str, cert: str, pip_options: Sequence[str] = ()
) -> dict[str, Any]:
    """The driver's job file: every parameter of its run (it reads nothing else).
    ``pip_options``: where pip may build sources, for pip-compile and the report alike."""
    constrained = bool(job.constraints)
    return {
        "cache": cache,
        "cert": cert,
        "tools_index": tools_index(),
        "pip": PIP_VERSION,
        "pip_tools": PIP_TOOLS_VERSION,
        "compile": [] if job.no_deps else compile_args(job.inputs, constrained, pip_options),
        "report": [*index_args(job.inputs), *pip_options],
        "requirements": job.inputs.requirements,
        "overrides": list(job.overrides),
        "known": known_pins(job),
    }


def known_pins(job: CompileJob) -> list[str]:
    """``name==version`` of the pins whose metadata the host holds (the layer's previous lock):
    pip's report skips them. None with an extra index: the host then checks which index every
    moved file came from, so pip must report each one (:func:`chosen_files`)."""
    if job.inputs.extra_index_url:
        return []
    return sorted(f"{name}=={version}" for name, version in job.known)


# -- running --------------------------------------------------------------------------------


def _read_output(work: Path, job: CompileJob, returncode: int, log: str) -> Outcome:
    def text(name: str) -> str:
        path = work / name
        return path.read_text() if returncode == 0 and path.is_file() else ""

    output = "" if job.no_deps else text(OUTPUT)
    return Outcome(returncode, output, with_known(text(REPORT), text(lock_driver.MOVED), job), log)


def with_known(report: str, moved: str, job: CompileJob) -> str:
    """pip's report plus, in its shape (``install[].metadata``), the previous lock's metadata
    of every moved pin pip was not asked to read (the driver's rule: :func:`lock_driver.to_read`);
    the report unchanged when pip read them all (or is unreadable: the caller says so)."""
    lines = [line for line in moved.splitlines() if "==" in line]
    document = {"known": known_pins(job), "overrides": list(job.overrides)}
    read = set(lock_driver.to_read(lines, document))
    pins = [lock_driver.key(line) for line in lines if line not in read]
    extra = [metadata_item(name, version, *job.known[name, version]) for name, version in pins]
    if not extra:
        return report
    try:
        items = json.loads(report)["install"] if report else []
    except (ValueError, KeyError, TypeError):
        return report
    return json.dumps({"install": [*items, *extra]})


def _write_job(work: Path, job: CompileJob, target: CompileTarget, cache: str, cert: str) -> None:
    document = job_document(job, cache, cert, target.pip_options())
    (work / lock_driver.JOB_FILE).write_text(json.dumps(document))
    shutil.copyfile(DRIVER_SCRIPT, work / "driver.py")


def _compile_on_host(
    target: CompileTarget, job: CompileJob, work: Path, on_line: OnLine
) -> tuple[int, str]:
    cache = cache_root() / "host"
    cache.mkdir(parents=True, exist_ok=True)
    _write_job(work, job, target, str(cache), str(target.ca_bundle) if target.ca_bundle else "")
    done = commands.stream(
        [target.interpreter, "-I", str(work / "driver.py"), str(work)],
        on_line,
        env={"PATH": os.defpath, "HOME": str(cache), "LC_ALL": "C.UTF-8"},
        check=False,
    )
    return done.returncode, done.stderr + done.stdout


def _compile_in_image(
    target: CompileTarget, job: CompileJob, work: Path, on_line: OnLine
) -> tuple[int, str]:
    assert target.image is not None
    cache = cache_root() / target.image_id.removeprefix("sha256:")[:16]
    cache.mkdir(parents=True, exist_ok=True)
    mounts = [
        docker_host.BindMount(cache, "/cache", read_only=False),
        docker_host.BindMount(work, "/work", read_only=False),
    ]
    if target.ca_bundle:
        mounts.append(docker_host.BindMount(target.ca_bundle, CA_TARGET))
    _write_job(work, job, target, "/cache", CA_TARGET if target.ca_bundle else "")
    argv = [target.interpreter, "-I", "/work/driver.py", "/work"]
    user = f"{os.getuid()}:{os.getgid()}"
    with Container(
        target.image, argv, mounts=mounts, network="host", platform=target.platform, user=user,
        labels=run_labels(),
    ) as box:  # fmt: skip
        box.start()
        box.follow(on_line)
        code = box.wait()
        out, err = box.logs()
    return code, err + out


def run_compile(target: CompileTarget, job: CompileJob, on_line: OnLine = print) -> Outcome:
    """Run one layer's job in a fresh work folder; the folder is always removed. Each line of
    the tools' output goes to ``on_line`` as it comes (progress)."""
    work = Path(tempfile.mkdtemp(prefix=work_prefix(WORK_PREFIX)))
    try:
        work.chmod(0o755)
        prepare_work(work, job)
        runner = _compile_on_host if target.image is None else _compile_in_image
        returncode, log = runner(target, job, work, on_line)
        return _read_output(work, job, returncode, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- the resolver -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipTools:
    """pip-compile inside the base image (emulated when foreign) or on a matching host."""

    target: CompileTarget
    label: str = PIP_TOOLS_RESOLVER
    merges_indexes: bool = True  # pip takes the highest version from any index

    def compile(self, job: CompileJob, on_line: OnLine) -> Outcome:
        return run_compile(self.target, job, on_line)

    def warm(
        self, layers: Sequence[LayerInputs], installed: Collection[tuple[str, str]]
    ) -> AbstractContextManager[None]:
        return nullcontext()  # pip's HTTP cache is per container run: nothing to share

    def explain(
        self, log: str, inputs: LayerInputs, installed: Mapping[str, Constraint], log_path: str
    ) -> LockError | EnvironmentProblem:
        if self.target.builds is not None:  # on the host, pip took wheels only
            sdist = sources_only(inputs, log)
            if sdist is not None:
                saved = f" (full log: {log_path})" if log_path else ""
                error = refused(inputs.step.label, *sdist, in_image_route=IN_IMAGE_ROUTE)
                return type(error)(error.message, error.hint + saved)
        return explain_failure(log, inputs, installed, log_path)

    def yanked(self, log: str) -> list[str]:
        return yanked_pins(log)


# -- output and failures --------------------------------------------------------------------

_YANKED = re.compile(
    r"is a yanked version: '(?P<name>[^']+)' candidate \(version (?P<version>\S+) .*\n"
    r"\s*Reason for being yanked: (?P<reason>.*)"
)


def yanked_pins(log: str) -> list[str]:
    """'name version (reason)' for every yanked release pip-compile chose (pinned exactly)."""
    return [f"{m['name']} {m['version']} ({m['reason'].strip()})" for m in _YANKED.finditer(log)]


_CAUSE = re.compile(
    r"RequirementInformation\(requirement=\w+\('(?P<req>[^']*)'\), "
    r"parent=(?:None|\w+\('(?P<parent>[^' ]*))"
)
_DEPENDS = re.compile(r"^\s*(?P<parent>\S+ \S+) depends on (?P<req>.+?)\s*$", re.MULTILINE)
_REQUESTED = re.compile(r"^\s*The user requested (?P<req>[^(].*?)\s*$", re.MULTILINE)
_NOT_FOUND = re.compile(r"Could not find a version that satisfies the requirement (?P<req>\S+)")


def _who(parent: str | None, requirements: str) -> str:
    """``gamma 1.0`` from a candidate's link or name, or the layer's file when none."""
    if not parent:
        return requirements
    filename = parent.split("#", 1)[0].rsplit("/", 1)[-1]
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
            return f"{name} {version}"
        if filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
            return f"{name} {version}"
    except ValueError:
        pass
    return parent


def resolver_causes(log: str, requirements: str) -> list[tuple[str, str]]:
    """(requirement, who asked) pairs from pip's resolver error, in the order pip gave them."""
    causes = [(m["req"], _who(m["parent"], requirements)) for m in _CAUSE.finditer(log)]
    causes += [(m["req"], m["parent"]) for m in _DEPENDS.finditer(log)]
    causes += [(m["req"], requirements) for m in _REQUESTED.finditer(log)]
    return causes


def blocked(requirement: str, installed: Mapping[str, Constraint]) -> Constraint | None:
    """The installed distribution ``requirement`` cannot accept, or None."""
    try:
        parsed = Requirement(requirement)
    except InvalidRequirement:
        return None
    constraint = installed.get(canonicalize_name(parsed.name))
    if constraint and not parsed.specifier.contains(constraint.version, prereleases=True):
        return constraint
    return None


def explain_failure(
    log: str, inputs: LayerInputs, installed: Mapping[str, Constraint], log_path: str = ""
) -> LockError | EnvironmentProblem:
    """A failed compile as one clear error: the machine (exit 3), a base that cannot run the
    tools (exit 2), a conflict with what is installed, or a name no index has; the tail of pip's
    output (no Python stack frames) and where the whole log is."""
    where = f"{inputs.step.label}"
    error = _environment(where, log, inputs) or _explained(where, log, inputs, installed)
    shown = tail(log)
    detail = f"\n{shown}" if shown and isinstance(error, LockError) else ""
    if isinstance(error, ResolutionConflict):
        detail = ""
    saved = f" (full log: {log_path})" if log_path else ""
    return type(error)(error.message + detail, error.hint + saved)


def _explained(
    where: str, log: str, inputs: LayerInputs, installed: Mapping[str, Constraint]
) -> LockError | EnvironmentProblem:
    for requirement, who in resolver_causes(log, inputs.requirements):
        constraint = blocked(requirement, installed)
        if constraint:
            return conflict(where, constraint, f"{who} asks for {requirement}")
    missing = _NOT_FOUND.search(log)
    if missing:
        down = probe_indexes(inputs, log) if "(from versions: none)" in log else None
        return down or not_found(where, missing["req"], installed)
    return _generic(where, log)


# "The virtual environment was not created successfully because ensurepip is not\navailable":
# Python wraps the message, so whitespace (line breaks included) is matched loosely.
_NO_VENV = re.compile(
    r"ensurepip\s+is\s+not\s+available|No module named '?(?:venv|ensurepip)"
    r"|" + re.escape(lock_driver.STEP_PREFIX + lock_driver.NO_VENV)
)
_TOOLS_FAILED = lock_driver.STEP_PREFIX + lock_driver.TOOLS_FAILED


def no_venv(where: str) -> LockError:
    return LockError(
        f"{where}: the base image's interpreter cannot make a virtual environment (no "
        "venv/ensurepip, common in CUDA images), so pip-tools cannot run inside it",
        'set resolver = "uv" under [image] in image.toml (uv runs on this machine, no venv '
        "needed in the base), or install python3-venv in the base (Debian/Ubuntu: apt-get "
        "install python3-venv)",
    )


def _environment(
    where: str, log: str, inputs: LayerInputs
) -> LockError | EnvironmentProblem | None:
    """Failures of the machine or the base, whatever pip concluded from them afterwards."""
    full = disk_full(where, log)
    if full:
        return full
    if _NO_VENV.search(log):
        return no_venv(where)
    resolving = _after_tools(log)  # retries while installing the tools are not the index's
    if network_failure(resolving):
        return unreachable_index(where, resolving, (inputs.index_url, inputs.extra_index_url))
    if _TOOLS_FAILED in log:
        return EnvironmentProblem(
            f"{where}: pip-tools could not be installed into the lock environment: "
            f"{redact(last_word(log))}",
            "check the network and the CA bundle (SSL_CERT_FILE); the tools come from "
            + redact(tools_index()),
        )
    return None


def _after_tools(log: str) -> str:
    """The log from the first step after the tools were installed (all of it when none)."""
    markers = [log.find(lock_driver.STEP_PREFIX + word) for word in ("resolving", "reading")]
    found = [at for at in markers if at >= 0]
    return log[min(found) :] if found else log


def not_found(where: str, requirement: str, installed: Mapping[str, Constraint]) -> LockError:
    name = canonicalize_name(re.split(r"[<>=!~;\[ ]", requirement)[0])
    if name in installed:
        asked = f"that version is not on the recipe's indexes (pip asked for {requirement})"
        return conflict(where, installed[name], asked)
    return LockError(
        f"{where}: no version of {requirement} on the recipe's indexes",
        "check the name and version, or declare the index that has it in image.toml",
    )


def conflict(where: str, constraint: Constraint, asked: str) -> ResolutionConflict:
    return ResolutionConflict(
        f"{where}: {constraint.name} {constraint.version} was installed earlier by "
        f"{constraint.origin}, but {asked}",
        f"keep {constraint.name} at {constraint.version} in this layer (relax what asks for "
        "another version), or add a [[policy.waiver]] for it in image.toml",
    )


def _generic(where: str, log: str) -> LockError | EnvironmentProblem:
    return LockError(
        f"{where}: pip-compile failed: {redact(last_word(log, ('ERROR:',)))}",
        "fix the requirements file, or check that the recipe's indexes are reachable",
    )
