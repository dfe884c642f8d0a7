"""Running pip-compile for one layer, hermetically, for the recipe's platform and interpreter.

By default inside the base image (``docker run``, emulated with ``--platform`` when foreign),
with pip-tools in a throwaway virtual environment made from the image's own interpreter and
cached in a host folder keyed by image id (mounted at /cache), so the next run starts at once.
``--host`` runs the same driver with the host's interpreter, allowed only when the host's
platform and Python match the base record.

Hermetic: the driver builds pip-compile's environment from scratch (no ``PIP_*`` from anywhere,
``PIP_CONFIG_FILE=/dev/null``, pip ``--isolated``, ``--no-config``), names only the recipe's
indexes, and emits no index URL, find-links or trusted host. A CA bundle only reaches TLS.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import ssl
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

from audit.core.errors import EnvironmentProblem, LockError, ResolutionConflict, UsageError
from audit.core.redact import redact
from audit.engines import docker_host
from audit.engines import process as commands
from audit.engines.container import Container
from audit.plan.lock import PIP_TOOLS_VERSION, PIP_VERSION, Constraint, LayerInputs
from audit.plan.lockfile import BaseRecord

TOOLS_INDEX_ENV = "LAYER_AUDIT_TOOLS_INDEX_URL"
DEFAULT_TOOLS_INDEX = "https://pypi.org/simple"
CACHE_ENV = "LAYER_AUDIT_CACHE"
CA_TARGET = "/run/layer-audit-ca.pem"
OnLine = Callable[[str], None]
INSTALLED = "installed.txt"
CONSTRAINTS = "constraints.txt"
OUTPUT = "compiled.txt"
REPORT = "report.json"
STANDINS = "standins"
ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}

# Runs under the target interpreter (Python 3.9+, stdlib only). argv: cache folder, work
# folder, tools index, CA bundle or "". Builds the pip-tools venv once per interpreter (under a
# file lock: two runs may share the cache), then does the job in work/job.json in an
# environment made from nothing: pip-compile (unless the layer is no_deps), then a pip
# --dry-run --report of what the layer installs or moves, for its metadata (and, for a no_deps
# layer, its hashes). Exits with the first failing step's code.
DRIVER = """\
import fcntl, json, os, platform, re, shutil, subprocess, sys
cache, work, tools_index, cert = sys.argv[1:5]
job = json.load(open(os.path.join(work, "job.json")))
tag = "py%d%d-%s" % (sys.version_info[0], sys.version_info[1], platform.machine())
PIP_TOOLS, PIP = "@PIP_TOOLS@", "@PIP@"
tools = os.path.join(cache, "pip-tools-%s-pip-%s-%s" % (PIP_TOOLS, PIP, tag))
env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.path.join(cache, "home"),
       "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
       "LC_ALL": "C.UTF-8", "PYTHONNOUSERSITE": "1", "TMPDIR": os.path.join(cache, "tmp")}
certs = ["--cert", cert] if cert else []
if cert:
    env["SSL_CERT_FILE"] = cert
os.makedirs(env["HOME"], exist_ok=True)
os.makedirs(env["TMPDIR"], exist_ok=True)
def step(text):
    sys.stderr.write("layer-audit: %s\\n" % text)
    sys.stderr.flush()
with open(os.path.join(cache, ".tools.lock"), "w") as guard:
    fcntl.flock(guard, fcntl.LOCK_EX)
    if not os.path.exists(os.path.join(tools, ".complete")):
        step("installing pip-tools " + PIP_TOOLS)
        shutil.rmtree(tools + ".partial", ignore_errors=True)
        subprocess.check_call([sys.executable, "-m", "venv", tools + ".partial"], env=env)
        pip = [os.path.join(tools + ".partial", "bin", "python"), "-m", "pip"]
        subprocess.check_call(pip + ["install", "--isolated", "-q", "--index-url", tools_index]
                              + certs + ["pip==" + PIP, "pip-tools==" + PIP_TOOLS], env=env)
        open(os.path.join(tools + ".partial", ".complete"), "w").close()
        shutil.rmtree(tools, ignore_errors=True)
        os.rename(tools + ".partial", tools)
