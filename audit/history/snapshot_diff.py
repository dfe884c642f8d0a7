"""diff: judge the change between two snapshot files with a recipe's policy (or the default).

Pairs the environments of the two files (one interpreter named, the only one in each file, or
every interpreter of the newer file with the same one in the older), applies the policy's
change and shadowing rules to each pair, and reports one section per interpreter, then one for
what lies below Python (OS package changes, shadowed native libraries) when the files hold it.
Reads only the two files and, with a recipe name, that recipe: no process, no Docker.
"""

from __future__ import annotations

import dataclasses
from datetime import date
from pathlib import Path, PurePosixPath

from audit.errors import UsageError
from audit.history.snapshot import Environment, read_snapshot
from audit.policy.findings import Finding
from audit.policy.model import Policy
from audit.policy.system_rules import evaluate_system
from audit.policy.verdict import evaluate, evaluate_shadowed
from audit.project.sources import Source
from audit.recipe.parse import load_recipe
from audit.report.findings import Report, Section


def load_policy(source: Source | None, recipe: str | None) -> Policy:
    """The policy of ``recipe`` at ``source`` (with its CUDA tag), or the default policy
    without a recipe."""
    if recipe is None or source is None:
        return Policy()
    loaded = load_recipe(source, PurePosixPath(recipe).name)
    policy: Policy = loaded.policy
    return policy if policy.cuda else dataclasses.replace(policy, cuda=loaded.cuda)


def _select(envs: tuple[Environment, ...], interpreter: str, source: Path) -> Environment:
    for env in envs:
        if env.interpreter == interpreter:
            return env
    found = ", ".join(env.interpreter for env in envs)
    raise UsageError(
        f"{source}: no environment for interpreter {interpreter}", f"it holds: {found}"
    )


def pair_environments(
    before: tuple[Environment, ...],
    after: tuple[Environment, ...],
    *,
    interpreter: str | None,
    files: tuple[Path, Path],
) -> list[tuple[Environment, Environment]]:
    """Which environments to compare: one pair per interpreter (or the only one in each file).

    ``files`` names the two snapshot files (before, after) in the error for a missing one.
    """
    if interpreter:
        return [(_select(before, interpreter, files[0]), _select(after, interpreter, files[1]))]
    if len(before) == 1 and len(after) == 1:
        return [(before[0], after[0])]
    return [(_select(before, env.interpreter, files[0]), env) for env in after]


def _findings(
    old: Environment, new: Environment, policy: Policy, where: str, today: date
) -> list[Finding]:
    changes = evaluate(old.winners(), new.winners(), policy, where=where, today=today)
    return changes + evaluate_shadowed(old, new, policy, where=where, today=today)


def diff_report(
    before: Path, after: Path, *, policy: Policy, interpreter: str | None, today: date
) -> Report:
    """The change from snapshot file ``before`` to ``after`` under ``policy``."""
    pairs = pair_environments(
        read_snapshot(before), read_snapshot(after), interpreter=interpreter, files=(before, after)
    )
    sections = tuple(
        Section(new.interpreter, tuple(_findings(old, new, policy, f"{after}", today)))
        for old, new in pairs
    )
    return Report(
        f"diff {before} -> {after}", sections + _system_section(pairs, policy, after, today)
    )


SYSTEM_TITLE = "below Python (OS packages, native libraries)"


def _system_section(
    pairs: list[tuple[Environment, Environment]], policy: Policy, after: Path, today: date
) -> tuple[Section, ...]:
    """OS package changes and shadowed native libraries, when both files recorded them."""
    old = next((o.system for o, _ in pairs if o.system is not None), None)
    new = next((n.system for _, n in pairs if n.system is not None), None)
    if new is None:
        return ()
    found = evaluate_system(old, new, policy, where=f"{after}", today=today)
    return (Section(SYSTEM_TITLE, tuple(found)),)
