"""The build guard: runs INSIDE the image, in the same RUN as each pip or run layer.

Python 3.9+, standard library plus what the build context brings through a BuildKit bind mount
(``_guard/``, see ``audit/render/guard.py``): the snapshot script, the pure core modules of
``audit`` and a copy of ``packaging`` under ``lib/``. Nothing of it stays in the image except
the trail: ``<slug>.snapshot.json`` and ``<slug>.findings.json`` under ``--trail``.

Per layer it snapshots every recipe interpreter, compares each with the previous guarded
layer's snapshot in the trail (the first layer compares with the recorded base snapshot,
``base.json``), checks that what the layer's lock pins is installed at exactly those versions,
applies the policy and exits 1 on an error finding, which fails the RUN and so the build.
Each failing finding is also printed as one ``LAYER-AUDIT-VIOLATION {json}`` line for the host.

Usage: ``python -B guard.py --step v2-01 --trail DIR [--lock FILE] [--config FILE] [--base FILE]
[--today YYYY-MM-DD]`` (``--config`` and ``--base`` default to ``guard.json`` and ``base.json``
next to this script)
(``-B``: the guard writes no bytecode, neither into the image nor into its read-only mount).
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(HERE, "lib")
VIOLATION = "LAYER-AUDIT-VIOLATION"
GUARD_ERROR = "LAYER-AUDIT-GUARD-ERROR"
FINDINGS_SCHEMA = "layer-audit.findings/1"
SNAPSHOT_SUFFIX = ".snapshot.json"
FINDINGS_SUFFIX = ".findings.json"
EXIT_VIOLATION = 1
EXIT_BAD_INPUT = 2
_SLUG = re.compile(r"^v(\d+)-(\d+)$")

sys.path.insert(0, LIB)
# Every import is paid on every guarded layer: subprocess and packaging.requirements load only
# when a check needs them (plain ``name==version`` lock lines, the usual case, need only
# packaging.version); argparse and packaging.utils (it loads packaging.tags, platform and
# logging) are not imported at all.
try:
    from audit.errors import AuditError
    from audit.history.snapshot import Environment, dump_snapshot, parse_snapshot
    from audit.lock.format import LockFormatError, Pin, parse_pins
    from audit.policy.findings import Finding
    from audit.policy.judge import judge_layer
    from audit.policy.model import Policy
    from audit.policy.verdict import Scope, WaiverLedger
except (ImportError, SyntaxError) as exc:  # pragma: no cover - depends on the image's Python
    print(
        f"{GUARD_ERROR} cannot load the guard's modules under Python {sys.version.split()[0]}: "
        f"{exc}; the vendored packaging comes from the host's site-packages (use one that "
        "supports this Python)",
        file=sys.stderr,
    )
    sys.exit(EXIT_BAD_INPUT)


class GuardError(Exception):
    """Bad input inside the build: a missing or damaged file the guard needs."""


# ----------------------------------------------------------------------------- inputs


def read_json(path: str) -> Any:
    try:
        with open(path, "rb") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise GuardError(f"{path}: cannot read JSON ({exc})") from exc


def slug_key(slug: str) -> Tuple[int, int]:
    match = _SLUG.match(slug)
    if match is None:
        raise GuardError(f"--step {slug}: expected vN-MM, e.g. v2-01")
    return int(match.group(1)), int(match.group(2))


def previous_slug(trail: str, step: str) -> Optional[str]:
    """The latest guarded layer before ``step`` whose snapshot is in the trail."""
    names = os.listdir(trail) if os.path.isdir(trail) else []
    slugs = [n[: -len(SNAPSHOT_SUFFIX)] for n in names if n.endswith(SNAPSHOT_SUFFIX)]
    earlier = [s for s in slugs if _SLUG.match(s) and slug_key(s) < slug_key(step)]
    return max(earlier, key=slug_key) if earlier else None


def load_environments(data: bytes, where: str) -> Tuple[Environment, ...]:
    try:
        return parse_snapshot(data, where)
    except AuditError as exc:
        raise GuardError(str(exc)) from exc


def host_command(config: Dict[str, Any], what: str) -> str:
    """The host command for ``what`` (``lock``, ``record``) as this project runs it (``nox -s
    lock -- demo`` or ``layer-audit lock demo``), from the config the host wrote."""
    commands = config.get("commands") or {}
    fallback = "layer-audit lock IMAGE" + (" --record-base" if what == "record" else "")
    return str(commands.get(what) or fallback)


def previous_environments(
    trail: str, step: str, base_path: str, record_command: str
) -> Tuple[str, Tuple[Environment, ...]]:
    """``(name, environments)`` of what the layer must be compared with."""
    slug = previous_slug(trail, step)
    if slug is not None:
        path = os.path.join(trail, slug + SNAPSHOT_SUFFIX)
        with open(path, "rb") as handle:
            return slug, load_environments(handle.read(), path)
    if not os.path.isfile(base_path):
        raise GuardError(
            f"{base_path}: no base snapshot to compare the first layer with; "
            "record it on the host: " + record_command
        )
    record = read_json(base_path)
    if not isinstance(record, dict) or "snapshot" not in record:
        raise GuardError(f"{base_path}: not a base record (no 'snapshot' key)")
    data = json.dumps(record["snapshot"]).encode("ascii")
    return "base", load_environments(data, base_path)


# ----------------------------------------------------------------------------- snapshots


def snapshot_here(system: bool = True, libraries: Tuple[str, ...] = ()) -> Environment:
    """Snapshot this interpreter in-process: one Python start-up less per layer."""
    sys.path.insert(0, HERE)
    try:
        script = importlib.import_module("snapshot")
    finally:
        sys.path.remove(HERE)
    path = [p for p in sys.path if os.path.realpath(p or ".") != os.path.realpath(LIB)]
    data = script.seal(script.snapshot(path, HERE, system, libraries))
    return load_environments(data, f"snapshot of {sys.executable}")[0]


def snapshot_other(
    interpreter: str, system: bool = True, libraries: Tuple[str, ...] = ()
) -> Environment:
    """Snapshot another interpreter by running the snapshot script with it."""
    import subprocess

    script = os.path.join(HERE, "snapshot.py")
    argv = [interpreter, "-B", script] + ([] if system else ["--no-system"])
    argv += ["--libraries=" + ",".join(libraries)] if libraries else []
    proc = subprocess.run(argv, capture_output=True, check=False)
    if proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", "replace").strip()[-800:]
        raise GuardError(f"{interpreter} {script} failed ({proc.returncode}): {detail}")
    return load_environments(proc.stdout, f"snapshot of {interpreter}")[0]


def same_interpreter(interpreter: str) -> bool:
    return os.path.abspath(interpreter) == os.path.abspath(sys.executable)


def snapshot_all(interpreters: Sequence[str], libraries: Tuple[str, ...] = ()) -> List[Environment]:
    """One snapshot per interpreter; the image's OS packages and native libraries (the CUDA
    family's and the recipe's ``libraries``) are recorded with the first one only (they are the
    same for every interpreter)."""
    return [
        snapshot_here(index == 0, libraries)
        if same_interpreter(i)
        else snapshot_other(i, index == 0, libraries)
        for index, i in enumerate(interpreters)
    ]


def matching(before: Sequence[Environment], interpreter: str, index: int) -> Optional[Environment]:
    """The environment recorded for ``interpreter`` (by path, else by position)."""
    for env in before:
        if env.interpreter == interpreter:
            return env
    return before[index] if index < len(before) else None


# ----------------------------------------------------------------------------- the lock


def lock_pins(path: str) -> List[Pin]:
    """Every pin of the layer's lock, read by the same core reader the host uses."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise GuardError(f"{path}: cannot read the layer's lock ({exc.strerror})") from exc
    try:
        return list(parse_pins(text).values())
    except LockFormatError as exc:
        raise GuardError(f"{path}: {exc}") from exc