python = os.path.join(tools, "bin", "python")
recipe = os.path.join(work, "recipe")
if job["compile"]:
    step("resolving with pip-compile")
    code = subprocess.call([python, "-m", "piptools", "compile"] + certs + job["compile"],
                           env=env, cwd=recipe)
    if code:
        sys.exit(code)
def key(line):
    name, _, version = line.partition("==")
    return re.sub(r"[-_.]+", "-", name).lower(), version.strip()
if job["compile"]:
    installed = set(key(l) for l in open(os.path.join(work, "installed.txt")) if "==" in l)
    pins = [l.split(" ")[0].strip() for l in open(os.path.join(work, "compiled.txt"))
            if l[:1].isalnum() and "==" in l]
    overridden = set(key(o)[0] for o in job["overrides"])
    pins = [p for p in pins if key(p)[0] not in overridden] + job["overrides"]
    moved = [p for p in pins if key(p) not in installed]
    with open(os.path.join(work, "moved.txt"), "w") as handle:
        handle.write("".join(p + "\\n" for p in moved))
    wanted = ["-r", os.path.join(work, "moved.txt")] if moved else []
else:
    wanted = ["-r", job["requirements"]]
if wanted:
    step("reading what moves (pip --report)")
    report = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
              "--isolated", "--no-input", "--retries", "2", "--timeout", "30",
              "--report", os.path.join(work, "report.json")]
    sys.exit(subprocess.call(report + certs + job["report"] + wanted, env=env, cwd=recipe))
"""


@dataclass(frozen=True)
class CompileTarget:
    """Where pip-compile runs: in ``image`` (its interpreter) or on the host (``image`` None)."""

    image: str | None
    image_id: str
    interpreter: str
    platform: str  # linux/arm64
    ca_bundle: Path | None


@dataclass(frozen=True)
class CompileJob:
    """One layer to lock: its inputs, what is installed before it (as pip-compile's existing
    pins and as stand-in wheels), and whether it is a no_deps re-pin (no resolution)."""

    inputs: LayerInputs
    existing: str  # "name==version" lines of everything installed before the layer
    standins: Mapping[str, bytes]  # wheel filename -> bytes
    no_deps: bool = False
    overrides: tuple[str, ...] = ()  # "name==version" pins that win over the resolution
    preferred: str = ""  # the existing output pip-compile starts from ("": ``existing``)
    constraints: str = ""  # "name==version" lines --upgrade-package asked for


@dataclass(frozen=True)
class Outcome:
    returncode: int
    output: str  # what pip-compile wrote (empty for a no_deps layer or on failure)
    report: str  # pip's --report JSON of what the layer installs or moves ("" when nothing)
    log: str  # stderr and stdout of every step
    # hash-pinned override / no_deps lines when the backend compiled them (uv); None: take them
    # from pip's report (pip-tools, one hash: the file chosen for the target)
    repins: str | None = None


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "layer-audit" / "lock-tools"


def ambient_ca_bundle(env: Mapping[str, str] = os.environ) -> Path | None:
    """The machine's CA bundle, if it names one: used for TLS only, never part of a lock."""
    for key in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE"):
        value = env.get(key)
        if value and Path(value).is_file():
            return Path(value)
    return None


def tls_context() -> ssl.SSLContext:
    """TLS for our own requests to an index: the machine's CA bundle when it names one."""
    bundle = ambient_ca_bundle()
    return ssl.create_default_context(cafile=str(bundle) if bundle else None)


def tools_index() -> str:
    return os.environ.get(TOOLS_INDEX_ENV, DEFAULT_TOOLS_INDEX)


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


