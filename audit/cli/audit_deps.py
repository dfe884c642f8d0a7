"""``python -m audit audit-deps``: audit recipes before a build, or any existing image.

Recipes: ``audit-deps [IMAGE ...]`` (none named: every recipe under images/) predicts each
layer's environment from the base snapshot and the locks and applies the policy; no Docker.
Images: ``audit-deps --image SPEC [--against SPEC] [--policy FILE | --recipe NAME]`` walks the
image's own layers (the engine, a ``docker save`` file, an OCI layout, a registry; no container)
and judges every layer (:mod:`audit.gate.images`); ``--image SPEC --format cyclonedx`` writes
its CycloneDX SBOM instead, each component with the layer that installed it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from audit.build.plan import created_time
from audit.cli.context import RunContext
from audit.cli.options import (
    HTML,
    JSON,
    MARKDOWN,
    TERMINAL,
    add_image_policy_arguments,
    add_report_arguments,
)
from audit.cli.output import Output, command_reports
from audit.errors import UsageError
from audit.gate.audit_deps import audit_report, recipe_audits
from audit.gate.images import PolicyChoice, audit_image, compare_images, load_named_recipe
from audit.gate.matrix import (
    StageMatrix,
    matrix_html,
    matrix_markdown,
    matrix_tables,
    stage_matrix,
)
from audit.history.walk.run import WalkContext, walk
from audit.host import console
from audit.project.sources import Source
from audit.recipe.model import Recipe
from audit.report.findings import Report, render_text, report_exit_code
from audit.report.layers import layers_report, render_layers
from audit.report.output import write_report

CYCLONEDX = "cyclonedx"  # an image's SBOM, with --image (not a report of findings)
FORMATS = (TERMINAL, JSON, MARKDOWN, HTML, CYCLONEDX)
HELP = "audit recipes (predicted from locks, no Docker) or existing images, layer by layer"
DESCRIPTION = (
    "Audit recipes before a build: the environment after every layer is predicted from "
    "locks/IMAGE/ (base snapshot and locks) and checked by the policy; no Docker. With "
    "--image, walk an existing image's own layers instead (no container, any platform) and "
    "judge every layer."
)


@dataclass(frozen=True)
class AuditDepsOptions:
    """The command line, parsed once."""

    images: tuple[str, ...]
    image: str | None
    against: str | None
    recipe: str | None
    policy: Path | None
    cuda: str | None
    output: Output  # checked writable before any work: an image audit walks its layers
    all_packages: bool = False
    strict: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AuditDepsOptions:
        options = cls(
            images=tuple(args.images),
            image=args.image,
            against=args.against,
            recipe=args.recipe,
            policy=args.policy,
            cuda=args.cuda,
            output=command_reports(args, FORMATS),
            all_packages=args.all_packages,
            strict=args.strict,
        )
        options.validate()
        return options

    @property
    def fmt(self) -> str:
        return self.output.fmt

    def validate(self) -> None:
        if self.against and not self.image:
            raise UsageError("--against needs --image", "e.g. --image NEW:tag --against OLD:tag")
        if self.image and self.images:
            raise UsageError(
                f"recipe names {' '.join(self.images)} given with --image",
                "use --recipe NAME to take the policy and interpreters from a recipe",
            )
        if not self.image and (self.recipe or self.policy or self.cuda):
            raise UsageError(
                "--recipe, --policy and --cuda apply to --image only",
                "add --image REF to audit an existing image, or drop them to audit recipes",
            )
        if self.recipe and self.policy:
            raise UsageError("--recipe and --policy both name a policy", "give one of them")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "images",
        nargs="*",
        metavar="IMAGE",
        help="recipes: folder names under images/ (default: every recipe)",
    )
    parser.add_argument(
        "--image",
        metavar="SPEC",
        help="audit this existing image, layer by layer, instead of recipes: REF (the "
        "engine's), docker-archive:PATH, oci:PATH[:TAG], an existing ./PATH or FILE.tar, or "
        "registry:HOST/REPO[:TAG|@DIGEST]",
    )
    parser.add_argument(
        "--against", metavar="SPEC", help="with --image: compare it with this (older) image"
    )
    add_image_policy_arguments(parser)
    parser.add_argument(
        "--all-packages",
        action="store_true",
        help="stage matrix: show every package, not only those that change between stages",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail (exit 1) on every recipe that is not audited (no base record); without it "
        "such a recipe is a warning unless it is named",
    )
    add_report_arguments(parser, FORMATS, what=f"the report ({CYCLONEDX}: an SBOM, with --image)")


def handle(args: argparse.Namespace, context: RunContext) -> int:
    options = AuditDepsOptions.from_args(args)
    recipe = _named_recipe(context, options.recipe)
    if options.fmt == CYCLONEDX:
        return write_image_sbom(options, recipe)
    matrices: list[StageMatrix] = []
    if options.image:
        return audit_existing(options, recipe)
    audits = recipe_audits(
        options.images, today=date.today(), source=context.source(), strict=options.strict
    )
    report = audit_report(audits)
    matrices = [
        stage_matrix(audit, all_rows=options.all_packages, memo=context.memo)
        for audit in audits
        if audit.recorded  # an image never recorded has no predicted stages to show
    ]
    write_output(report, matrices, options.output)
    return report_exit_code(report)


def _named_recipe(context: RunContext, name: str | None) -> Recipe | None:
    """``--recipe NAME`` (``images/NAME`` accepted too) of the command's project."""
    if name is None:
        return None
    source: Source = context.source()
    return load_named_recipe(source, name)


def write_output(report: Report, matrices: list[StageMatrix], output: Output) -> None:
    """The stage matrix leads (HTML page, Markdown, terminal table), then the findings."""
    if output.fmt == HTML:
        output.write(matrix_html(matrices, report))
    elif output.fmt == MARKDOWN:
        lead = "".join(matrix_markdown(matrix) + "\n" for matrix in matrices)
        output.write(lead + render_text(report, MARKDOWN))
    else:
        if output.fmt == TERMINAL and output.path is None:
            for matrix in matrices:
                for table in matrix_tables(matrix, console.stdout.width):
                    console.stdout.print(table)
        write_report(report, output.fmt, output.path, console.stdout)


def audit_existing(options: AuditDepsOptions, recipe: Recipe | None) -> int:
    """``--image SPEC [--against SPEC]``: the walk, judged and rendered; exit 1 on a failure."""
    assert options.image is not None
    choice = PolicyChoice(options.policy, recipe, options.cuda)
    context, today = WalkContext(), date.today()
    if options.against:
        judged = compare_images(options.image, options.against, choice, context, today=today)
    else:
        judged = audit_image(options.image, choice, context, today=today)
    title = f"audit-deps --image {judged.name}"
    options.output.write(render_layers(title, [judged], options.fmt, console.stdout.width))
    return report_exit_code(layers_report(title, [judged]))


def write_image_sbom(options: AuditDepsOptions, recipe: Recipe | None) -> int:
    """``--image SPEC --format cyclonedx``: the SBOM to ``--output`` or stdout; exit 0."""
    from audit.report.sbom import image_sbom  # cyclonedx-python-lib: only an SBOM needs it

    if not options.image or options.against:
        raise UsageError(
            f"--format {CYCLONEDX} describes one existing image",
            "use it with --image REF (without --against)",
        )
    del recipe  # the walk finds every environment; the SBOM needs no policy
    result = walk(options.image, WalkContext())
    created = created_time(os.environ, _dt.datetime.now(_dt.UTC))
    options.output.write(image_sbom(result.history, options.image, created))
    return 0
