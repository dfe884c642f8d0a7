"""One layer's resolution job, what a resolver gives back, and what every resolver shares.

A :class:`CompileJob` is backend-neutral: the layer's inputs (requirements and indexes), what is
installed before the layer (as existing pins and stand-in wheels), re-pins and preferences. The
work folder (:func:`prepare_work`) lays it out the same way for every backend: the recipe's
files under ``recipe/`` at their recipe-relative paths, the stand-ins, ``installed.txt``,
``compiled.txt`` (the output the resolver starts from) and ``constraints.txt``.

Also here: the cache folder, the machine's CA bundle (TLS only, never part of a lock), the
tools index, and the index probe that tells an unreachable index from a missing package.
"""

from __future__ import annotations

import functools
import os
import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from audit.errors import EnvironmentProblem
from audit.lock.plan import LayerInputs
from audit.redact import redact

TOOLS_INDEX_ENV = "LAYER_AUDIT_TOOLS_INDEX_URL"
DEFAULT_TOOLS_INDEX = "https://pypi.org/simple"
CACHE_ENV = "LAYER_AUDIT_CACHE"
OnLine = Callable[[str], None]
INSTALLED = "installed.txt"
CONSTRAINTS = "constraints.txt"
OUTPUT = "compiled.txt"
REPORT = "report.json"
STANDINS = "standins"
WORK_PREFIX = "layer-audit-lock-"  # every work folder's name starts so (clean-up finds them)


