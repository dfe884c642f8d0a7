"""The uv resolver backend: the same job as pip-compile in the image, on this machine, for the
target's Python and platform, with no image and no emulation.

``uv pip compile`` gets what pip-compile gets (the layer's requirements, the stand-in wheels of
everything installed as find-links, the installed versions as the existing output, whose pins uv
prefers while they satisfy), plus ``--python-version`` and ``--python-platform`` taken from the
base record (``python``, ``platform_machine``, ``libc``), so an arm64 / Python 3.12 lock is made
on an amd64 host and carries aarch64 wheel hashes. Overrides and no_deps pins are compiled with
``--no-deps --generate-hashes``; the metadata of what moves is read from the indexes without
downloading payloads (:mod:`audit.index.wheel_metadata`: PEP 658 metadata files, else range
requests into the wheel), and only a pin with no wheel for the target is downloaded (``uv pip
install --target --no-deps``), counted and reported.

uv runs here, so every uv process takes wheels only (``--only-binary :all:``): a source
distribution would be built, its code run, on this machine. A package ``lock --build-on-host``
names is the one exception (:mod:`audit.lock.host_builds`); any other with no wheel for the
target is refused by name (:func:`explain_uv_failure`).

Index semantics differ from pip's on purpose: uv's default ``first-index`` strategy takes a
package from the first index that has it, and a layer's declared extra index comes first, so a
name that exists on the nightly index can never be taken from the primary one (dependency
confusion); pip merges every index and takes the highest version anywhere.

uv is installed from the tools index into a cached virtual environment, version pinned
(:data:`UV_VERSION`, part of every uv lock's inputs).
"""

from __future__ import annotations

import email.parser
import functools
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from audit.docker.run_label import work_prefix
from audit.errors import EnvironmentProblem, LockError
from audit.history.snapshot import canonical_name
from audit.host import atomic
from audit.host import process as commands
from audit.index.http import FetchStats
from audit.index.simple import IndexFile, ProjectPages
from audit.index.wheel_metadata import (
    Metadata,
    fetch_many,
    parsed,
    read_wheel_metadata,
    target_tags,
)
from audit.lock.files import BaseRecord
from audit.lock.host_builds import WHEELS_ONLY, HostBuilds, refused
from audit.lock.plan import RESOLVERS, UV_VERSION, Constraint, LayerInputs
from audit.lock.progress import STEP_MARK
from audit.lock.resolvers.job import (
    CONSTRAINTS,
    OUTPUT,
    STANDINS,
    WORK_PREFIX,
    CompileJob,
    OnLine,
    Outcome,
    ambient_ca_bundle,
    cache_root,
    clean_body,
    disk_full,
    meaningful_lines,
    metadata_item,
    network_failure,
    prepare_work,
    probe_indexes,
    tls_context,
    tools_index,
    unreachable_index,
)
from audit.lock.resolvers.uv_cache import (
    cache_policy,
    close_run_cache,
    open_run_cache,
    private_bytes,
)
from audit.lock.resolvers.uv_warm import OUTPUT as AHEAD_OUTPUT
from audit.lock.resolvers.uv_warm import ReadAhead
from audit.redact import redact

RESOLVER = RESOLVERS["uv"]
REPINS = "repins.txt"
CONFIG = "uv.toml"
MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


@dataclass(frozen=True)
class UvTarget:
    """What uv resolves for: the base interpreter's Python version and platform triple."""

    python_version: str  # 3.12.3
    python_platform: str  # aarch64-manylinux_2_39


def uv_target(record: BaseRecord, interpreter: str, platform: str) -> UvTarget:
    """The target of ``interpreter`` in the base record (its markers and C library)."""
    env = next((e for e in record.environments if e.interpreter == interpreter), None)
    envs = record.environments
    env = env or (envs[0] if len(envs) == 1 else None)
    machine = (env.markers.get("platform_machine") if env else "") or platform.rsplit(
        "/", maxsplit=1
    )[-1]
    arch = MACHINES.get(machine, machine)
    libc = env.libc if env else ""
    glibc = libc.split()[-1].replace(".", "_") if libc.startswith("glibc ") else "2_28"
    python = env.python if env else f"{sys.version_info.major}.{sys.version_info.minor}"
    return UvTarget(python, f"{arch}-manylinux_{glibc}")