def _same_version(wanted: str, found: str) -> bool:
    if wanted == found:
        return True
    from packaging.version import InvalidVersion, Version

    try:
        return Version(wanted) == Version(found)
    except InvalidVersion:
        return False


def _lock_finding(
    name: str, wanted: str, found: Optional[str], where: str, lock_command: str
) -> Finding:
    state = f"{found} is installed" if found else "it is not installed"
    return Finding(
        rule="lock-mismatch",
        severity="error",
        package=name,
        before=wanted,
        after=found,
        message=f"{name}: the layer's lock pins {wanted} but {state}",
        where=where,
        hint=f"re-compile the locks ({lock_command}) or find what replaced it in this layer",
    )


def check_lock(
    pins: Sequence[Pin], env: Environment, where: str, lock_command: str
) -> List[Finding]:
    """What the lock pins (for this interpreter's markers) must be installed exactly."""
    winners = env.winners()
    findings = []
    for pin in pins:
        if not pin.applies(env.markers):
            continue
        dist = winners.get(pin.name)
        if dist is None or not _same_version(pin.version, dist.version):
            found = dist.version if dist else None
            findings.append(_lock_finding(pin.name, pin.version, found, where, lock_command))
    return findings


# ----------------------------------------------------------------------------- the verdict


def judge(
    before: Optional[Environment],
    after: Environment,
    policy: Policy,
    *,
    where: str,
    today: datetime.date,
    context: "StepContext",
) -> List[Finding]:
    return judge_layer(
        before, after, policy, where=where, today=today, scope=context.scope,
        ledger=context.ledger, declared=context.declared,
    )  # fmt: skip


