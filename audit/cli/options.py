"""Options several commands share, worded alike; argparse only, so the quick path can use them.

Nothing below ``audit/cli`` defines or reads command-line options: the engines and the plan take
typed values, never an ``argparse.Namespace`` or a parser.
"""

from __future__ import annotations

import argparse
from pathlib import Path

# audit.docker.host.DOCKER_ENV (not imported: this module stays argparse-only)
DOCKER_ENV = "LAYER_AUDIT_DOCKER"


def add_client_option(parser: argparse.ArgumentParser) -> None:
    """The ``--docker PATH`` option of every command that runs a docker client."""
    parser.add_argument(
        "--docker",
        metavar="PATH",
        help=f"the docker client program, a path or a name (default: ${DOCKER_ENV}, else detected)",
    )


def add_report_arguments(
    parser: argparse.ArgumentParser, extra_formats: tuple[str, ...] = ()
) -> None:
    """``--format`` (into ``fmt``) and ``--output FILE``, worded alike for every command;
    ``extra_formats`` are formats only this command renders (audit-deps: ``html``)."""
    from audit.report.findings import FORMATS

    parser.add_argument(
        "--format",
        dest="fmt",
        choices=(*FORMATS, *extra_formats),
        default="table",
        help="report format (default: table)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the report to FILE (atomically) instead of stdout",
    )


def add_image_policy_arguments(parser: argparse._ActionsContainer) -> None:
    """Where the policy of an image with no recipe comes from, and its CUDA tag."""
    parser.add_argument(
        "--recipe",
        metavar="NAME",
        help="take the policy from images/NAME/image.toml (default: the default policy, with "
        "the cuda-ml preset for a CUDA image)",
    )
    parser.add_argument(
        "--policy",
        type=Path,
        metavar="FILE",
        help="take the policy from the [policy] table of FILE (waivers may name the "
        "Dockerfile's stages)",
    )
    parser.add_argument(
        "--cuda",
        metavar="TAG",
        help="the image's CUDA tag (cu130, cpu); default: read from the image's CUDA_VERSION "
        "or its packages",
    )
