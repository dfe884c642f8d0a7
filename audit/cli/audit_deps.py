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
from typing import Any

from audit.build.plan import created_time
from audit.cli.options import add_image_policy_arguments, add_report_arguments
from audit.errors import UsageError
from audit.gate.audit_deps import audit_report, recipe_audits
from audit.gate.images import PolicyChoice, audit_image, compare_images
from audit.gate.matrix import (
    StageMatrix,
    matrix_html,
    matrix_markdown,
    matrix_tables,
    stage_matrix,
)
from audit.history.walk.run import WalkContext, walk
from audit.host import atomic, console
from audit.report.findings import (
    FORMATS,
    Report,
    check_output,
    render_text,
    report_exit_code,
)
from audit.report.layers import layers_report, render_layers
from audit.report.output import write_report

CYCLONEDX = "cyclonedx"


@dataclass(frozen=True)
class AuditDepsOptions:
    """The command line, parsed once."""

    images: tuple[str, ...]
    image: str | None
    against: str | None
    recipe: str | None
    policy: Path | None
    cuda: str | None
    fmt: str
    output: Path | None
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
            fmt=args.fmt,
            output=args.output,
            all_packages=args.all_packages,
            strict=args.strict,
        )
        options.validate()
        check_output(options.output)  # before any work: an image audit runs containers
        return options

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


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit-deps",
        help="audit recipes (predicted from locks, no Docker) or existing images, layer by layer",
        description="Audit recipes before a build: the environment after every layer is "
        "predicted from locks/IMAGE/ (base snapshot and locks) and checked by the policy; no "
        "Docker. With --image, walk an existing image's own layers instead (no container) and "
        "judge every layer.",
    )
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
        "engine's), docker-archive:PATH, oci:PATH[:TAG] or registry:HOST/REPO[:TAG|@DIGEST]",
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
    add_report_arguments(parser, extra_formats=("html",))
    for action in parser._actions:  # one more format here: an image's CycloneDX SBOM
        if action.dest == "fmt":
            action.choices = (*(action.choices or FORMATS), CYCLONEDX)
            action.help = f"report format (default: table); {CYCLONEDX}: an SBOM, with --image"
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    options = AuditDepsOptions.from_args(args)
    if options.fmt == CYCLONEDX:
        return write_image_sbom(options)
    matrices: list[StageMatrix] = []
    if options.image:
        return audit_existing(options)
    audits = recipe_audits(options.images, today=date.today(), strict=options.strict)
    report = audit_report(audits)
    matrices = [
        stage_matrix(audit, all_rows=options.all_packages)
        for audit in audits
        if audit.recorded  # an image never recorded has no predicted stages to show
    ]
    write_output(report, matrices, options)
    return report_exit_code(report)


def write_output(report: Report, matrices: list[StageMatrix], options: AuditDepsOptions) -> None:
    """The stage matrix leads (HTML page, Markdown, terminal table), then the findings."""
    if options.fmt == "html":
        _write_text(matrix_html(matrices, report), options.output)
    elif options.fmt == "markdown":
        lead = "".join(matrix_markdown(matrix) + "\n" for matrix in matrices)
        _write_text(lead + render_text(report, "markdown"), options.output)
    else:
        if options.fmt == "table" and options.output is None:
            for matrix in matrices:
                for table in matrix_tables(matrix, console.stdout.width):
                    console.stdout.print(table)
        write_report(report, options.fmt, options.output, console.stdout)


def _write_text(text: str, output: Path | None) -> None:
    """Atomically to ``output``, or to stdout as it is."""
    if output is not None:
        atomic.write_text(output, text)
    else:
        console.stdout.print(text, markup=False, highlight=False, end="", soft_wrap=True)


def audit_existing(options: AuditDepsOptions) -> int:
    """``--image SPEC [--against SPEC]``: the walk, judged and rendered; exit 1 on a failure."""
    assert options.image is not None
    choice = PolicyChoice(options.policy, options.recipe, options.cuda)
    context = WalkContext()
    if options.against:
        judged = compare_images(options.image, options.against, choice, context, today=date.today())
    else:
        judged = audit_image(options.image, choice, context, today=date.today())
    title = f"audit-deps --image {judged.name}"
    _write_text(render_layers(title, [judged], options.fmt, console.stdout.width), options.output)
    return report_exit_code(layers_report(title, [judged]))


def write_image_sbom(options: AuditDepsOptions) -> int:
    """``--image SPEC --format cyclonedx``: the SBOM to ``--output`` or stdout; exit 0."""
    from audit.report.sbom import image_sbom

    if not options.image or options.against:
        raise UsageError(
            f"--format {CYCLONEDX} describes one existing image",
            "use it with --image REF (without --against)",
        )
    result = walk(options.image, WalkContext())
    created = created_time(os.environ, _dt.datetime.now(_dt.UTC))
    _write_text(image_sbom(result.history, options.image, created), options.output)
    return 0
