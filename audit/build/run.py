"""Running a build plan: BuildKit builds, the guard's verdict, smoke tests, trail, tags, push.

Order (nothing is lost): every build of the plan runs under a temporary unique tag; then each
stage's smoke command runs and its trail is extracted into ``build/reports/<image>/<stage>/``;
only then do the final tags move, all of them, and get pushed with ``--push`` (each digest
printed and written to ``build/reports/<image>/push.json``); ``--cache-to REF`` pushes the
target's image with its inline cache last. A failed build, guard verdict or smoke test moves
no tag; a failed push (exit 3) leaves every local tag moved and names the tags the registry
does not have. The temporary tags are always removed, and the full output of every build is
saved to ``build/reports/<image>/build.log``.

The engine is the one :mod:`audit.docker.endpoint` chose (``--docker-host``,
``$DOCKER_HOST``, the active context) for the client and the SDK alike; a base image the
engine lacks is pulled first, by digest when the recipe pins one, and said so.

A multi-platform build (buildx, ``--platform a,b --push``) pushes its final tags itself once
the guarded build passed: no local image, so no smoke test and no trail extraction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from audit.errors import (
    EXIT_BAD_INPUT,
    EXIT_ENVIRONMENT,
    EXIT_VIOLATION,
    BuildFailed,
    CommandFailed,
    EnvironmentProblem,
    UsageError,
)
from audit.redact import redact_all
from audit.host import atomic, console, process
from audit.docker import host as docker_host, registry
from audit.base.check import verify_base
from audit.build.progress import LiveView, Progress, step_labels
from audit.build.trail import read_trail, write_trail_reports
from audit.render.write import render
from audit.build.provenance import gather as gather_provenance
from audit.report.sbom import write_sbom
from audit.build.plan import (
    CREATED_LABEL,
    DRY_SUFFIX,
    SECRET_CA,
    SECRET_NETRC,
    BuildOptions,
    BuildPlan,
    DockerClient,
    SecretSources,
    StageBuild,
    netrc_text,
    plan_build,
    secret_sources,
    target_stages,
)
from audit.lock.plan import survey_locks
from audit.lock.files import BaseRecord, base_relpath, read_base
from audit.project.frontdoor import FrontDoor
from audit.project.paths import build_dir
from audit.recipe.model import PipLayer, Recipe
from audit.recipe.parse import load_recipe
from audit.report.findings import summary_line
from audit.project.sources import DirectorySource, Source
from audit.lock.trust import (
    EXTERNALLY_MANAGED,
    REPLICA_SOURCE,
    externally_managed_failure,
    source_finding,
    stale_locks_failure,
)

LOG_TAIL_LINES = 25
DISK_FULL = "no space left on device"
DISK_HINT = "free disk space (docker builder prune; docker image prune), then build again"
BUILDKIT_MISSING = ("requires BuildKit", "the --mount option requires", "unknown flag: --secret")
CLIENT_HINT = "name a working docker client with --docker PATH or $LAYER_AUDIT_DOCKER"


# ----------------------------------------------------------------------------- facts


@contextlib.contextmanager
def secret_files(recipe: Recipe, sources: SecretSources) -> Iterator[dict[str, Path]]:
    """Secret id -> host file for BuildKit; generated files live in a private temporary folder."""
    found: dict[str, Path] = {}
    if sources.ca_bundle:
        found[SECRET_CA] = sources.ca_bundle
    with tempfile.TemporaryDirectory(prefix="layer-audit-secrets-") as folder:
        if sources.credentials:
            netrc = Path(folder) / "netrc"
            netrc.touch(mode=0o600)
            netrc.write_text(netrc_text(recipe, sources.credentials))
            found[SECRET_NETRC] = netrc
        elif sources.netrc:
            found[SECRET_NETRC] = sources.netrc
        yield found


# ----------------------------------------------------------------------------- preflight


def check_base(recipe: Recipe, arch: str, client: DockerClient | None = None) -> None:
    """The base image must be in the engine's store for the target architecture: pulled
    (printed, by digest when pinned) when the engine lacks it."""
    registry.ensure_image(recipe.base_ref, f"the base of {recipe.name}", client)
    info = docker_host.image_info(recipe.base_ref)
    if info.architecture and info.architecture != arch:
        raise EnvironmentProblem(
            f"{recipe.source}: base {recipe.base_ref} is {info.architecture}, the build is {arch}",
            f"make or pull an {arch} base (python -m audit base-image --arch {arch}) "
            "and name it in the recipe",
        )


# ----------------------------------------------------------------------------- failures


def _label_of(recipe: Recipe, slug: str) -> str:
    for step in recipe.steps():
        if step.slug == slug:
            return step.label
    return slug


def violation_summary(recipe: Recipe, violations: Sequence[Mapping[str, object]]) -> str:
    """One block: image, stage, layer, then each package with from -> to, rule and fix."""
    slug = str(violations[0].get("step", "?"))
    lines = [f"{recipe.name}: the guard stopped the build at {_label_of(recipe, slug)}"]
    for item in violations:
        change = f"{item.get('before') or '(none)'} -> {item.get('after') or '(none)'}"
        lines.append(f"  {item.get('package')}  {change}  rule: {item.get('rule')}")
        message = str(item.get("message") or "")
        if not message.startswith(f"{item.get('package')} {change}"):  # say nothing twice
            lines.append(f"    {message}")
    hint = str(violations[0].get("hint") or "")
    if hint:
        lines.append(f"  to fix or waive (in {recipe.source}):")
        lines.extend(f"    {line}" for line in hint.splitlines())
    return "\n".join(lines)


def _tail(lines: Sequence[str]) -> str:
    return "\n".join(lines[-LOG_TAIL_LINES:])


def build_failure(
    recipe: Recipe, stage: str, progress: Progress, lines: Sequence[str]
) -> BuildFailed:
    """The typed failure of one build: guard verdict (1), guard input (2), environment (3)."""
    if progress.violations:
        summary = violation_summary(recipe, progress.violations)
        return BuildFailed(summary, "no tag was moved", exit_code=EXIT_VIOLATION)
    if progress.guard_errors:
        return BuildFailed(
            f"{recipe.name} {stage}: the guard could not run: {progress.guard_errors[0]}",
            "fix the input it names, then build again",
            exit_code=EXIT_BAD_INPUT,
        )
    text = "\n".join(lines)
    if EXTERNALLY_MANAGED in text:
        return externally_managed_failure(recipe, stage)
    hint = f"read the log tail below; no tag was moved\n{_tail(lines)}"
    if DISK_FULL in text.lower():
        hint = DISK_HINT
    elif any(marker in text for marker in BUILDKIT_MISSING):
        hint = docker_host.INSTALL_HINT
    return BuildFailed(f"{recipe.name} {stage}: the build failed", hint, exit_code=EXIT_ENVIRONMENT)


# ----------------------------------------------------------------------------- running


@dataclass
class BuildLog:
    """Every build's output of one run, saved even when the run fails."""

    path: Path
    lines: list[str]

    def save(self) -> None:
        """Write the log atomically, every line redacted (no URL userinfo, no token)."""
        atomic.write_text(self.path, "\n".join(redact_all(self.lines)) + "\n")