@dataclass(frozen=True)
class CompileJob:
    """One layer to lock: its inputs, what is installed before it (as existing pins and as
    stand-in wheels), and whether it is a no_deps re-pin (no resolution)."""

    inputs: LayerInputs
    existing: str  # "name==version" lines of everything installed before the layer
    standins: Mapping[str, bytes]  # wheel filename -> bytes
    no_deps: bool = False
    overrides: tuple[str, ...] = ()  # "name==version" pins that win over the resolution
    preferred: str = ""  # the existing output the resolver starts from ("": ``existing``)
    constraints: str = ""  # "name==version" lines --upgrade-package asked for
    # (canonical name, version) -> (requires_dist, requires_python) of the layer's previous
    # lock: a pin that did not move needs no metadata read from the index again
    known: Mapping[tuple[str, str], tuple[tuple[str, ...], str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    returncode: int
    output: str  # what the resolver wrote (empty for a no_deps layer or on failure)
    report: str  # pip's --report JSON shape of what the layer installs or moves ("" when none)
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
    """TLS for our own requests to an index: the machine's CA bundle when it names one. One
    context per bundle for the process (the connection pools of :mod:`http_fetch` are kept
    per context, so every caller shares the kept connections)."""
    bundle = ambient_ca_bundle()
    return _context(str(bundle) if bundle else None)


@functools.lru_cache(maxsize=8)
def _context(bundle: str | None) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=bundle)


def tools_index() -> str:
    return os.environ.get(TOOLS_INDEX_ENV, DEFAULT_TOOLS_INDEX)


def prepare_work(work: Path, job: CompileJob) -> None:
    """The folder a resolver sees: the recipe's files at their recipe-relative paths, the
    stand-in wheels, the existing pins (twice: the resolver rewrites its copy)."""
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


_OPTION_LINE = re.compile(r"^\s*--(index-url|extra-index-url|find-links|trusted-host)\b")


def clean_body(text: str) -> str:
    """A resolver's output with any index option dropped and LF line ends, newline-terminated."""
    lines = [
        line for line in text.replace("\r\n", "\n").split("\n") if not _OPTION_LINE.match(line)
    ]
    return "\n".join(lines).strip("\n") + "\n"


# -- what every resolver's failures share ---------------------------------------------------------

_TRACEBACK_LINE = re.compile(r'^(Traceback \(most recent call last\)|\s+File "|\s{4,}\S|\s+\^+$)')


def meaningful_lines(log: str) -> list[str]:
    """The log without Python traceback frames and blank lines (what a user can act on)."""
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    return [line for line in lines if not _TRACEBACK_LINE.match(line)]


def tail(log: str, lines: int = 8) -> str:
    """The last meaningful lines the tools printed, indented: what a user would have seen."""
    kept = meaningful_lines(log)[-lines:]
    return "\n".join(f"  | {line}" for line in kept)


def last_word(log: str, prefixes: tuple[str, ...] = ("ERROR:", "error:", "WARNING:")) -> str:
    """The tools' last line that starts with one of ``prefixes`` (else the last meaningful)."""
    lines = meaningful_lines(log)
    marked = [line.strip() for line in lines if line.strip().startswith(prefixes)]
    return (marked or [line.strip() for line in lines] or ["no output"])[-1]


def unreachable_index(where: str, log: str, urls: tuple[str | None, ...]) -> EnvironmentProblem:
    """Exit 3 naming the indexes (redacted), the cause and the tools' last meaningful line."""
    indexes = ", ".join(redact(u) for u in urls if u)
    return EnvironmentProblem(
        f"{where}: the index did not answer ({network_cause(log)}): {indexes}\n"
        f"  last: {redact(last_word(log))}",
        "check the network (lock containers use --network host), the index and the CA "
        "bundle (SSL_CERT_FILE), then run lock again",
    )


_HTTP_STATUS = re.compile(
    r"(?:HTTP error|status code|response|HTTP status) ?(?P<code>5\d\d)"
    r"|(?P<code2>5\d\d) (?:Server Error|Service Unavailable|Bad Gateway|Gateway Time)"
)
_REFUSED = re.compile(
    r"Connection refused|NewConnectionError|Name or service not known|dns error"
    r"|Temporary failure in name resolution|Network is unreachable|tcp connect error"
)
_NETWORK = re.compile(
    r"Max retries exceeded|NewConnectionError|Could not fetch URL|SSLError|"
    r"IncompleteDownloadError|IncompleteRead|Connection broken|ProtocolError|Read timed out|"
    r"Failed to fetch|error sending request|operation timed out"
)


def network_failure(log: str) -> bool:
    return bool(_HTTP_STATUS.search(log) or _REFUSED.search(log) or _NETWORK.search(log))


def network_cause(log: str) -> str:
    status = _HTTP_STATUS.search(log)
    if status:
        return f"HTTP {status['code'] or status['code2']}"
    return "connection refused or unreachable" if _REFUSED.search(log) else "connection failed"


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


def probe_indexes(inputs: LayerInputs, log: str) -> EnvironmentProblem | None:
    """When the resolver saw no version at all, ask each index once: an index that does not
    answer (pip hides 5xx and refusals behind "from versions: none") is the machine's problem."""
    for url in (inputs.index_url, inputs.extra_index_url):
        cause = probe_index(url) if url else None
        if cause:
            return EnvironmentProblem(
                f"{inputs.step.label}: the index did not answer ({cause}): {redact(url or '')}\n"
                f"  last: {redact(last_word(log))}",
                "check the network (lock containers use --network host), the index and the CA "
                "bundle (SSL_CERT_FILE), then run lock again",
            )
    return None


# pip (and pip-compile) found no candidate it may use for a requirement
_NO_CANDIDATE = re.compile(
    r"(?:No matching distribution found for|Could not find a version that satisfies the "
    r"requirement) (?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)"
)


def sources_only(inputs: LayerInputs, log: str) -> tuple[str, str] | None:
    """(name, newest version) of the requirement pip found no candidate for, when the recipe's
    indexes list only source distributions of it (pip refused to build one, ``--only-binary``);
    None when pip's failure was another one or an index cannot tell."""
    from audit.errors import AuditError
    from audit.history.snapshot import canonical_name
    from audit.index.http import FetchStats
    from audit.index.simple import project_files
    from audit.lock.host_builds import newest_sdist

    found = _NO_CANDIDATE.search(log)
    if found is None:
        return None
    name = canonical_name(found["name"])
    files: list[str] = []
    for url in filter(None, (inputs.index_url, inputs.extra_index_url)):
        try:
            listed = project_files(url, name, context=tls_context(), stats=FetchStats())
        except AuditError:
            return None
        files += [item.filename for item in listed]
    version = newest_sdist(files)
    return (name, version) if version is not None else None


def disk_full(where: str, log: str) -> EnvironmentProblem | None:
    if "No space left on device" not in log:
        return None
    return EnvironmentProblem(
        f"{where}: the disk filled up while the resolver downloaded or built",
        f"free space where the lock cache lives ({cache_root()}) and run lock again",
    )


def metadata_item(
    name: str, version: str, requires: Sequence[str], python: str
) -> dict[str, object]:
    """One ``install[]`` item of pip's report holding only what a lock records of a pin."""
    return {"metadata": {"name": name, "version": version, "requires_dist": list(requires),
                         "requires_python": python}}  # fmt: skip
