"""``build --dockerfile``: the user's own Dockerfile, built unchanged, walked, then tagged.

Every option reaches BuildKit as the user wrote it: those this module reads too (``--target``,
``--platform``, ``--build-arg``) and every other one (``--secret``, ``--ssh``,
``--build-context``, cache options …) passed through untouched. The build moves no tag itself
(``--iidfile`` only): the image is walked layer by layer (:mod:`audit.history.walk`), every
entry of its history attributed to the stage and line of the Dockerfile that wrote it
(:mod:`audit.dockerfile.stages`), judged by the one judge, and only a passing image gets its
tags. A failed build or a failing verdict moves none.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

from audit.build.plan import DockerClient
from audit.docker import host as docker_host
from audit.dockerfile.importer import read_dockerfile
from audit.dockerfile.layout import DockerStage
from audit.dockerfile.stages import Attribution, attribute, find_stage, parse_stages, stage_name
from audit.errors import EXIT_ENVIRONMENT, BuildFailed, UsageError
from audit.gate.images import PolicyChoice, choose_policy, image_cuda, judge_walked
from audit.history.model import History, LayerRef, LayerState
from audit.history.walk.run import WalkContext, host_platform, walk
from audit.host import console, process
from audit.redact import redact
from audit.report.layers import JudgedImage



@dataclass(frozen=True)
class DockerfileBuild:
    """What to build: the Dockerfile, its context, the stages to audit and where the tags go.

    ``passthrough`` holds every other ``docker build`` option verbatim; ``targets`` is the
    stage to tag last, preceded by the others to audit (``--all-stages``)."""

    dockerfile: Path
    context: Path
    tags: tuple[str, ...]
    target: str | None
    platform: str | None
    build_args: tuple[str, ...]
    passthrough: tuple[str, ...]
    all_stages: bool = False


@dataclass(frozen=True)
class StageAudit:
    """One built target: its image id and its judged, attributed history."""

    stage: str
    image_id: str
    judged: JudgedImage

    @property
    def fails(self) -> bool:
        return any(verdict.fails for verdict in self.judged.verdicts)


def build_args_of(pairs: Sequence[str]) -> dict[str, str]:
    """``--build-arg K=V`` values; a bare ``K`` takes its value from the environment, which a
    Dockerfile's ``FROM`` cannot see here: it keeps the ``ARG`` default."""
    found: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not name:
            raise UsageError(f"--build-arg {pair!r}: no name", "write --build-arg NAME=VALUE")
        if sep:
            found[name] = value
    return found


def build_argv(
    prefix: Sequence[str], build: DockerfileBuild, target: str | None, iidfile: Path
) -> list[str]:
    """The ``docker build`` command line for one target (``prefix``: the client's build
    command; ``target`` None: the last stage, as docker builds it by default): the user's
    options unchanged, plus ``--iidfile`` (never ``-t``: tags move after the verdict)."""
    argv = [*prefix, "-f", str(build.dockerfile), "--iidfile", str(iidfile)]
    if target is not None:
        argv += ["--target", target]
    if build.platform:
        argv += ["--platform", build.platform]
    for pair in build.build_args:
        argv += ["--build-arg", pair]
    return [*argv, *build.passthrough, str(build.context)]


def run_build(
    client: DockerClient, prefix: Sequence[str], build: DockerfileBuild, stage: DockerStage,
    target: str | None,
) -> str:  # fmt: skip
    """Build ``stage`` (``--target target``) and return its image id; BuildFailed (exit 3)
    when the build fails.

    The build's own output goes to stderr as it comes."""
    with tempfile.TemporaryDirectory(prefix="layer-audit-iid-") as work:
        iidfile = Path(work) / "iid"
        argv = build_argv(prefix, build, target, iidfile)
        done = process.stream(
            argv, _show, env=docker_host.client_env(client), check=False, keep=40
        )
        if done.returncode != 0 or not iidfile.is_file():
            tail = "\n".join(redact(line) for line in done.stdout.splitlines()[-20:])
            raise BuildFailed(
                f"{build.dockerfile}: the build of stage {stage_name(stage)} failed "
                f"(exit {done.returncode})",
                f"read the build's output above; no tag was moved\n{tail}",
                exit_code=EXIT_ENVIRONMENT,
            )
        return iidfile.read_text().strip()