def host_target(recipe_platform: str, record: BaseRecord, interpreter: str) -> CompileTarget:
    problem = host_problem(recipe_platform, record, interpreter)
    if problem:
        raise UsageError(
            f"--host: cannot compile on this machine: {problem}",
            "drop --host to compile inside the base image (emulated when foreign)",
        )
    return CompileTarget(None, "host", sys.executable, recipe_platform, ambient_ca_bundle())


def driver_source() -> str:
    return DRIVER.replace("@PIP_TOOLS@", PIP_TOOLS_VERSION).replace("@PIP@", PIP_VERSION)


# -- arguments and work folder --------------------------------------------------------------


def index_args(inputs: LayerInputs) -> list[str]:
    args = ["--index-url", inputs.index_url]
    if inputs.extra_index_url:
        args += ["--extra-index-url", inputs.extra_index_url]
    return [*args, "--pre"] if inputs.pre else args


def compile_args(inputs: LayerInputs, constrained: bool = False) -> list[str]:
    """pip-compile's arguments: hashes, explicit indexes, the stand-ins as find-links, the
    existing output as preferences; nothing machine-specific emitted."""
    args = [
        "--no-header", "--no-config", "--generate-hashes", "--strip-extras",
        "--allow-unsafe", "--no-emit-index-url", "--no-emit-trusted-host",
        "--no-emit-find-links", "--newline", "LF",
        "--pip-args", "--isolated --no-input --retries 2 --timeout 30",
        "--find-links", f"../{STANDINS}",
    ]  # fmt: skip
    limits = ["-c", f"../{CONSTRAINTS}"] if constrained else []
    return [*args, *index_args(inputs), *limits, "-o", f"../{OUTPUT}", inputs.requirements]


def job_document(job: CompileJob) -> dict[str, Any]:
    return {
        "compile": [] if job.no_deps else compile_args(job.inputs, bool(job.constraints)),
        "report": index_args(job.inputs),
        "requirements": job.inputs.requirements,
        "overrides": list(job.overrides),
    }


def prepare_work(work: Path, job: CompileJob) -> None:
    """The folder the driver sees: the recipe's files at their recipe-relative paths, the
    stand-in wheels, the existing pins (twice: pip-compile rewrites its copy) and the job."""
    for relpath, data in job.inputs.files.items():
        target = work / "recipe" / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (work / STANDINS).mkdir()
    for filename, data in job.standins.items():
        (work / STANDINS / filename).write_bytes(data)
    (work / INSTALLED).write_text(job.existing)
    (work / OUTPUT).write_text(job.preferred or job.existing)
    (work / CONSTRAINTS).write_text(job.constraints)
    (work / "job.json").write_text(json.dumps(job_document(job)))
    (work / "driver.py").write_text(driver_source())


# -- running --------------------------------------------------------------------------------


def _read_output(work: Path, job: CompileJob, returncode: int, log: str) -> Outcome:
    def text(name: str) -> str:
        path = work / name
        return path.read_text() if returncode == 0 and path.is_file() else ""

    output = "" if job.no_deps else text(OUTPUT)
    return Outcome(returncode, output, text(REPORT), log)


def _compile_on_host(target: CompileTarget, work: Path, on_line: OnLine) -> tuple[int, str]:
    cache = cache_root() / "host"
    cache.mkdir(parents=True, exist_ok=True)
    cert = str(target.ca_bundle) if target.ca_bundle else ""
    argv = [target.interpreter, "-I", str(work / "driver.py"), str(cache), str(work)]
    done = commands.stream(
        [*argv, tools_index(), cert],
        on_line,
        env={"PATH": os.defpath, "HOME": str(cache), "LC_ALL": "C.UTF-8"},
        check=False,
    )
    return done.returncode, done.stderr + done.stdout


