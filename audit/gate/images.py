"""``audit-deps --image``: an image that exists, judged layer by layer from its own layers.

The image is walked (:mod:`audit.history.walk`: the engine, a ``docker save`` file, an OCI
layout or a registry; no container, any platform), every step of its history judged by the one
judge (:func:`audit.policy.judge.judge_history`), and the verdicts rendered by
:mod:`audit.report.layers`. ``--against OLD`` judges what the new image's last state changed
against the old one's, environment by environment, as one step.

The policy, best first: ``--policy FILE`` (a ``[policy]`` table), the recipe ``--recipe NAME``
names, else the default with the ``cuda-ml`` preset when the image is built for CUDA (its
configuration's ``CUDA_VERSION``, else its packages: :mod:`audit.history.cuda`) or ``--cuda``
says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path, PurePosixPath

from audit.history.cuda import cuda_tag
from audit.history.model import History, LayerRef, LayerState
from audit.history.snapshot import Environment
from audit.history.walk.run import WalkContext, WalkResult, walk
from audit.policy.findings import Finding
from audit.policy.judge import Declared, declared_by_instruction, guarded_step, judge_history
from audit.policy.model import Policy
from audit.policy.presets import CUDA_ML
from audit.policy.verdict import Scope, hint_text
from audit.project.sources import DirectorySource, Source
from audit.recipe.located_toml import Node
from audit.recipe.model import Recipe
from audit.recipe.parse import load_recipe
from audit.recipe.policy_parse import parse_policy, read_policy_file
from audit.render.guard import overrides_config
from audit.report.layers import JudgedImage


@dataclass(frozen=True)
class PolicyChoice:
    """Where the policy comes from: a policy file, a recipe, or neither (the default);
    ``cuda`` forces the image's CUDA tag (``cu130``, ``cpu``) instead of reading it."""

    file: Path | None = None
    recipe: Recipe | None = None
    cuda: str | None = None


def load_named_recipe(source: Source, name: str) -> Recipe:
    """``images/NAME/image.toml`` at ``source`` (``images/NAME`` is accepted too)."""
    return load_recipe(source, PurePosixPath(name).name)


def image_cuda(result: WalkResult, forced: str | None) -> str:
    """``cu130`` or ``cpu``: forced, else read from the walked image's last state."""
    if forced:
        return forced
    last = result.history.states[-1].environments if result.history.states else ()
    return cuda_tag(dict(result.image.env), last) or "cpu"


def choose_policy(choice: PolicyChoice, cuda: str, stages: Mapping[str, int]) -> Policy:
    """The policy ``choice`` names for an image built for ``cuda``; ``stages`` are what its
    waivers may name (a Dockerfile's stages and their instruction counts)."""
    if choice.file is not None:
        folder = choice.file.resolve().parent
        return read_policy_file(DirectorySource(folder), choice.file.name, cuda, stages)
    if choice.recipe is not None:
        return choice.recipe.policy
    preset = {"preset": CUDA_ML} if cuda != "cpu" else {}
    return parse_policy(Node("(the default policy)", "policy", preset), cuda, stages)


def judge_walked(
    name: str,
    result: WalkResult,
    policy: Policy,
    *,
    today: date,
    history: History | None = None,
    declared: Declared = declared_by_instruction,
) -> JudgedImage:
    """``result`` (or ``history``, an attributed copy of its history) judged step by step."""
    judged = history or result.history
    verdicts = judge_history(judged, policy, today=today, declared=declared)
    if declared is declared_by_instruction:  # an image with no recipe: its own words
        verdicts = [replace(v, findings=tuple(_rehinted(f, policy) for f in v.findings))
                    for v in verdicts]  # fmt: skip
    return JudgedImage(name, judged, tuple(verdicts))


_MOVES = ("downgraded", "variant", "removed")


