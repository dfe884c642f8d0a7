"""``python -m audit build [IMAGE]``: render, build every stage with the guard, then tag.

Exit codes: 0 built and tagged; 1 the guard (or a smoke test) stopped the build; 2 bad input
(recipe, locks, arguments); 3 the host cannot build (no daemon, no BuildKit, no base image,
disk full). A failed build moves no tag.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from audit.build.plan import NETWORK_AUTO, BuildOptions
from audit.build.run import build_image
from audit.cli.context import RunContext
from audit.cli.options import JSON, TERMINAL, add_client_option, add_report_arguments
from audit.cli.output import Output, command_reports
from audit.errors import EXIT_OK
from audit.redact import redact_json
from audit.render.stages import parse_build_arg

DEFAULT_IMAGE = "demo"
FORMATS = (TERMINAL, JSON)


HELP = "render and build an image's stages with the guard, then tag them"
DESCRIPTION = (
    "Render the recipe, build its stages with BuildKit and the guard after every pip and run "
    "layer, then tag them. Needs the locks (nox -s lock) and Docker; a failed build moves no "
    "tag."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "image",
        nargs="?",
        default=DEFAULT_IMAGE,
        help=f"a recipe: the folder name under images/ (default: {DEFAULT_IMAGE})",
    )
    parser.add_argument(
        "--stage",
        "--target",
        metavar="vK",
        help="build what stage vK (or the Dockerfile stage name its target gives) needs and "
        "tag vK only (default: every stage, each tagged)",
    )
    parser.add_argument(
        "--build-arg",
        dest="build_args",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a value for one of the recipe's build arguments ([args], arg layers; repeatable)",
    )
    parser.add_argument(
        "--secret",
        dest="secrets",
        action="append",
        default=[],
        metavar="id=ID,src=FILE",
        help="a secret a layer's secret mount reads, passed to BuildKit as it is (repeatable)",
    )
    parser.add_argument(
        "--ssh",
        action="append",
        default=[],
        metavar="ID[=SOCKET]",
        help="an SSH agent for a layer's ssh mount, passed to BuildKit (repeatable)",
    )
    parser.add_argument(
        "--platform",
        metavar="OS/ARCH",
        help="build for this platform, e.g. linux/arm64 (default: the recipe's platform); "
        "a list (linux/amd64,linux/arm64) makes one multi-arch tag: buildx and --push only",
    )
    parser.add_argument(
        "--push",
        action="store_true",
        help="push every tag the build moved, after its guard and smoke test passed; the "
        "digests go to build/reports/IMAGE/push.json",
    )
    parser.add_argument(
        "--cache-from",
        action="append",
        default=[],
        metavar="REF",
        help="reuse the BuildKit inline cache of this pushed image (repeatable), e.g. what "
        "another machine pushed with --cache-to",
    )
    parser.add_argument(
        "--cache-to",
        metavar="REF",
        help="push the target stage's image here with its inline cache, for --cache-from",
    )
    parser.add_argument(
        "--builder",
        metavar="NAME",
        help="hand the build to this existing buildx builder, e.g. a remote BuildKit",
    )
    add_client_option(parser)
    parser.add_argument(
        "--network",
        default=NETWORK_AUTO,
        help="the build's network: auto (host when layers fetch packages), default, host, none "
        f"(default: {NETWORK_AUTO})",
    )
    parser.add_argument(
        "--ca-bundle",
        type=Path,
        metavar="FILE",
        help="CA bundle for pip, passed as a BuildKit secret (default: $SSL_CERT_FILE, "
        "else $PIP_CERT)",
    )
    parser.add_argument(
        "--no-guard",
        action="store_true",
        help="for measuring the guard's cost: build without it and move no tag",
    )
    parser.add_argument(
        "--no-cache", action="store_true", help="rebuild every layer (no BuildKit cache)"
    )
    add_report_arguments(
        parser,
        FORMATS,
        what="the outcome (json: the stages' image ids and tags, pushed digests, the guard's "
        "reports and the log path; progress stays on stderr)",
    )


@dataclass(frozen=True)
class BuildCommandOptions:
    """The command line, parsed once, and the project it runs in."""

    root: Path  # the project around the working folder
    build: BuildOptions
    output: Output

    @classmethod
    def from_args(cls, args: argparse.Namespace, context: RunContext) -> BuildCommandOptions:
        output = command_reports(args, FORMATS, file_formats=(JSON,))  # before a long build
        build = BuildOptions(
            image=args.image,
            stage=args.stage,
            platform=args.platform,
            push=args.push,
            builder=args.builder,
            docker=args.docker,
            network=args.network,
            ca_bundle=args.ca_bundle,
            guard=not args.no_guard,
            no_cache=args.no_cache,
            cache_from=tuple(args.cache_from),
            cache_to=args.cache_to,
            build_args=tuple(parse_build_arg(a) for a in args.build_args),
            secrets=tuple(args.secrets),
            ssh=tuple(args.ssh),
        )
        return cls(context.root(), build, output)


def handle(args: argparse.Namespace, context: RunContext) -> int:
    options = BuildCommandOptions.from_args(args, context)
    outcome = build_image(options.root, options.build)
    if options.output.fmt == JSON:
        text = json.dumps(redact_json(outcome.to_json(options.root)), indent=2, sort_keys=True)
        options.output.write(text + "\n")
    return EXIT_OK