def _compile_in_image(target: CompileTarget, work: Path, on_line: OnLine) -> tuple[int, str]:
    assert target.image is not None
    cache = cache_root() / target.image_id.removeprefix("sha256:")[:16]
    cache.mkdir(parents=True, exist_ok=True)
    mounts = [
        docker_host.BindMount(cache, "/cache", read_only=False),
        docker_host.BindMount(work, "/work", read_only=False),
    ]
    if target.ca_bundle:
        mounts.append(docker_host.BindMount(target.ca_bundle, CA_TARGET))
    cert = CA_TARGET if target.ca_bundle else ""
    argv = [target.interpreter, "-I", "/work/driver.py", "/cache", "/work", tools_index(), cert]
    user = f"{os.getuid()}:{os.getgid()}"
    with Container(
        target.image, argv, mounts=mounts, network="host", platform=target.platform, user=user
    ) as box:
        box.start()
        box.follow(on_line)
        code = box.wait()
        out, err = box.logs()
    return code, err + out


def run_compile(target: CompileTarget, job: CompileJob, on_line: OnLine = print) -> Outcome:
    """Run one layer's job in a fresh work folder; the folder is always removed. Each line of
    the tools' output goes to ``on_line`` as it comes (progress)."""
    work = Path(tempfile.mkdtemp(prefix="layer-audit-lock-"))
    try:
        work.chmod(0o755)
        prepare_work(work, job)
        runner = _compile_on_host if target.image is None else _compile_in_image
        returncode, log = runner(target, work, on_line)
        return _read_output(work, job, returncode, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- output and failures --------------------------------------------------------------------

_OPTION_LINE = re.compile(r"^\s*--(index-url|extra-index-url|find-links|trusted-host)\b")


def clean_body(text: str) -> str:
    """pip-compile's output with any index option dropped and LF line ends, newline-terminated."""
    lines = [
        line for line in text.replace("\r\n", "\n").split("\n") if not _OPTION_LINE.match(line)
    ]
    return "\n".join(lines).strip("\n") + "\n"


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


def _blocked(requirement: str, installed: Mapping[str, Constraint]) -> Constraint | None:
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
    tools, a conflict with what is installed, or a name no index has; the tail of pip's output
    and where the whole log is."""
    where = f"{inputs.step.label}"
    error = _environment(where, log, inputs) or _explained(where, log, inputs, installed)
    tail = _tail(log)
    detail = f"\n{tail}" if tail and not isinstance(error, ResolutionConflict) else ""
    saved = f" (full log: {log_path})" if log_path else ""
    return type(error)(error.message + detail, error.hint + saved)


def _explained(
    where: str, log: str, inputs: LayerInputs, installed: Mapping[str, Constraint]
) -> LockError | EnvironmentProblem:
    for requirement, who in resolver_causes(log, inputs.requirements):
        constraint = _blocked(requirement, installed)
        if constraint:
            return _conflict(where, constraint, f"{who} asks for {requirement}")
    missing = _NOT_FOUND.search(log)
    if missing:
        down = _unreachable(inputs) if "(from versions: none)" in log else None
        return down or _not_found(where, missing["req"], installed)
    return _generic(where, log)


def _unreachable(inputs: LayerInputs) -> EnvironmentProblem | None:
    """When pip saw no version at all, ask each index once: an index that does not answer (pip
    hides its 5xx and refusals behind "from versions: none") is the machine's problem."""
    for url in (inputs.index_url, inputs.extra_index_url):
        cause = probe_index(url) if url else None
        if cause:
            return EnvironmentProblem(
                f"{inputs.step.label}: the index did not answer ({cause}): {redact(url or '')}",
                "check the network (lock containers use --network host), the index and the CA "
                "bundle (SSL_CERT_FILE), then run lock again",
            )
    return None


def probe_index(url: str, timeout: float = 10.0) -> str | None:
    """Why ``url`` does not answer (``HTTP 503``, ``connection refused``), or None when it does."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout, context=tls_context()):  # noqa: S310 (http(s) only: the recipe refuses other schemes)
            return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}" if exc.code >= 500 else None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return "connection refused" if "refused" in str(reason).lower() else f"{reason}"


def _tail(log: str, lines: int = 8) -> str:
    """The last lines pip printed, indented: what a user would have seen had it run here."""
    kept = [line.rstrip() for line in log.strip().splitlines() if line.strip()][-lines:]
    return "\n".join(f"  | {line}" for line in kept)


_HTTP_STATUS = re.compile(
    r"(?:HTTP error|status code|response) ?(?P<code>5\d\d)"
    r"|(?P<code2>5\d\d) (?:Server Error|Service Unavailable|Bad Gateway|Gateway Time)"
)
_REFUSED = re.compile(
    r"Connection refused|NewConnectionError|Name or service not known"
    r"|Temporary failure in name resolution|Network is unreachable"
)
_NO_VENV = re.compile(r"ensurepip is not available|No module named (?:venv|ensurepip)")


def _environment(
    where: str, log: str, inputs: LayerInputs
) -> LockError | EnvironmentProblem | None:
    """Failures of the machine or the base, whatever pip concluded from them afterwards."""
    if "No space left on device" in log:
        return EnvironmentProblem(
            f"{where}: the disk filled up while pip downloaded or built",
            f"free space where the lock cache lives ({cache_root()}) and run lock again",
        )
    if _NO_VENV.search(log):
        return LockError(
            f"{where}: the base image's interpreter cannot make a virtual environment "
            "(no venv/ensurepip), so pip-tools cannot run inside it",
            "use a base with python3-venv installed (Debian/Ubuntu: apt-get install "
            "python3-venv), or lock on this machine with --host when it matches the base",
        )
    if _HTTP_STATUS.search(log) or _REFUSED.search(log) or _NETWORK.search(log):
        indexes = ", ".join(redact(u) for u in (inputs.index_url, inputs.extra_index_url) if u)
        return EnvironmentProblem(
            f"{where}: the index did not answer ({_network_cause(log)}): {indexes}",
            "check the network (lock containers use --network host), the index and the CA "
            "bundle (SSL_CERT_FILE), then run lock again; the tools come from "
            + redact(tools_index()),
        )
    return None


def _network_cause(log: str) -> str:
    status = _HTTP_STATUS.search(log)
    if status:
        return f"HTTP {status['code'] or status['code2']}"
    return "connection refused or unreachable" if _REFUSED.search(log) else "connection failed"


def _not_found(where: str, requirement: str, installed: Mapping[str, Constraint]) -> LockError:
    name = canonicalize_name(re.split(r"[<>=!~;\[ ]", requirement)[0])
    if name in installed:
        asked = f"that version is not on the recipe's indexes (pip asked for {requirement})"
        return _conflict(where, installed[name], asked)
    return LockError(
        f"{where}: no version of {requirement} on the recipe's indexes",
        "check the name and version, or declare the index that has it in image.toml",
    )


def _conflict(where: str, constraint: Constraint, asked: str) -> ResolutionConflict:
    return ResolutionConflict(
        f"{where}: {constraint.name} {constraint.version} was installed earlier by "
        f"{constraint.origin}, but {asked}",
        f"keep {constraint.name} at {constraint.version} in this layer (relax what asks for "
        "another version), or add a [[policy.waiver]] for it in image.toml",
    )


_NETWORK = re.compile(
    r"Max retries exceeded|NewConnectionError|Could not fetch URL|SSLError|"
    r"IncompleteDownloadError|IncompleteRead|Connection broken|ProtocolError|Read timed out"
)


def _generic(where: str, log: str) -> LockError | EnvironmentProblem:
    if "CalledProcessError" in log:
        return EnvironmentProblem(
            f"{where}: pip-tools could not be installed into the lock environment",
            "check the network and the CA bundle (SSL_CERT_FILE); the tools come from "
            + redact(tools_index()),
        )
    errors = [line.strip() for line in log.splitlines() if line.strip().startswith("ERROR:")]
    detail = errors[0] if errors else (log.strip().splitlines() or ["no output"])[-1]
    return LockError(
        f"{where}: pip-compile failed: {detail}",
        "fix the requirements file, or check that the recipe's indexes are reachable",
    )
