"""Named policy presets: the field's knowledge a recipe turns on with ``[policy] preset = "…"``.

PURE CORE: the standard library only, Python 3.9 syntax (vendored into images for the guard).

A preset is data: change actions, the CUDA-suffix switch, lockstep groups, floors and bans,
each with the reason it is there. The recipe parser merges it under the recipe's own
``[policy]`` (:func:`audit.recipe.policy_parse.parse_policy`): a key the recipe sets wins, a
lockstep group of the same name replaces the preset's (an empty list drops it), a
``require``/``forbid`` entry on the same package replaces the preset's entry for it. What
survives is listed in ``Policy.preset_rules`` by rule id, so every finding a preset rule raises
starts with ``preset cuda-ml: lockstep cutlass-dsl: …`` (:func:`label`).

Rule ids: ``lockstep <group>``, ``require <package>``, ``forbid <package>``, and the change
actions and ``cuda-suffix`` by their key (``variant``, ``cuda_suffix``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from audit.history.snapshot import canonical_name
from audit.policy.model import LockstepGroup, Policy

CUDA_ML = "cuda-ml"


@dataclass(frozen=True)
class PresetRule:
    """One rule of a preset: its id, its value (an action, a PEP 508 string or lockstep
    members) and why it is there (shown in docs/recipes.md and in the finding)."""

    rule_id: str
    value: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Preset:
    name: str
    rules: tuple[PresetRule, ...]

    def reason(self, rule_id: str) -> str:
        return next((r.reason for r in self.rules if r.rule_id == rule_id), "")


# Checked against real metadata (vllm 0.33.0 for linux/arm64, Python 3.12, captured in
# tests/data/real_stacks/): the vendor's own set passes every rule below.
PRESETS = {
    CUDA_ML: Preset(
        CUDA_ML,
        (
            PresetRule(
                "lockstep cutlass-dsl",
                ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-*"),
                "CuTeDSL's compiler and its libs ship as one release (nvidia-cutlass-dsl 4.8.0 "
                "pins libs-base==4.8.0, libs-cu13 only through an extra); the field's skew "
                "(4.4.0 beside libs 4.8.1) is a compiler ICE",
            ),
            PresetRule(
                "lockstep flashinfer",
                ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"),
                "FlashInfer's kernels (cubin) and JIT cache are built for one flashinfer-python "
                "release, and no metadata says so",
            ),
            PresetRule(
                "lockstep cuda-nvcc",
                ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm"),
                "nvcc requires crt and nvvm without a version, yet they are one compiler "
                "release (cuda-toolkit 13.0.3 pins all three to 13.0.88; vllm 0.33.0 resolves "
                "all three to 13.5.37)",
            ),
            PresetRule(
                "forbid nvidia-nccl-cu13",
                ("nvidia-nccl-cu13==2.29.7",),
                'NCCL 2.29.7 fails with "internal error" on the DGX Spark fabric (field report); '
                "the 0.6.18 nightly and torch 2.13.0 pull it in",
            ),
            PresetRule(
                "variant",
                ("fail",),
                "a CPU build replacing a CUDA one (torch 2.9.0+cu130 -> 2.9.0+cpu) installs "
                "with exit 0 and serves nothing on the GPU",
            ),
            PresetRule(
                "cuda_suffix",
                ("true",),
                "a -cuNN package or +cuNNN build for another CUDA major than the image's cuda "
                "loads another CUDA runtime than the image's",
            ),
        ),
    ),
}
NAMES = tuple(sorted(PRESETS))


def label(preset: str | None, rule_id: str, preset_rules: tuple[str, ...]) -> str:
    """``"preset cuda-ml: lockstep cutlass-dsl: "`` when that rule came from the preset, else
    ``""``: the prefix of every message a preset rule raises."""
    if preset is None or rule_id not in preset_rules:
        return ""
    return f"preset {preset}: {rule_id}: "


_SETTINGS = ("downgrade", "removal", "variant", "rebuilt", "shadowed", "cuda_suffix")


def rule_ids(name: str) -> tuple[str, ...]:
    """Every rule id of preset ``name`` (what ``preset_skip`` may list)."""
    return tuple(rule.rule_id for rule in PRESETS[name].rules)


def merge(policy: Policy, name: str, explicit: frozenset[str], skip: frozenset[str]) -> Policy:
    """``policy`` (the recipe's own) with preset ``name`` under it.

    ``explicit`` holds the ``[policy]`` keys the recipe set itself (they win); ``skip`` holds
    rule ids the recipe turned off. A lockstep group or a ``require``/``forbid`` package the
    recipe names itself replaces the preset's. The result lists the preset rules it kept in
    ``preset_rules``; nothing else about ``policy`` changes.
    """
    taken = {
        "lockstep": {group.name for group in policy.lockstep},
        "require": {_named(text) for text in policy.requirements},
        "forbid": {_named(text) for text in policy.forbidden},
    }
    kept = [
        rule
        for rule in PRESETS[name].rules
        if rule.rule_id not in skip and rule.rule_id not in explicit and _free(rule, taken)
    ]
    settings: dict[str, Any] = {r.rule_id: r.value[0] for r in kept if r.rule_id in _SETTINGS}
    if "cuda_suffix" in settings:
        settings["cuda_suffix"] = settings["cuda_suffix"] == "true"
    return replace(
        policy,
        **settings,
        lockstep=policy.lockstep + tuple(_groups(kept)),
        requirements=policy.requirements + _texts(kept, "require"),
        forbidden=policy.forbidden + _texts(kept, "forbid"),
        preset=name,
        preset_rules=tuple(rule.rule_id for rule in kept),
    )


def _split(rule: PresetRule) -> tuple[str, str]:
    """``("lockstep", "cutlass-dsl")`` for ``lockstep cutlass-dsl``; ``("variant", "")``."""
    kind, _, subject = rule.rule_id.partition(" ")
    return kind, subject


def _free(rule: PresetRule, taken: dict[str, set[str]]) -> bool:
    """Is ``rule``'s group or package left to the preset (not named by the recipe)?"""
    kind, subject = _split(rule)
    return subject not in taken.get(kind, set())


def _groups(rules: list[PresetRule]) -> list[LockstepGroup]:
    return [LockstepGroup(_split(r)[1], r.value) for r in rules if _split(r)[0] == "lockstep"]


def _texts(rules: list[PresetRule], kind: str) -> tuple[str, ...]:
    return tuple(text for r in rules if _split(r)[0] == kind for text in r.value)


def _named(text: str) -> str:
    """The canonical name a PEP 508 string is about (the parser stored it canonical)."""
    from packaging.requirements import Requirement

    return canonical_name(Requirement(text).name)