def _rehinted(finding: Finding, policy: Policy) -> Finding:
    """A failing finding's hint in the words of an image built from a Dockerfile: re-pin in a
    later layer (a ``--no-deps`` install is an override), or waive it in a policy file."""
    if not finding.hint:
        return finding
    fix = None
    if finding.rule in _MOVES and finding.before:
        fix = repin_hint(finding.package, finding.before)
    place = "a policy file (--policy FILE)"
    hint = hint_text(finding, Scope(finding.stage, finding.layer), policy, fix, place)
    return replace(finding, hint=hint)


def repin_hint(package: str, version: str) -> str:
    """How a Dockerfile puts ``package`` back at ``version`` in a later layer: pip for a
    distribution, the OS package manager for an OS package (``deb:libc6``, ``apk:musl``)."""
    kind, colon, name = package.partition(":")
    if colon and kind == "deb":
        return f"re-pin it in a later layer: apt-get install -y --allow-downgrades {name}={version}"
    if colon and kind == "apk":
        return f"re-pin it in a later layer: apk add {name}={version}"
    return f"re-pin it in a later layer: pip install --no-deps {package}=={version} (an override)"


def audit_image(
    spec: str, choice: PolicyChoice, context: WalkContext, *, today: date
) -> JudgedImage:
    """``audit-deps --image SPEC``: every layer of the image judged; an image built from a
    recipe has its guarded layers located in the recipe's stages (what its waivers name)."""
    result = walk(spec, context)
    policy = choose_policy(choice, image_cuda(result, choice.cuda), {})
    history = recipe_located(result.history)
    declared = recipe_declared(choice.recipe) if choice.recipe else declared_by_instruction
    return judge_walked(
        result.history.image, result, policy, today=today, history=history, declared=declared
    )


def recipe_declared(recipe: Recipe) -> Declared:
    """What a recipe's layer re-pins on purpose, as its guard reads it: the layer's
    ``override`` names, or every package a ``no_deps`` layer moved (its lock's pins); nothing
    for any other layer (a recipe installs every lock with ``--no-deps``: that declares
    nothing)."""
    overrides = overrides_config(recipe)

    def declared(ref: LayerRef, before: Environment | None, after: Environment | None) -> list[str]:
        names = overrides.get(f"{ref.stage}-{ref.layer or 0:02d}", [])
        if names != ["*"]:
            return names
        was = before.winners() if before is not None else {}
        now = after.winners() if after is not None else {}
        return [name for name, dist in now.items() if was.get(name) != dist]

    return declared


def recipe_located(history: History) -> History:
    """``history`` with each guarded layer of a rendered recipe at its stage and layer (the
    guard's own ``--step vK-NN`` in the instruction), so a waiver scoped to a stage or a layer
    of the recipe applies to the walk exactly as it does in the build."""
    states = []
    for state in history.states:
        step = guarded_step(state.ref.instruction)
        ref = state.ref if step is None else replace(state.ref, stage=step[0], layer=step[1])
        states.append(replace(state, ref=ref))
    return replace(history, states=tuple(states))


def compare_images(
    new: str, old: str, choice: PolicyChoice, context: WalkContext, *, today: date
) -> JudgedImage:
    """``--image NEW --against OLD``: one step, from OLD's last state to NEW's."""
    after, before = walk(new, context), walk(old, context)
    policy = choose_policy(choice, image_cuda(after, choice.cuda), {})
    step = _final_step(before.history, after.history, f"{old} -> {new}")
    verdicts = tuple(judge_history(step, policy, today=today))
    return JudgedImage(f"{old} -> {new}", step, verdicts, labels=(old, new))


def _final_step(before: History, after: History, title: str) -> History:
    """A two-state history: the old image's last state, then the new image's."""
    first, last = _last(before), _last(after)
    ref = LayerRef(len(after.states) - 2, f"the image {after.image} against {before.image}")
    return History(title, after.producer, (first, replace(last, ref=ref)))


def _last(history: History) -> LayerState:
    return history.states[-1] if history.states else LayerState(LayerRef(-1, ""), ())