@dataclass
class BuildOutcome:
    """What a successful build left: each stage's image id and tags, the pushed digests, the
    guard's reports and the build log (``build --format json`` prints it)."""

    image: str
    platform: str
    log: Path
    stages: list[dict[str, object]]
    pushed: list[dict[str, str]]
    reports: list[dict[str, str]]

    def to_json(self, root: Path) -> dict[str, object]:
        return {
            "schema": BUILD_SCHEMA,
            "image": self.image,
            "platform": self.platform,
            "stages": self.stages,
            "pushed": self.pushed,
            "reports": self.reports,
            "log": _relative(self.log, root),
        }


BUILD_SCHEMA = "layer-audit.build/1"


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def run_stage_build(
    recipe: Recipe, build: StageBuild, env: Mapping[str, str], log: BuildLog
) -> None:
    log.lines.append(f"### {shlex.join(build.argv)}")
    title, labels = f"{recipe.name} {build.stage}", step_labels(recipe)
    with LiveView(console.stderr, title, labels, log_path=log.path) as view:
        done = process.stream(build.argv, view.feed, env=env, check=False, hint=CLIENT_HINT)
    log.lines.extend(done.lines)
    if done.returncode != 0:
        raise build_failure(recipe, build.stage, view.progress, done.lines)


def run_smoke(plan: BuildPlan, build: StageBuild) -> None:
    if not build.smoke:
        return
    console.stderr.print(f"smoke test {build.stage}: {escape(build.smoke)}")
    try:
        docker_host.run_in_image(
            build.temp_ref, ["/bin/sh", "-c", build.smoke], platform=plan.platform
        )
    except CommandFailed as exc:
        raise BuildFailed(
            f"{plan.image} {build.stage}: the smoke test failed: {build.smoke}",
            f"no tag was moved\n{exc.output}",
            exit_code=EXIT_VIOLATION,
        ) from exc


