"""Making a replica base image (``base-image --replica FILE``).

The plan: :mod:`audit.base.replica_plan`.

Steps: the offline Debian base for the suite and architecture (made when missing, as
``base-image`` makes it); its venv interpreter probed once (Python version, site-packages,
C library); each pin's published METADATA from the index for that interpreter and platform
(:func:`audit.index.wheel_metadata.fetch_many`: PEP 658 files or range requests, no payloads);
a build context of ``*.dist-info`` folders and ``replica.json``; one BuildKit build that only
COPYs (nothing runs under emulation). Pins the index lacks become stand-ins with the
requirements of ``--metadata-from SNAPSHOT`` when it has them, else none, each with a warning.

Invariant: the image is labelled ``io.layer-audit.replica=true`` (``lock --record-base`` then
records ``"source": "replica"``), and the same list, index answers and base give the same
build context byte for byte.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rich.markup import escape

from audit.base import replica_plan as plan
from audit.base.make import ensure_base_image
from audit.base.offline import ARCHES, LABEL_PREFIX, VENV
from audit.base.snapshot_file import parse_documents
from audit.build.plan import build_command
from audit.docker import host as docker_host
from audit.errors import MetadataUnavailable, UsageError
from audit.history.snapshot import Distribution, linux_markers
from audit.host import atomic, console
from audit.host import process as commands
from audit.index import wheel_metadata as wm
from audit.lock.plan import Constraint
from audit.lock.resolvers.job import cache_root
from audit.lock.trust import REPLICA_LABEL, REPLICA_STANDINS_LABEL
from audit.redact import redact

DEFAULT_INDEX = "https://pypi.org/simple"
# Prints the interpreter's version, purelib folder, glibc version, then the dist-info folders
# already there (pip, setuptools of the base's venv), one per line.
PROBE = (
    "import os, platform, sysconfig; site = sysconfig.get_paths()['purelib']; "
    "print(platform.python_version(), site, "
    "' '.join(os.confstr('CS_GNU_LIBC_VERSION').split()[-1:]) or '0.0'); "
    "print('\\n'.join(sorted(n for n in os.listdir(site) if n.endswith('.dist-info'))))"
)


def metadata_cache() -> Path:
    """Where read METADATA is kept, by wheel sha256 (never stale): ``<lock cache>/metadata``."""
    return cache_root() / "metadata"


@dataclass(frozen=True)
class ReplicaOptions:
    """What to replicate, for which base, from which index, tagged how."""

    pins_file: Path
    suite: str = "bookworm"
    arch: str = "arm64"
    tag: str = ""
    index_url: str = DEFAULT_INDEX
    metadata_from: Path | None = None
    docker: str | None = None
    cache: Path | None = None

    @property
    def image_tag(self) -> str:
        stem = "".join(c if c.isalnum() or c in "._-" else "-" for c in self.pins_file.stem)
        return self.tag or f"layer-audit/replica:{stem.lower()}-{self.arch}"


@dataclass
class Replica:
    """A made replica: tag, id, interpreter, counts, warnings and what the reads cost."""

    tag: str
    image_id: str
    python: str
    distributions: int
    warnings: list[str] = field(default_factory=list)
    stats: wm.FetchStats = field(default_factory=wm.FetchStats)
    seconds: float = 0.0


@dataclass(frozen=True)
class _Interpreter:
    python: str
    site_packages: str
    glibc: str
    present: tuple[str, ...] = ()  # dist-info folders the base's venv already holds


def _probe(base: str, platform: str) -> _Interpreter:
    out = docker_host.run_in_image(base, [f"{VENV}/bin/python", "-c", PROBE], platform=platform)
    first, *present = out.splitlines()
    python, site, glibc = first.split()
    return _Interpreter(python, site, glibc, tuple(present))


def _observed(path: Path | None) -> dict[str, Constraint]:
    """Name -> what a snapshot file saw installed (first interpreter that has it)."""
    if path is None:
        return {}
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--metadata-from {path}: cannot read ({exc.strerror})") from exc
    found: dict[str, Constraint] = {}
    for environment in parse_documents(data, str(path)):
        for dist in environment.distributions:
            found.setdefault(dist.name, _constraint(dist))
    return found


def _constraint(dist: Distribution) -> Constraint:
    requires = dist.requires_dist or ()
    return Constraint(
        dist.name, dist.version, "snapshot", requires, dist.requires_python, dist.raw_name
    )


def _read_pins(options: ReplicaOptions, machine: str, python: str) -> plan.PinList:
    try:
        text = options.pins_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--replica {options.pins_file}: cannot read ({exc})") from exc
    markers = linux_markers(machine, python)
    return plan.parse_pin_list(text, str(options.pins_file), markers)


def _files(
    pins: plan.PinList,
    got: Mapping[str, wm.Outcome],
    observed: Mapping[str, Constraint],
    warnings: list[str],
) -> tuple[dict[str, bytes], dict[str, dict[str, str]]]:
    """Every dist-info file (path -> bytes) and, per pin, where its METADATA came from."""
    files: dict[str, bytes] = {}
    reads: dict[str, dict[str, str]] = {}
    for pin in pins.pins:
        outcome = got[pin.name]
        if isinstance(outcome, wm.Metadata):
            metadata = outcome.raw
            sha = outcome.file.hashes.get("sha256", "")
            reads[pin.name] = {
                "metadata": outcome.how,
                "file": outcome.file.filename,
                "sha256": sha,
            }
        else:
            metadata = plan.no_index_metadata(pin, observed.get(pin.name))
            reads[pin.name] = {"metadata": "snapshot" if pin.name in observed else "none"}
            warnings.append(_no_index_warning(pin, outcome, pin.name in observed))
        files.update(plan.dist_info_files(pin, metadata))
    return files, reads


def _no_index_warning(
    pin: plan.ListedDistribution, why: MetadataUnavailable, observed: bool
) -> str:
    then = (
        "its requirements come from --metadata-from"
        if observed
        else "stand-in WITHOUT requirements (give --metadata-from SNAPSHOT to use observed ones)"
    )
    return f"{why.message}; {then}"


def _write_context(
    context: Path, files: Mapping[str, bytes], dockerfile: str, manifest: str
) -> None:
    for relpath, data in files.items():
        target = context / "site-packages" / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (context / "replica.json").write_text(manifest)
    (context / "Dockerfile").write_text(dockerfile)


def _build(options: ReplicaOptions, context: Path, platform: str) -> None:
    client = docker_host.detect_client(options.docker)
    argv = [
        *build_command(client),
        "--platform",
        platform,
        "--tag",
        options.image_tag,
        str(context),
    ]
    commands.run(argv, env=docker_host.client_env(client), capture=True)


def build_replica(options: ReplicaOptions) -> Replica:
    """Make the replica image of ``options.pins_file``; see the module docstring."""
    started = time.monotonic()
    machine = ARCHES[options.arch][0]
    base = ensure_base_image(options.suite, options.arch)
    platform = f"linux/{options.arch}"
    interpreter = _probe(base, platform)
    pins = _read_pins(options, machine, interpreter.python)
    made = Replica(options.image_tag, "", interpreter.python, len(pins.pins))
    made.warnings += [f"left out: {line}" for line in pins.skipped]
    short = ".".join(interpreter.python.split(".")[:2])
    tags = wm.target_tags(platform, short, interpreter.glibc)
    console.stderr.print(
        f"reading the metadata of {len(pins.pins)} distributions from {redact(options.index_url)} "
        f"for {platform}, Python {short} (no payloads)"
    )
    got = wm.fetch_many(
        options.index_url,
        [(p.raw_name, p.version) for p in pins.pins],
        tags=tags,
        stats=made.stats,
        cache=options.cache,
    )
    files, reads = _files(pins, got, _observed(options.metadata_from), made.warnings)
    labels = _labels(options, pins, interpreter, _standins(pins, reads))
    extra = {"list": options.pins_file.name, "list_digest": labels[f"{REPLICA_LABEL}.list"],
             "index": redact(options.index_url), "base": base, "python": interpreter.python,
             "platform": platform}  # fmt: skip
    manifest = plan.manifest(pins.pins, reads, extra)
    replaced = plan.replaced(interpreter.present, pins.pins)
    dockerfile = plan.dockerfile(base, interpreter.site_packages, labels, replaced)
    with _context_dir() as context:
        _write_context(context, files, dockerfile, manifest)
        _build(options, context, platform)
    made.image_id = docker_host.image_info(options.image_tag).id
    made.seconds = time.monotonic() - started
    return made


def _standins(pins: plan.PinList, reads: Mapping[str, Mapping[str, str]]) -> tuple[str, ...]:
    """``name==version`` of each pin whose METADATA no index gave (``snapshot`` or ``none``)."""
    found = ("snapshot", "none")
    return tuple(f"{p.name}=={p.version}" for p in pins.pins if reads[p.name]["metadata"] in found)


def _labels(
    options: ReplicaOptions,
    pins: plan.PinList,
    interpreter: _Interpreter,
    standins: tuple[str, ...] = (),
) -> dict[str, str]:
    standin_label = {REPLICA_STANDINS_LABEL: ",".join(standins)} if standins else {}
    return {
        **standin_label,
        REPLICA_LABEL: "true",
        f"{REPLICA_LABEL}.list": plan.list_digest(pins.pins),
        f"{REPLICA_LABEL}.index": redact(options.index_url),
        f"{REPLICA_LABEL}.python": interpreter.python,
        f"{LABEL_PREFIX}.suite": options.suite,
        f"{LABEL_PREFIX}.arch": options.arch,
        f"{LABEL_PREFIX}.venv": VENV,
    }


@contextlib.contextmanager
def _context_dir() -> Iterator[Path]:
    """A temporary build context under the cache folder, always removed."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "layer-audit"
    atomic.make_folder(root)
    path = Path(tempfile.mkdtemp(prefix=".replica-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def report(made: Replica) -> None:
    """Print the warnings, then one line: tag, id, Python, count, reads, seconds."""
    for warning in made.warnings:
        console.stderr.print(f"[yellow]warning:[/] {escape(warning)}")
    console.stdout.print(
        f"{escape(made.tag)}  {made.image_id[:19]}  replica of {made.distributions} "
        f"distributions  python {made.python}  {made.seconds:.1f}s  {escape(made.stats.summary())}"
    )


def manifest_of(tag: str) -> dict[str, object]:
    """``replica.json`` of a made replica, read from the image (for tests and reports)."""
    out = docker_host.run_in_image(tag, ["/bin/cat", plan.MANIFEST])
    document: dict[str, object] = json.loads(out)
    return document
