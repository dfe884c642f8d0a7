"""The ``[policy]`` table of a recipe: actions per rule, requirements, lockstep groups, waivers.

Built into a frozen :class:`audit.policy.model.Policy` with the preset it names merged under it.
Waiver rule names are those of :data:`audit.policy.rules.WAIVABLE`; package names come out
canonical and versions in PEP 440 normal form, so they compare with what pip installs.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from audit.policy import presets, rules
from audit.policy.model import ACTIONS, FAIL, WARN, LockstepGroup, Policy, Waiver
from audit.project.sources import Source
from audit.recipe.located_toml import SIMPLE_NAME, Node, read_toml
from audit.suggest import did_you_mean, one_of

POLICY_ACTIONS = {
    "downgrade": FAIL,
    "removal": FAIL,
    "variant": FAIL,
    "rebuilt": WARN,
    "shadowed": WARN,
}
POLICY_KEYS = (
    *POLICY_ACTIONS, "native_shadowed", "native_libraries", "cuda_suffix", "require", "forbid",
    "lockstep", "waiver", "preset", "preset_skip",
)  # fmt: skip
WAIVER_KEYS = ("package", "from", "to", "reason", "expires", "rule", "stage", "layer")
WAIVER_RULES = rules.WAIVABLE
PACKAGE_GLOB = re.compile(r"[A-Za-z0-9*?][A-Za-z0-9._*?-]*")
LIBRARY_PREFIX = re.compile(r"lib[A-Za-z0-9_+-]+")


def parse_policy(node: Node | None, cuda: str, stages: Mapping[str, int]) -> Policy:
    """``[policy]`` (``node``, None when absent) of a recipe with this ``cuda`` tag, with its
    preset merged under it. ``stages`` maps each stage a waiver may name to its number of
    layers (a recipe's stages, or a Dockerfile's stages and their instructions)."""
    recipe_cuda = None if cuda == "cpu" else cuda
    if node is None:
        return Policy(cuda=recipe_cuda)
    node.check_keys(POLICY_KEYS)
    actions: dict[str, Any] = {k: _action(node, k, d) for k, d in POLICY_ACTIONS.items()}
    policy = Policy(
        **actions,
        cuda=recipe_cuda,
        cuda_suffix=node.boolean("cuda_suffix", True),
        native_shadowed=_action(node, "native_shadowed", "")
        if "native_shadowed" in node.data
        else None,
        native_libraries=_library_prefixes(node),
        lockstep=_lockstep(node.table("lockstep")) if "lockstep" in node.data else (),
        requirements=_requirement_list(node, "require"),
        forbidden=_requirement_list(node, "forbid"),
        waivers=tuple(_waiver(w, stages) for w in node.tables("waiver")),
    )
    return _with_preset(node, policy)


def _with_preset(node: Node, policy: Policy) -> Policy:
    """``policy`` with the preset ``[policy] preset`` names merged under it (see
    :func:`audit.policy.presets.merge`); ``preset_skip`` lists rule ids of that preset."""
    name = node.optional_text("preset")
    if name is None:
        if "preset_skip" in node.data:
            raise node.error("preset_skip", "skips rules of a preset, but no preset is set")
        return policy
    if name not in presets.PRESETS:
        raise node.error(
            "preset",
            f"no preset {name!r}{did_you_mean(name, presets.NAMES)}",
            f"use {one_of(presets.NAMES)}",
        )
    ids = presets.rule_ids(name)
    skip = node.texts("preset_skip") if "preset_skip" in node.data else []
    for index, rule_id in enumerate(skip, start=1):
        if rule_id not in ids:
            raise node.error(
                f"preset_skip[{index}]",
                f"preset {name} has no rule {rule_id!r}{did_you_mean(rule_id, ids)}",
                f"use {one_of(ids)}",
            )
    explicit = frozenset(key for key in (*POLICY_ACTIONS, "cuda_suffix") if key in node.data)
    return presets.merge(policy, name, explicit, frozenset(skip))


def _action(node: Node, key: str, default: str) -> str:
    value = node.text(key, default)
    if value not in ACTIONS:
        raise node.error(
            key,
            f"{value!r} is not an action{did_you_mean(value, ACTIONS)}",
            f"use {one_of(ACTIONS)}",
        )
    return value


def _library_prefixes(node: Node) -> tuple[str, ...]:
    """``native_libraries``: file name prefixes of shared libraries (``libmooncake``)."""
    found = []
    for index, text in enumerate(node.texts("native_libraries"), start=1):
        if not LIBRARY_PREFIX.fullmatch(text):
            raise node.error(
                f"native_libraries[{index}]",
                f"{text!r} is not a library file name prefix",
                "name it as its files start, e.g. 'libmooncake' for libmooncake.so.1",
            )
        found.append(text)
    return tuple(dict.fromkeys(found))


def _requirement_list(node: Node, key: str) -> tuple[str, ...]:
    """PEP 508 strings with canonical names, one per package."""
    seen: dict[str, str] = {}
    for index, text in enumerate(node.texts(key), start=1):
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise node.error(
                f"{key}[{index}]",
                f"not a PEP 508 requirement: {text!r}",
                "e.g. 'nvidia-nccl-cu13>=2.30'",
            ) from exc
        if requirement.url:
            raise node.error(f"{key}[{index}]", "a policy names versions, not URLs")
        requirement.name = canonicalize_name(requirement.name)
        if requirement.name in seen:
            raise node.error(
                f"{key}[{index}]",
                f"{requirement.name} is listed twice",
                "merge the specifiers into one entry",
            )
        seen[requirement.name] = str(requirement)
    return tuple(seen.values())


def _lockstep(table: Node) -> tuple[LockstepGroup, ...]:
    groups = []
    for name in table.data:
        if not SIMPLE_NAME.fullmatch(name):
            raise table.error(name, "group names use letters, digits, '.', '_' and '-'")
        members = [canonicalize_name(m) for m in table.texts(name)]
        for index, member in enumerate(members, start=1):
            if not PACKAGE_GLOB.fullmatch(member):
                raise table.error(f"{name}[{index}]", f"not a package name or glob: {member!r}")
        if len(set(members)) != len(members) or not members:
            raise table.error(name, "list each member once", "a group needs distinct members")
        groups.append(LockstepGroup(name, tuple(members)))
    return tuple(groups)


def _waiver(node: Node, stages: Mapping[str, int]) -> Waiver:
    node.check_keys(WAIVER_KEYS, required=("package", "from", "to", "reason"))
    package = node.text("package")
    if not PACKAGE_GLOB.fullmatch(package) or "*" in package or "?" in package:
        raise node.error("package", f"not a package name: {package!r}")
    stage, layer = _waiver_scope(node, stages)
    return Waiver(
        package=canonicalize_name(package),
        from_version=_waiver_version(node, "from"),
        to_version=_waiver_version(node, "to"),
        reason=node.text("reason"),
        expires=_expiry(node),
        rule=_waiver_rule(node),
        stage=stage,
        layer=layer,
    )


def _waiver_rule(node: Node) -> str | None:
    rule = node.optional_text("rule")
    if rule is not None and rule not in WAIVER_RULES:
        raise node.error(
            "rule",
            f"{rule!r} is not a rule that can be waived{did_you_mean(rule, WAIVER_RULES)}",
            f"use {one_of(WAIVER_RULES)} (without rule: the change from -> to)",
        )
    return rule


def _waiver_scope(node: Node, stages: Mapping[str, int]) -> tuple[str | None, int | None]:
    """The stage (a stage name) and 1-based layer a waiver is limited to, if any."""
    stage = node.optional_text("stage")
    names = list(stages)
    if stage is not None and stage not in names:
        raise node.error(
            "stage", f"no stage {stage!r}{did_you_mean(stage, names)}", f"use {one_of(names)}"
        )
    if "layer" not in node.data:
        return stage, None
    layer = node.data["layer"]
    count = stages.get(stage, 0) if stage is not None else 0
    if stage is None or type(layer) is not int or not 1 <= layer <= count:
        raise node.error(
            "layer",
            f"must be a layer number of stage {stage or '(none given)'}: 1 to {count}",
            'give stage = "vK" and layer = N (1-based) together',
        )
    return stage, layer


def _waiver_version(node: Node, key: str) -> str:
    value = node.text(key)
    if value == "*":
        return value
    try:
        version = Version(value)
    except InvalidVersion as exc:
        raise node.error(key, f"not a version: {value!r}", "a PEP 440 version or '*'") from exc
    # normal form, so "2.9.0+CU130" or "1.0-RC1" match what pip installs ("2.9.0+cu130", "1.0rc1")
    return str(version)


def _expiry(node: Node) -> dt.date | None:
    if "expires" not in node.data:
        return None
    value = node.data["expires"]
    if type(value) is not dt.date:
        raise node.error(
            "expires",
            f"must be a TOML date like 2026-12-31, not {value!r}",
            "write it unquoted: expires = 2026-12-31",
        )
    return value


def read_policy_file(source: Source, relpath: str, cuda: str, stages: Mapping[str, int]) -> Policy:
    """The ``[policy]`` table of a policy file (or of a recipe's ``image.toml``), for an image
    that has no recipe of its own: a Dockerfile's build, an image walked as it is."""
    root = read_toml(source, relpath)
    if "image" not in root.data:
        root.check_keys(("policy",))
    return parse_policy(root.table("policy") if "policy" in root.data else None, cuda, stages)
