"""``python -m audit audit-deps``: audit recipes before a build, or any existing image.

Recipes: ``audit-deps [IMAGE ...]`` (none named: every recipe under images/) predicts each
layer's environment from the base snapshot and the locks and applies the policy; no Docker.
Images: ``audit-deps --image REF [--against REF] [--recipe NAME] [--interpreter PATH]`` runs
the snapshot script inside the image(s) and applies the policy (the recipe's, else defaults).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from audit.core.errors import UsageError
from audit.core.policy import Policy
from audit.engines import atomic, console
from audit.engines.image_audit import ImageTarget, audit_image, compare_images
from audit.engines.reports import write_report
from audit.plan.auditdeps import RecipeAudit, audit_recipe, audit_report
from audit.plan.matrix import matrix_html, matrix_markdown, matrix_table, stage_matrix
from audit.plan.paths import find_root, list_images
from audit.plan.recipe import Recipe
from audit.plan.recipe_parse import load_recipe
from audit.plan.report import (
    Report,
    add_report_arguments,
    check_output,
    render_text,
    report_exit_code,
)
from audit.plan.sources import DirectorySource


@dataclass(frozen=True)
class AuditDepsOptions:
    """The command line, parsed once."""

    images: tuple[str, ...]
    image: str | None
    against: str | None
    recipe: str | None
    interpreters: tuple[str, ...]
    fmt: str
    output: Path | None
    all_packages: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AuditDepsOptions:
        options = cls(
            images=tuple(args.images),
            image=args.image,
            against=args.against,
            recipe=args.recipe,
            interpreters=tuple(args.interpreter),
            fmt=args.fmt,
            output=args.output,
            all_packages=args.all_packages,
        )
        options.validate()
        return options

    def validate(self) -> None:
        if self.against and not self.image:
            raise UsageError("--against needs --image", "e.g. --image NEW:tag --against OLD:tag")
        if self.image and self.images:
            raise UsageError(
                f"recipe names {' '.join(self.images)} given with --image",
                "use --recipe NAME to take the policy and interpreters from a recipe",
            )
        if not self.image and (self.recipe or self.interpreters):
            raise UsageError(
                "--recipe and --interpreter apply to --image only",
                "add --image REF to audit an existing image, or drop them to audit recipes",
            )


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit-deps",
        help="audit recipes (predicted from locks, no Docker) or existing images",
        description="Audit recipes before a build: the environment after every layer is "
        "predicted from locks/IMAGE/ (base snapshot and locks) and checked by the policy; no "
        "Docker. With --image, audit an existing image instead (needs Docker).",
    )
    parser.add_argument(
        "images",
        nargs="*",
        metavar="IMAGE",
        help="recipes: folder names under images/ (default: every recipe)",
    )
    parser.add_argument(
        "--image", metavar="REF", help="audit this existing image instead of recipes"
    )
    parser.add_argument(
        "--against", metavar="REF", help="with --image: compare it with this (older) image"
    )
    parser.add_argument(
        "--recipe",
        metavar="NAME",
        help="with --image: take the policy and interpreters from images/NAME/image.toml "
        "(default: the default policy)",
    )
    parser.add_argument(
        "--interpreter",
        metavar="PATH",
        action="append",
        default=[],
        help="with --image: also audit this Python inside the image (repeatable)",
    )
    parser.add_argument(
        "--all-packages",
        action="store_true",
        help="stage matrix: show every package, not only those that change between stages",
    )
    add_report_arguments(parser, extra_formats=("html",))
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    options = AuditDepsOptions.from_args(args)
    check_output(options.output)  # before any work: an image audit runs containers
    if options.image:
        report, matrices = image_report(options), []
    else:
        audits = recipe_audits(options.images)
        report = audit_report(audits)
        matrices = [stage_matrix(audit, all_rows=options.all_packages) for audit in audits]
    if options.fmt == "html":
        _write_text(matrix_html(matrices, report), options.output)
    elif options.fmt == "markdown":
        lead = "".join(matrix_markdown(matrix) + "\n" for matrix in matrices)
        _write_text(lead + render_text(report, "markdown"), options.output)
    else:
        if options.fmt == "table" and options.output is None:
            for matrix in matrices:
                console.stdout.print(matrix_table(matrix))
        write_report(report, options.fmt, options.output, console.stdout)
    return report_exit_code(report)


def _write_text(text: str, output: Path | None) -> None:
    """Atomically to ``output``, or to stdout as it is."""
    if output is not None:
        atomic.write_text(output, text)
    else:
        console.stdout.print(text, markup=False, highlight=False, end="", soft_wrap=True)


def recipes_report(names: tuple[str, ...]) -> Report:
    """Audit the named recipes (all under images/ when none) of the project around the cwd."""
    return audit_report(recipe_audits(names))


def recipe_audits(names: tuple[str, ...]) -> list[RecipeAudit]:
    """Audit the named recipes (all under images/ when none) of the project around the cwd."""
    source = DirectorySource(find_root())
    selected = names or tuple(list_images(source.root))
    if not selected:
        raise UsageError(
            f"no recipes under {source.root / 'images'}", "add images/<name>/image.toml"
        )
    today = date.today()
    return [audit_recipe(source, load_recipe(source, name), today=today) for name in selected]


def image_report(options: AuditDepsOptions) -> Report:
    assert options.image is not None  # validate() guarantees it
    recipe = _load_optional_recipe(options.recipe)
    interpreters = (*(recipe.interpreters if recipe else ()), *options.interpreters)
    policy = recipe.policy if recipe else Policy()
    target = ImageTarget(options.image, interpreters)
    if options.against:
        against = ImageTarget(options.against, interpreters)
        return compare_images(target, against, policy, today=date.today())
    return audit_image(target, policy, today=date.today())


def _load_optional_recipe(name: str | None) -> Recipe | None:
    if name is None:
        return None
    root = find_root()
    image = Path(name).name if "/" in name else name  # accept images/X as well as X
    return load_recipe(DirectorySource(root), image)