def move_tags(client: DockerClient, plan: BuildPlan) -> tuple[registry.Pushed, ...]:
    """Move every final tag, then (``--push``) push them all in the plan's order.

    Invariant: no push starts before every tag moved; a push failure raises
    :class:`audit.docker.registry.PushFailed` with what was and was not pushed.
    """
    daemon = docker_host.daemon()
    for build in plan.builds:
        image = daemon.images.get(build.temp_ref)
        for ref in build.tags:
            repository, _, tag = ref.rpartition(":")
            image.tag(repository, tag)
            console.stderr.print(f"tagged {ref}", markup=False)
    if plan.push:
        return registry.push_tags(client, plan.tags)
    return ()


def push_cache(client: DockerClient, plan: BuildPlan) -> None:
    """``--cache-to REF``: the target's image, inline cache in its configuration, pushed
    (a multi-platform build's buildx pushed it already, as one more tag of its target)."""
    if plan.cache_to is None or plan.multi_platform:
        return
    repository, _, tag = plan.cache_to.rpartition(":")
    if not repository or "/" in tag:
        repository, tag = plan.cache_to, "latest"
    docker_host.daemon().images.get(plan.builds[0].temp_ref).tag(repository, tag)
    registry.push_tags(client, (f"{repository}:{tag}",))


def move_and_push(root: Path, client: DockerClient, plan: BuildPlan) -> tuple[registry.Pushed, ...]:
    """Move the tags and push; the push report is written whether the push passed or not."""
    folder = root / "build" / "reports" / plan.image
    try:
        pushed = move_tags(client, plan)
    except registry.PushFailed as failure:
        report = registry.write_push_report(folder, failure.results)
        failure.hint = f"{failure.hint}; what was pushed: {report}"
        raise
    if pushed:
        report = registry.write_push_report(folder, pushed)
        console.stderr.print(f"push report: {report}", markup=False)
    push_cache(client, plan)
    return pushed


def remove_temporary(plan: BuildPlan) -> None:
    for build in [*plan.builds, *([plan.prelude] if plan.prelude else [])]:
        with contextlib.suppress(EnvironmentProblem):
            docker_host.remove_image(build.temp_ref)


def build_prelude(
    recipe: Recipe, plan: BuildPlan, env: Mapping[str, str], log: BuildLog
) -> None:
    """A base without Python: build ``base_stage`` (no guard: nothing to audit yet), tag it
    as the image the base record describes, and check it against the record before any guarded
    layer (the prelude built again is the same base when its Python environments are)."""
    prelude = plan.prelude
    assert prelude is not None
    run_stage_build(recipe, prelude, env, log)
    image = docker_host.daemon().images.get(prelude.temp_ref)
    repository, _, tag = recipe.recorded_ref.rpartition(":")
    image.tag(repository, tag)


def execute(
    root: Path,
    recipe: Recipe,
    plan: BuildPlan,
    client: DockerClient,
    record: BaseRecord | None = None,
) -> BuildOutcome:
    env = docker_host.client_env(client)
    log = BuildLog(root / "build" / "reports" / recipe.name / "build.log", [])
    outcome = BuildOutcome(recipe.name, plan.platform, log.path, [], [], [])
    try:
        if plan.prelude is not None:
            build_prelude(recipe, plan, env, log)
            verify_base(recipe, record, FrontDoor.of(root))  # before the first guarded layer
        for build in plan.builds:
            run_stage_build(recipe, build, env, log)
        if plan.multi_platform:
            console.stderr.print(
                f"pushed {', '.join(plan.tags)} ({plan.platform}, one multi-arch tag each); "
                "no smoke test or trail extraction: no local image",
                markup=False,
            )
            outcome.stages += [{"stage": b.stage, "tags": list(b.tags)} for b in plan.builds]
            return outcome
        for build in plan.builds:
            run_smoke(plan, build)
        if plan.guard:  # each audited stage's own trail
            outcome.reports += _guard_reports(root, recipe, plan, record)
        outcome.stages += _stage_images(plan)
        pushed = move_and_push(root, client, plan)
        outcome.pushed += [{"tag": p.tag, "digest": p.digest} for p in pushed if p.pushed]
    finally:
        log.save()
        remove_temporary(plan)
    console.stderr.print(f"build log: {log.path}")
    return outcome