def _show(line: str) -> None:
    console.stderr.print(redact(line), markup=False, highlight=False, soft_wrap=True)


def attributed(history: History, stages: Sequence[DockerStage], target: DockerStage, where: str) -> History:
    """``history`` with each step's stage, position and Dockerfile line, where known."""
    entries = [state.ref.instruction for state in history.states[1:]]
    found = attribute(entries, stages, target)
    states = [history.states[0]]
    for state, made in zip(history.states[1:], found, strict=True):
        states.append(_located(state, made, where))
    return replace(history, states=tuple(states))


def _located(state: LayerState, made: Attribution | None, where: str) -> LayerState:
    if made is None:
        return state
    ref: LayerRef = replace(
        state.ref, stage=made.stage, layer=made.position, origin=f"{where}:{made.line}"
    )
    return replace(state, ref=ref)


def audit_targets(
    build: DockerfileBuild,
    *,
    client: DockerClient,
    prefix: Sequence[str],
    context: WalkContext,
    choice: PolicyChoice,
    today: date,
) -> list[StageAudit]:
    """Build, walk and judge every target (the others first, the one to tag last)."""
    where = build.dockerfile.name
    text = read_dockerfile(build.dockerfile, "give the Dockerfile's path with --dockerfile")
    platform = (build.platform or host_platform()).split(",")[0]
    args = build_args_of(build.build_args)
    stages = parse_stages(text, args, str(build.dockerfile), platform)
    final = find_stage(stages, build.target, str(build.dockerfile))
    buildable(final, stages, str(build.dockerfile))
    targets = [s for s in stages if s is not final] if build.all_stages else []
    scopes = {stage_name(stage): len(stage.items) for stage in stages}
    audits = []
    for stage in [*others(targets, where), final]:
        target = stage.alias or None
        image_id = run_build(client, prefix, build, stage, target)
        result = walk(image_id, context)
        history = attributed(result.history, stages, stage, where)
        name = where + (f" --target {target}" if target else "")
        policy = choose_policy(choice, image_cuda(result, choice.cuda), scopes)
        judged = judge_walked(name, result, policy, today=today, history=history)
        audits.append(StageAudit(stage_name(stage), image_id, judged))
    return audits


def buildable(stage: DockerStage, stages: Sequence[DockerStage], where: str) -> None:
    """UsageError (exit 2) for a stage BuildKit cannot build: ``--target`` takes only an
    ``AS`` name, so an unnamed stage is built only as the last one (docker's default)."""
    if not stage.alias and stage is not stages[-1]:
        raise UsageError(
            f"{where}:{stage.line}: stage {stage.index} has no name, and docker build "
            "--target takes only a stage's AS name",
            f"name it (FROM {stage.reference} AS NAME), then give --target NAME",
        )


def others(stages: Sequence[DockerStage], where: str) -> list[DockerStage]:
    """The named ones of ``stages`` (``--all-stages``); each unnamed one is said and left
    out: BuildKit cannot build it alone (a later stage built on it audits its layers)."""
    for stage in stages:
        if not stage.alias:
            console.stderr.print(
                f"{where}:{stage.line}: stage {stage.index} has no AS name: docker build "
                "cannot target it alone, so it is not audited on its own",
                markup=False, highlight=False,
            )  # fmt: skip
    return [stage for stage in stages if stage.alias]


def move_tags(image_id: str, tags: Sequence[str]) -> None:
    """Tag the passing image (the engine's own tag call, through the docker SDK)."""
    image = docker_host.daemon().images.get(image_id)
    for tag in tags:
        repository, _, name = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "")
        image.tag(repository or tag, name or "latest")
