"""``python -m audit diff BEFORE.json AFTER.json``: judge the change between two snapshots."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from audit.core.errors import UsageError
from audit.core.findings import Finding
from audit.core.policy import Policy
from audit.core.snapshot import Environment, read_snapshot
from audit.core.verdict import evaluate, evaluate_shadowed
from audit.engines import console
from audit.engines.reports import write_report
from audit.plan import paths
from audit.plan.report import (
    Report,
    Section,
    add_report_arguments,
    check_output,
    report_exit_code,
    summary_line,
)
from audit.plan.sources import DirectorySource


@dataclass(frozen=True)
class DiffOptions:
    before: Path
    after: Path
    recipe: str | None
    fmt: str
    output: Path | None
    interpreter: str | None


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="compare two snapshots and apply the policy (exit 1 on a violation)",
        description="Judge the change between two snapshot files (python -m audit snapshot) "
        "with a recipe's policy, or the default one; exit 1 on a violation.",
    )
    parser.add_argument("before", type=Path, help="snapshot file before the change")
    parser.add_argument("after", type=Path, help="snapshot file after the change")
    parser.add_argument(
        "--recipe",
        metavar="NAME",
        help="take the policy from images/NAME/image.toml (default: the default policy)",
    )
    add_report_arguments(parser)
    parser.add_argument(
        "--interpreter",
        metavar="PATH",
        help="compare only this interpreter's environment (default: every one in the files)",
    )
    parser.set_defaults(handler=run)


def load_policy(recipe: str | None) -> Policy:
    """The recipe's policy (with its CUDA tag), or the default policy without a recipe."""
    if recipe is None:
        return Policy()
    from audit.plan.recipe_parse import load_recipe

    loaded = load_recipe(DirectorySource(paths.find_root()), PurePosixPath(recipe).name)
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
    before: tuple[Environment, ...], after: tuple[Environment, ...], options: DiffOptions
) -> list[tuple[Environment, Environment]]:
    """Which environments to compare: one pair per interpreter (or the only one in each file)."""
    if options.interpreter:
        wanted = options.interpreter
        return [(_select(before, wanted, options.before), _select(after, wanted, options.after))]
    if len(before) == 1 and len(after) == 1:
        return [(before[0], after[0])]
    return [(_select(before, env.interpreter, options.before), env) for env in after]


def _findings(old: Environment, new: Environment, policy: Policy, where: str) -> list[Finding]:
    today = datetime.date.today()
    changes = evaluate(old.winners(), new.winners(), policy, where=where, today=today)
    return changes + evaluate_shadowed(old, new, policy, where=where, today=today)


def build_report(options: DiffOptions, policy: Policy) -> Report:
    pairs = pair_environments(read_snapshot(options.before), read_snapshot(options.after), options)
    sections = tuple(
        Section(new.interpreter, tuple(_findings(old, new, policy, f"{options.after}")))
        for old, new in pairs
    )
    return Report(f"diff {options.before} -> {options.after}", sections)


def run(args: argparse.Namespace) -> int:
    options = DiffOptions(
        args.before, args.after, args.recipe, args.fmt, args.output, args.interpreter
    )
    check_output(options.output)
    report = build_report(options, load_policy(options.recipe))
    write_report(report, options.fmt, options.output, console.stdout)
    if options.output is not None:
        console.stderr.print(summary_line(report), markup=False)
    return report_exit_code(report)