# -- the tool ----------------------------------------------------------------------------------


def uv_binary() -> Path:
    """uv, installed once into ``<cache>/host/uv-<version>`` (under a file lock)."""
    home = cache_root() / "host"
    venv = home / f"uv-{UV_VERSION}"
    binary = venv / "bin" / "uv"
    if binary.is_file():
        return binary
    home.mkdir(parents=True, exist_ok=True)
    with atomic.exclusive(home / ".uv.lock"):
        if not binary.is_file():
            _install_uv(venv)
    return binary


def _install_uv(venv: Path) -> None:
    partial = venv.with_name(venv.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    commands.run([sys.executable, "-m", "venv", str(partial)], capture=True)
    # a wheel only: uv's source distribution would be compiled (its build code run) here
    pip = [str(partial / "bin" / "python"), "-m", "pip", "install", "--isolated", "-q",
           "--only-binary", ":all:"]  # fmt: skip
    bundle = ambient_ca_bundle()
    certs = ["--cert", str(bundle)] if bundle else []
    done = commands.run(
        [*pip, *certs, "--index-url", tools_index(), f"uv=={UV_VERSION}"], check=False
    )
    if done.returncode != 0:
        raise EnvironmentProblem(
            f"could not install uv {UV_VERSION} from {redact(tools_index())}",
            "check the network and the CA bundle (SSL_CERT_FILE), or set "
            'resolver = "pip-tools" under [image] in image.toml',
        )
    partial.rename(venv)


# -- one layer ---------------------------------------------------------------------------------


def common_args(
    inputs: LayerInputs, target: UvTarget, builds: HostBuilds, config: str = f"../{CONFIG}"
) -> list[str]:
    """The target's arguments; the indexes are in the run's configuration (:func:`uv_config`).

    Wheels only, but for the packages ``builds`` allows: uv builds a source distribution (runs
    its code) to read its dependencies, and it would do so on this machine
    (:mod:`audit.lock.host_builds`); refused, uv names the package (:func:`explain_uv_failure`).

    uv resolves for ``--python-version``/``--python-platform`` but wants an interpreter to run
    beside: this one (``--python``; never a download, :func:`uv_environment`). Without it, uv
    looks for one of exactly the target's version and, finding none, downloads a managed
    CPython (tens of MB) or, with no route to it, retries for seconds on every compile.
    """
    args = ["--no-config", "--config-file", config, "--python", sys.executable]
    if inputs.pre:
        args += ["--prerelease", "allow"]
    return [*args, *builds.resolver_args(), "--python-version", target.python_version,
            "--python-platform", target.python_platform]  # fmt: skip


def uv_config(inputs: LayerInputs, run_cache: bool) -> str:
    """uv's configuration for one invocation: the layer's indexes in uv's order (the extra
    index first, the primary one last as the default); in a run's own cache
    (:mod:`~audit.lock.resolvers.uv_cache`), how long uv may reuse their answers, so the
    processes of one run share what the others fetched."""
    policy = f"cache-control = {cache_policy()}\n" if run_cache else ""
    urls = [(inputs.extra_index_url, False), (inputs.index_url, True)]
    return "".join(
        f"[[index]]\nurl = {json.dumps(url)}\n{'default = true' if default else ''}\n{policy}\n"
        for url, default in urls
        if url
    )


def read_ahead_argv(
    target: UvTarget, builds: HostBuilds, inputs: LayerInputs, work: Path
) -> list[str]:
    """``uv pip compile`` of the read-ahead's union file in ``work/recipe`` (its configuration
    written beside, as a layer's is): pages and metadata land in the run's uv cache; its log
    (``-v``) names each wheel whose metadata uv fetches, as it fetches it."""
    (work / CONFIG).write_text(uv_config(inputs, run_cache=True))
    argv = ["pip", "compile", "layer-audit-read-ahead.in", "-o", f"../{AHEAD_OUTPUT}",
            "--format", "pylock.toml", "--no-header", "-v"]  # fmt: skip
    return [str(uv_binary()), *argv, *common_args(inputs, target, builds)]


def shared_cache() -> Path:
    """uv's cache shared by every run (a run works in its own folder beside it)."""
    return cache_root() / "host" / "uv-cache"


def metadata_cache() -> Path:
    """Wheel metadata read from the indexes, by the wheel's sha256 (a file never changes)."""
    return cache_root() / "host" / "metadata"


def uv_environment(run_cache: Path | None = None) -> dict[str, str]:
    """uv's environment, made from nothing: no UV_*/PIP_* configuration of this machine; uv's
    cache is the run's own (:mod:`~audit.lock.resolvers.uv_cache`) when there is one."""
    env = {"PATH": os.defpath, "HOME": str(cache_root() / "host" / "home"), "LC_ALL": "C.UTF-8"}
    env["UV_CACHE_DIR"] = str(run_cache or shared_cache())
    env["UV_PYTHON_DOWNLOADS"] = "never"  # the target is a version, not an interpreter to fetch
    bundle = ambient_ca_bundle()
    if bundle:
        env["SSL_CERT_FILE"] = str(bundle)
    return env


def _key(line: str) -> tuple[str, str]:
    name, _, version = line.partition("==")
    return canonical_name(name.strip()), version.split()[0].strip() if version else ""


def _pin_lines(text: str) -> list[str]:
    return [line.split(" ")[0].strip() for line in text.splitlines() if line[:1].isalnum()]


def moved_lines(job: CompileJob, compiled: str, requirements: str) -> list[str]:
    """``name==version`` of what the layer installs or moves (the driver's rule, on the host)."""
    installed = {_key(line) for line in job.existing.splitlines() if "==" in line}
    overridden = {_key(o)[0] for o in job.overrides}
    if job.no_deps:
        pins = [p for p in _pin_lines(requirements) if "==" in p]
    else:
        pins = [p for p in _pin_lines(compiled) if _key(p)[0] not in overridden]
        pins += list(job.overrides)
    return [p for p in pins if _key(p) not in installed]


def run_uv(
    target: UvTarget,
    job: CompileJob,
    on_line: OnLine = print,
    ahead: ReadAhead | None = None,
    builds: HostBuilds = WHEELS_ONLY,
) -> Outcome:
    """One layer's job with uv in a fresh work folder; the folder is always removed. Output
    lines and step announcements go to ``on_line`` as they come. ``ahead``: the run's
    read-ahead, whose metadata the layer takes for the pins it holds; ``builds``: the source
    distributions uv may build here (no other)."""
    work = Path(tempfile.mkdtemp(prefix=work_prefix(WORK_PREFIX)))
    try:
        prepare_work(work, job)
        common = common_args(job.inputs, target, builds)
        session = _Session(work, common, on_line, job.inputs, ahead)
        return _run(session, target, job)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class _Session:
    """One layer's uv runs: the work folder, the target's arguments, the log, the progress."""

    work: Path
    common: list[str]
    on_line: OnLine
    inputs: LayerInputs
    ahead: ReadAhead | None = None
    log: list[str] = field(default_factory=list)

    def uv(self, argv: list[str]) -> int:
        """Run ``uv ARGV`` (with the target's arguments) in the recipe folder; its exit code."""
        self.on_line(f"{STEP_MARK}{' '.join(argv[:2])} with uv {UV_VERSION}")
        (self.work / CONFIG).write_text(uv_config(self.inputs, self.ahead is not None))
        done = commands.stream(
            [str(uv_binary()), *argv, *self.common],
            self.on_line,
            cwd=self.work / "recipe",
            env=uv_environment(self.ahead.cache if self.ahead else None),
            check=False,
        )
        self.log.append(done.stderr + done.stdout)
        return done.returncode

    def note(self, text: str) -> None:
        """A line of this layer's own (progress and the kept log)."""
        self.on_line(f"{STEP_MARK}{text}")
        self.log.append(f"layer-audit: {text}")

    def failed(self, code: int) -> Outcome:
        return Outcome(code or 1, "", "", "\n".join(self.log))


def _run(session: _Session, target: UvTarget, job: CompileJob) -> Outcome:
    work = session.work
    compiled = ""
    if not job.no_deps:
        argv = ["pip", "compile", job.inputs.requirements, "-o", f"../{OUTPUT}",
                "--generate-hashes", "--no-header", "--find-links", f"../{STANDINS}"]  # fmt: skip
        argv += ["-c", f"../{CONSTRAINTS}"] if job.constraints else []
        code = session.uv(argv)
        if code:
            return session.failed(code)
        compiled = (work / OUTPUT).read_text()
    requirements = (work / "recipe" / job.inputs.requirements).read_text()
    moved = moved_lines(job, compiled, requirements)
    repins = _repins(session, job, moved)
    report = _metadata(session, job, target, moved) if repins is not None else None
    if repins is None or report is None:
        return session.failed(1)
    return Outcome(0, compiled, report, "\n".join(session.log), repins)


def _repins(session: _Session, job: CompileJob, moved: list[str]) -> str | None:
    """Hash-pinned lines of the override / no_deps pins that move ("" when none do)."""
    names = {_key(o)[0] for o in job.overrides}
    wanted = [m for m in moved if job.no_deps or _key(m)[0] in names]
    if not wanted:
        return ""
    (session.work / "repins.in").write_text("".join(f"{line}\n" for line in wanted))
    argv = ["pip", "compile", "../repins.in", "-o", f"../{REPINS}", "--no-deps",
            "--generate-hashes", "--no-header", "--no-annotate"]  # fmt: skip
    if session.uv(argv):
        return None
    return clean_body((session.work / REPINS).read_text())


def _metadata(session: _Session, job: CompileJob, target: UvTarget, moved: list[str]) -> str | None:
    """pip's --report shape (``install[].metadata``) for the moved pins: their published
    metadata read from the indexes without payloads (PEP 658 files, else range requests into
    the wheel: :mod:`audit.index.wheel_metadata`); only a pin the indexes hold no wheel of for
    the target (an sdist-only release) is downloaded, and the run says how many were."""
    if not moved:
        return json.dumps({"install": []})
    stats = FetchStats()
    pins = [_key(m) for m in moved]
    unknown = [pin for pin in pins if pin not in job.known]
    ahead = session.ahead.take(job.inputs, unknown) if session.ahead else {}
    unknown = [pin for pin in unknown if pin not in ahead]
    pages = session.ahead.pages if session.ahead else None
    found, missing = metadata_from_indexes(job.inputs, target, unknown, stats, pages)
    found += ahead.values()
    reused = len(pins) - len(unknown) - len(ahead)
    session.note(f"metadata of {len(moved)} moved pins ({reused} from the previous lock, "
                 f"{len(ahead)} read ahead): {stats.summary()}")  # fmt: skip
    if session.ahead is not None:
        kept = private_bytes(session.ahead.cache) / 1e6
        session.note(f"read ahead so far: {session.ahead.stats.summary()}; "
                     f"uv's project pages of this run so far: {kept:.2f} MB")  # fmt: skip
    items = [metadata_item(name, version, *job.known[name, version])
             for name, version in pins if (name, version) in job.known]  # fmt: skip
    items += [metadata_item(meta.name, meta.version, meta.requires_dist, meta.requires_python)
              for meta in found]  # fmt: skip
    if missing:
        names = ", ".join(sorted(missing))
        session.note(f"no wheel for the target on the indexes: downloading {names} (metadata)")
        downloaded = _downloaded(session, [m for m in moved if _key(m)[0] in missing])
        if downloaded is None:
            return None
        items += downloaded
    return json.dumps({"install": items})


def metadata_from_indexes(
    inputs: LayerInputs,
    target: UvTarget,
    pins: list[tuple[str, str]],
    stats: FetchStats,
    pages: ProjectPages | None = None,
) -> tuple[list[Metadata], set[str]]:
    """(metadata found, canonical names no index has a wheel of), asking the indexes in uv's
    order: the layer's extra index first (``first-index``), then the primary one."""
    machine, _, libc = target.python_platform.partition("-manylinux_")
    tags = target_tags(machine, target.python_version, libc.replace("_", ".") or "2.28")
    cache = metadata_cache()
    indexes = [url for url in (inputs.extra_index_url, inputs.index_url) if url]
    found: list[Metadata] = []
    wanted = list(pins)
    for index in indexes:
        if not wanted:
            break
        answers = fetch_many(index, wanted, tags=tags, stats=stats, cache=cache, pages=pages)
        found += [got for got in answers.values() if isinstance(got, Metadata)]
        wanted = [pin for pin in wanted if not isinstance(answers.get(pin[0]), Metadata)]
    return found, {name for name, _ in wanted}


def _read_ahead(
    target: UvTarget,
    inputs: LayerInputs,
    pin: tuple[str, str],
    file: IndexFile | None,
    *,
    stats: FetchStats,
    pages: ProjectPages,
) -> Metadata | None:
    """One read-ahead pin's metadata: from the wheel uv chose (no page), else the indexes."""
    if file is None:
        found, _ = metadata_from_indexes(inputs, target, [pin], stats, pages)
        return found[0] if found else None
    cache = metadata_cache()
    raw, how = read_wheel_metadata(file, context=tls_context(), stats=stats, cache=cache)
    meta = parsed(raw, file, how)
    return meta if canonical_name(meta.name) == pin[0] else None


def _downloaded(session: _Session, pins: list[str]) -> list[dict[str, object]] | None:
    """The fallback: ``uv pip install --target --no-deps`` of exactly ``pins``, METADATA read."""
    (session.work / "moved.txt").write_text("".join(f"{line}\n" for line in pins))
    folder = session.work / "meta"
    argv = ["pip", "install", "--target", str(folder), "--no-deps", "-r", "../moved.txt",
            "--quiet", "--find-links", f"../{STANDINS}"]  # fmt: skip
    if session.uv(argv):
        return None
    return [_read_metadata(p) for p in sorted(folder.glob("*.dist-info"))]


def _read_metadata(folder: Path) -> dict[str, object]:
    message = email.parser.Parser().parsestr((folder / "METADATA").read_text(errors="replace"))
    return metadata_item(
        message.get("Name", ""),
        message.get("Version", ""),
        message.get_all("Requires-Dist") or [],
        message.get("Requires-Python") or "",
    )


# -- the resolver -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Uv:
    """uv on this machine, for the base's Python and platform: no image, no emulation."""

    target: UvTarget
    builds: HostBuilds = WHEELS_ONLY  # the source distributions it may build here
    label: str = RESOLVER
    merges_indexes: bool = False  # uv's first-index strategy: the extra index wins by itself
    _ahead: list[ReadAhead] = field(default_factory=list, compare=False, repr=False)

    def compile(self, job: CompileJob, on_line: OnLine) -> Outcome:
        ahead = self._ahead[-1] if self._ahead else None
        return run_uv(self.target, job, on_line, ahead, self.builds)

    @contextmanager
    def warm(
        self, layers: Sequence[LayerInputs], installed: Collection[tuple[str, str]]
    ) -> Iterator[None]:
        """Read ahead for ``layers`` (the run's stale ones) while they compile
        (:mod:`~audit.lock.resolvers.uv_warm`); stopped when the block ends."""
        shared = shared_cache()
        run = open_run_cache(shared)
        ahead = ReadAhead(
            functools.partial(read_ahead_argv, self.target, self.builds),
            uv_environment(run),
            functools.partial(_read_ahead, self.target),
            installed,
            run,
        )
        self._ahead.append(ahead)
        try:
            ahead.start(layers)
            yield
        finally:
            ahead.stop()
            self._ahead.remove(ahead)
            close_run_cache(ahead.cache, shared)

    def explain(
        self, log: str, inputs: LayerInputs, installed: Mapping[str, Constraint], log_path: str
    ) -> LockError | EnvironmentProblem:
        return explain_uv_failure(log, inputs, log_path)

    def yanked(self, log: str) -> list[str]:
        return yanked_pins(log)


# -- uv's failures, in uv's words ---------------------------------------------------------------

_UV_YANKED = re.compile(
    r"`(?P<name>[^`=]+)==(?P<version>[^`]+)` is yanked(?: \(reason: \"(?P<reason>[^\"]*)\"\))?"
)
_UV_NOT_FOUND = re.compile(r"Because (?P<name>\S+) was not found in the package registry")
_UV_NO_SOLUTION = "No solution found when resolving dependencies"
# --only-binary :all: met a package with no wheel for the target (and the version it tried)
_UV_NO_WHEEL = re.compile(r"Wheels are required for `(?P<name>[^`]+)` because building from source")
_UV_UNUSABLE = re.compile(r"(?P<name>[A-Za-z0-9._-]+)==(?P<version>[^\s,]+) has no usable wheels")
IN_IMAGE_ROUTE = 'set resolver = "pip-tools" under [image] in image.toml'


def yanked_pins(log: str) -> list[str]:
    """'name version (reason)' for every yanked release uv warned about."""
    return [
        f"{m['name']} {m['version']} ({m['reason'] or 'no reason given'})"
        for m in _UV_YANKED.finditer(log)
    ]


def explain_uv_failure(
    log: str, inputs: LayerInputs, log_path: str = ""
) -> LockError | EnvironmentProblem:
    """A failed uv run as one clear error: the machine (exit 3), a source distribution it was
    not allowed to build here, a name no index has, or uv's own account of why no resolution
    exists (its "Because ..." lines), never pip's regexes."""
    where = inputs.step.label
    saved = f" (full log: {log_path})" if log_path else ""
    error = disk_full(where, log) or _uv_explained(where, log, inputs)
    return type(error)(error.message, error.hint + saved)


def _uv_explained(where: str, log: str, inputs: LayerInputs) -> LockError | EnvironmentProblem:
    if network_failure(log):
        return unreachable_index(where, log, (inputs.index_url, inputs.extra_index_url))
    sdist = source_only(log)
    if sdist is not None:
        return refused(where, *sdist, in_image_route=IN_IMAGE_ROUTE)
    missing = _UV_NOT_FOUND.search(log)
    if missing:
        return probe_indexes(inputs, log) or LockError(
            f"{where}: no version of {missing['name']} on the recipe's indexes",
            "check the name and version, or declare the index that has it in image.toml",
        )
    lines = [redact(line.strip(" ×╰─▶│")) for line in meaningful_lines(log)]
    if any(_UV_NO_SOLUTION in line for line in lines):
        why = [line for line in lines if line and _UV_NO_SOLUTION not in line][-6:]
        return LockError(
            f"{where}: uv found no resolution:\n" + "\n".join(f"  | {line}" for line in why),
            "relax the requirement uv names, or move what the earlier layers install "
            "(--upgrade-package NAME)",
        )
    last = next(
        (line for line in reversed(lines) if line.startswith("error:")),
        lines[-1] if lines else "no output",
    )
    return LockError(
        f"{where}: uv pip compile failed: {last}",
        "fix the requirements file, or check that the recipe's indexes are reachable",
    )


def source_only(log: str) -> tuple[str, str] | None:
    """(name, version or "") of the package uv found no wheel of and was not allowed to build."""
    wanted = _UV_NO_WHEEL.search(log)
    if wanted is None:
        return None
    name = canonical_name(wanted["name"])
    unusable = _UV_UNUSABLE.finditer(log)
    versions = [m["version"] for m in unusable if canonical_name(m["name"]) == name]
    return name, versions[0] if versions else ""