def _guard_reports(
    root: Path, recipe: Recipe, plan: BuildPlan, record: BaseRecord | None = None
) -> list[dict[str, str]]:
    """Each built audited stage's guard report and SBOM, written from its own image's trail
    (a stage beside the target, on another branch of the stage graph, has a trail of its own;
    a stage the guard does not audit has none)."""
    trails = {b.stage: b for b in plan.builds if recipe.audited(recipe.stage(b.stage))}
    base = source_finding(recipe.name, recipe.base_ref, record)
    written = []
    for stage in (s.name for s in recipe.stages if s.name in trails):
        trail = read_trail(trails[stage])
        folder, report = write_trail_reports(root, recipe, stage, trail, base)
        console.stderr.print(f"{summary_line(report)}: {folder}/report.md", markup=False)
        write_sbom(root, recipe, stage, trail, dict(plan.labels)[CREATED_LABEL])
        verdict = "fail" if report.failed else "pass"
        written.append({"stage": stage, "folder": _relative(folder, root), "verdict": verdict})
    return written


def _stage_images(plan: BuildPlan) -> list[dict[str, object]]:
    """Each built stage's local image id and the tags it earns (ids read before tagging)."""
    daemon = docker_host.daemon()
    return [
        {"stage": b.stage, "image_id": daemon.images.get(b.temp_ref).id, "tags": list(b.tags)}
        for b in plan.builds
    ]


def check_locks(source: Source, recipe: Recipe, options: BuildOptions) -> BaseRecord | None:
    """Before any Docker work: every lock up to the target is fresh (the ``lock --check`` rule,
    a base record of another base included), else exit 1; the guard needs the base snapshot.
    Returns the base record the survey read (None when there is none): the build's one read."""
    until = target_stages(recipe, options.stage)[0] if options.stage else None
    wanted = {s.slug for s in recipe.steps(until=until) if isinstance(s.layer, PipLayer)}
    survey = survey_locks(source, recipe)
    states = [state for state in survey.states if state.step.slug in wanted]
    failure = stale_locks_failure(recipe, states, source.front)
    if failure is not None:
        raise failure
    if survey.base is None and options.guard:
        read_base(source, base_relpath(recipe))  # raises: no base record, and what to do
    return survey.base[0] if survey.base else None


def build_image(root: Path, options: BuildOptions) -> BuildOutcome:
    """The build command: load the recipe, check its locks, render it, then :func:`run_build`."""
    source = DirectorySource(root)
    recipe = load_recipe(source, options.image)
    record = check_locks(source, recipe, options)
    options = dry_if_replica(record, recipe, options)
    render(root, recipe, stage=options.stage)  # build arguments reach BuildKit as flags
    return run_build(root, recipe, options, build_dir(root, recipe.name), record)


def dry_if_replica(
    record: BaseRecord | None, recipe: Recipe, options: BuildOptions
) -> BuildOptions:
    """A base recorded as a replica makes the build dry (tags ``…-dry`` only; never pushed)."""
    if record is None or record.source != REPLICA_SOURCE:
        return options
    if options.push:
        raise UsageError(
            f"{recipe.name}: its base is a replica (locks/{recipe.name}/base.json): a dry build "
            "is never pushed",
            "build without --push, or record the real image (lock --record-base) to push",
        )
    console.stderr.print(
        f"dry build: the base of {recipe.name} is a replica (metadata-only stand-ins): every "
        f"layer installs and the guard judges it; tags end in {DRY_SUFFIX}, latest is not moved"
    )
    if record.standins:
        console.stderr.print(f"stand-ins (on no reachable index): {', '.join(record.standins)}")
    return dataclasses.replace(options, dry=True)


def run_build(
    root: Path, recipe: Recipe, options: BuildOptions, context: Path, record: BaseRecord | None
) -> BuildOutcome:
    """Detect the client, check the host, plan and execute; what it built, or a typed failure.
    ``record`` is the base record the lock check read (None: none to verify the base against)."""
    client = docker_host.detect_client(options.docker)
    docker_host.daemon()
    sources = secret_sources(options, os.environ, Path.home())
    console.stderr.print(f"secrets: {sources.describe()}")
    with secret_files(recipe, sources) as secrets:
        plan = plan_build(
            recipe,
            options,
            client=client,
            context=context,
            provenance=gather_provenance(root, recipe),
            secrets=secrets,
            token=os.urandom(4).hex(),
        )
        if not plan.multi_platform:  # buildx pulls each platform's base itself
            check_base(recipe, plan.arch, client)
            if plan.prelude is None:  # else after the prelude is built, in execute
                verify_base(recipe, record, FrontDoor.of(root))  # the base is the recorded one
        return execute(root, recipe, plan, client, record)
