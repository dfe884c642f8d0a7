"""``layer-audit build --dockerfile PATH``: the user's Dockerfile, built unchanged, walked, tagged.

The options of ``build`` that this mode reads keep their meaning (``--stage``/``--target``,
``--build-arg``, ``--secret``, ``--ssh``, ``--platform``, ``--cache-from``, ``--cache-to``,
``--network``, ``--no-cache``, ``--builder``, ``--push``, ``--docker``, ``--format``,
``--output``); ``--build-context``, ``--label``, ``--add-host`` and anything after ``--`` pass
through to ``docker build`` untouched. Exit codes: 0 built, every layer passed, tags moved; 1 a
layer broke the policy (the report names it; no tag moved); 2 bad input; 3 the build or the
engine failed.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from audit.build.dockerfile import DockerfileBuild, StageAudit, audit_targets, move_tags
from audit.build.plan import NETWORK_AUTO, DockerClient, client_flags
from audit.cli.context import RunContext
from audit.cli.options import add_image_policy_arguments
from audit.cli.output import Output
from audit.docker import host as docker_host
from audit.docker import registry
from audit.errors import EXIT_OK, EXIT_VIOLATION, UsageError
from audit.gate.images import PolicyChoice, load_named_recipe
from audit.history.walk.run import WalkContext
from audit.host import console
from audit.report.layers import render_layers

# Passed to docker build as given (the recipe build has --secret and --ssh of its own).
PASSED_THROUGH = ("--build-context", "--label", "--add-host")
_ONLY_HERE = ("context", "tag", "all_stages", "policy", "recipe", "cuda", "docker_args")


def add_dockerfile_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the ``--dockerfile`` mode, beside the recipe build's own."""
    group = parser.add_argument_group(
        "your own Dockerfile (build --dockerfile PATH [options] [-- DOCKER-BUILD-OPTIONS])"
    )
    group.add_argument(
        "-f",
        "--dockerfile",
        type=Path,
        metavar="PATH",
        help="build this Dockerfile unchanged instead of a recipe, audit every layer of the "
        "result, and move the tags only when every layer passes",
    )
    group.add_argument(
        "--context", type=Path, metavar="DIR", help="the build context (default: its folder)"
    )
    group.add_argument(
        "-t",
        "--tag",
        action="append",
        default=[],
        metavar="NAME:TAG",
        help="tag the image with this when it passes (repeatable)",
    )
    for option in PASSED_THROUGH:
        group.add_argument(
            option,
            action="append",
            default=[],
            metavar="VALUE",
            help=f"passed to docker build as {option} VALUE (repeatable)",
        )
    group.add_argument(
        "--all-stages",
        action="store_true",
        help="build and audit every stage of the file, not only the target (tags the target)",
    )
    add_image_policy_arguments(group)
    parser.add_argument("docker_args", nargs="*", help=argparse.SUPPRESS)


def dockerfile_only(args: argparse.Namespace, recipe_formats: Sequence[str]) -> list[str]:
    """The ``--dockerfile`` options given without it (a recipe build refuses them)."""
    names = [*_ONLY_HERE, *(o.lstrip("-").replace("-", "_") for o in PASSED_THROUGH)]
    given = ["--" + name.replace("_", "-") for name in names if getattr(args, name)]
    return given + [f"--format {f}" for f in args.formats or () if f not in recipe_formats]


@dataclass(frozen=True)
class DockerfileOptions:
    """The ``--dockerfile`` command line, parsed once."""

    build: DockerfileBuild
    choice: PolicyChoice
    docker: str | None
    builder: str | None
    push: bool

    @classmethod
    def from_args(cls, args: argparse.Namespace, context: RunContext) -> DockerfileOptions:
        _refuse_recipe_options(args)
        dockerfile: Path = args.dockerfile
        build = DockerfileBuild(
            dockerfile=dockerfile,
            context=args.context or dockerfile.resolve().parent,
            tags=tuple(args.tag),
            target=args.stage,
            platform=args.platform,
            build_args=tuple(args.build_args),
            passthrough=passthrough(args),
            all_stages=args.all_stages,
        )
        recipe = load_named_recipe(context.source(), args.recipe) if args.recipe else None
        choice = PolicyChoice(args.policy, recipe, args.cuda)
        return cls(build, choice, args.docker, args.builder, args.push)


def _refuse_recipe_options(args: argparse.Namespace) -> None:
    if args.no_guard or args.ca_bundle:
        raise UsageError(
            "--no-guard and --ca-bundle build recipes, not a Dockerfile",
            "pass a CA bundle as --secret id=…,src=… as the Dockerfile's secret mount expects",
        )
    if args.push and not args.tag:
        raise UsageError("--push needs a tag to push", "add -t NAME:TAG")
    if args.policy and args.recipe:
        raise UsageError("--policy and --recipe both name a policy", "give one of them")


def passthrough(args: argparse.Namespace) -> tuple[str, ...]:
    """Every ``docker build`` option this mode does not read itself, in a fixed order."""
    found: list[str] = []
    for option, values in (("--secret", args.secrets), ("--ssh", args.ssh)):
        for value in values:
            found += [option, value]
    for option in PASSED_THROUGH:
        for value in getattr(args, option.lstrip("-").replace("-", "_")):
            found += [option, value]
    for ref in args.cache_from:
        found += ["--cache-from", ref]
    if args.cache_to:
        found += ["--cache-to", args.cache_to]
    if args.network != NETWORK_AUTO:
        found += ["--network", args.network]
    if args.no_cache:
        found.append("--no-cache")
    extra = ([args.image] if args.image else []) + list(args.docker_args)
    return (*found, *extra)


def handle(args: argparse.Namespace, context: RunContext, output: Output) -> int:
    """Build, walk, judge; tag (and push) only a passing image."""
    options = DockerfileOptions.from_args(args, context)
    client = docker_host.detect_client(options.docker)
    audits = audit_targets(
        options.build,
        client=client,
        prefix=client_flags(client, options.builder),
        context=WalkContext(platform=options.build.platform),
        choice=options.choice,
        today=date.today(),
    )
    title = f"build --dockerfile {options.build.dockerfile}"
    judged = [audit.judged for audit in audits]
    output.write(render_layers(title, judged, output.fmt, console.stdout.width))
    return _finish(audits, options, client)


def _finish(audits: list[StageAudit], options: DockerfileOptions, client: DockerClient) -> int:
    if any(audit.fails for audit in audits):
        console.stderr.print("no tag was moved: a layer broke the policy", markup=False)
        return EXIT_VIOLATION
    final = audits[-1]
    move_tags(final.image_id, options.build.tags)
    for tag in options.build.tags:
        console.stderr.print(f"tagged {tag} ({final.image_id[:19]})", markup=False)
    if options.push:
        registry.push_tags(client, options.build.tags)
    return EXIT_OK