@dataclass
class StepContext:
    """Where the step is (for scoped waivers), the waivers earlier steps spent, and the
    packages it re-pins on purpose (``override`` names; a no_deps layer: every pin)."""

    scope: Scope
    ledger: WaiverLedger
    declared: Tuple[str, ...]


def step_context(config: Dict[str, Any], trail: str, step: str, pins: Sequence[Pin]) -> StepContext:
    stage, layer = step.split("-")
    ledger = WaiverLedger()
    for slug in earlier_findings_slugs(trail, step):
        document = read_json(os.path.join(trail, slug + FINDINGS_SUFFIX))
        found = [Finding.from_json(f) for f in document.get("findings", [])]
        ledger.replay(found, slug.split("-")[0])
    declared = config.get("overrides", {}).get(step, [])
    if declared == ["*"]:  # a no_deps layer: every pin of its lock is a re-pin
        declared = [pin.name for pin in pins]
    return StepContext(Scope(stage, int(layer)), ledger, tuple(declared))


def earlier_findings_slugs(trail: str, step: str) -> List[str]:
    names = os.listdir(trail) if os.path.isdir(trail) else []
    slugs = [n[: -len(FINDINGS_SUFFIX)] for n in names if n.endswith(FINDINGS_SUFFIX)]
    return sorted(
        (s for s in slugs if _SLUG.match(s) and slug_key(s) < slug_key(step)), key=slug_key
    )


def _where(image: str, step: str, interpreter: str, several: bool) -> str:
    return f"{image} {step}" + (f" ({interpreter})" if several else "")


def verdict(
    config: Dict[str, Any],
    *,
    before: Sequence[Environment],
    after: Sequence[Environment],
    pins: Sequence[Pin],
    step: str,
    today: datetime.date,
    context: Optional[StepContext] = None,
) -> List[Finding]:
    policy = Policy.from_json(config["policy"])
    interpreters = config["interpreters"]
    findings: List[Finding] = []
    for index, env in enumerate(after):
        where = _where(config["image"], step, interpreters[index], len(after) > 1)
        ctx = context or StepContext(Scope(), WaiverLedger(), ())
        previous = matching(before, interpreters[index], index)
        findings += judge(previous, env, policy, where=where, today=today, context=ctx)
        if index == 0 and pins:  # pip layers install with the first interpreter
            findings += check_lock(pins, env, where, host_command(config, "lock"))
    return findings


# ----------------------------------------------------------------------------- outputs


def write_file(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def write_trail(
    trail: str, step: str, previous: str, envs: Sequence[Environment], found: Sequence[Finding]
) -> None:
    os.makedirs(trail, exist_ok=True)
    write_file(os.path.join(trail, step + SNAPSHOT_SUFFIX), dump_snapshot(envs))
    document = {
        "schema": FINDINGS_SCHEMA,
        "step": step,
        "compared_with": previous,
        "findings": [f.to_json() for f in found],
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n"
    write_file(os.path.join(trail, step + FINDINGS_SUFFIX), text.encode("utf-8"))


def print_verdict(step: str, previous: str, found: Sequence[Finding]) -> None:
    errors = [f for f in found if f.fails]
    warnings = [f for f in found if f.severity == "warning"]
    print(
        f"layer-audit guard {step} (vs {previous}): {len(found)} findings, "
        f"{len(errors)} errors, {len(warnings)} warnings"
    )
    for finding in found:
        if finding.severity != "info" or finding.waiver or finding.rule != "added":
            print(f"  {finding.severity:7} {finding.rule:14} {finding.summary()}")
    for finding in errors:
        marker = dict(finding.to_json(), step=step, compared_with=previous)
        print(VIOLATION + " " + json.dumps(marker, sort_keys=True), flush=True)


# ----------------------------------------------------------------------------- main


USAGE = (
    "usage: guard.py --step vN-MM --trail DIR [--lock FILE] [--config FILE] [--base FILE] "
    "[--today YYYY-MM-DD]"
)
_OPTIONS = ("step", "trail", "lock", "config", "base", "today")


class GuardArgs:
    """The guard's command line (argparse costs more to import than the guard's own checks)."""

    def __init__(self, values: Dict[str, str]) -> None:
        self.step = values["step"]
        self.trail = values["trail"]
        self.lock: Optional[str] = values.get("lock")
        self.config = values.get("config", os.path.join(HERE, "guard.json"))
        self.base = values.get("base", os.path.join(HERE, "base.json"))
        self.today = _iso_date(values["today"]) if "today" in values else None


def _iso_date(text: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise GuardError(f"--today {text}: expected YYYY-MM-DD") from None


def _option_pairs(argv: Sequence[str]) -> Dict[str, str]:
    """``--name value`` and ``--name=value`` pairs; anything else is a usage error."""
    values: Dict[str, str] = {}
    items = list(argv)
    while items:
        flag = items.pop(0)
        name, equals, value = flag[2:].partition("=")
        if not flag.startswith("--") or name not in _OPTIONS or not (equals or items):
            raise GuardError(f"unexpected argument {flag!r}")
        values[name] = value if equals else items.pop(0)
    return values


def parse_args(argv: Optional[Sequence[str]]) -> GuardArgs:
    """The parsed command line; prints the usage and exits 2 when it is wrong."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args in (["-h"], ["--help"]):
        print(USAGE)
        raise SystemExit(0)
    try:
        values = _option_pairs(args)
        missing = [f"--{name}" for name in ("step", "trail") if name not in values]
        if missing:
            raise GuardError(f"missing {' and '.join(missing)}")
        return GuardArgs(values)
    except GuardError as exc:
        print(f"{USAGE}\nguard.py: error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None


def run(args: GuardArgs) -> int:
    slug_key(args.step)
    config = read_json(args.config)
    record = host_command(config, "record")
    previous, before = previous_environments(args.trail, args.step, args.base, record)
    libraries = tuple(config["policy"].get("native_libraries", ()))
    after = snapshot_all(config["interpreters"], libraries)
    pins = lock_pins(args.lock) if args.lock else []
    today = args.today or datetime.date.today()
    context = step_context(config, args.trail, args.step, pins)
    found = verdict(
        config, before=before, after=after, pins=pins, step=args.step, today=today, context=context
    )
    write_trail(args.trail, args.step, previous, after, found)
    print_verdict(args.step, previous, found)
    return EXIT_VIOLATION if any(f.fails for f in found) else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except (GuardError, AuditError, ValueError, KeyError) as exc:
        print(f"{GUARD_ERROR} {args.step}: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
