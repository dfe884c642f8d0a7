"""``layer-audit build --dockerfile PATH``: the user's Dockerfile, built unchanged, walked, tagged.

The options of ``build`` that this mode reads (``--platform``, ``--cache-from``, ``--cache-to``,
``--network``, ``--no-cache``, ``--builder``, ``--push``, ``--docker``, ``--format``) keep their
meaning; the rest of a ``docker build`` command line passes through: ``-t``, ``--target``,
``--build-arg``, ``--secret``, ``--ssh``, ``--build-context``, and anything after ``--``.
Exit codes: 0 built, every layer passed, tags moved; 1 a layer broke the policy (the report
names it; no tag moved); 2 bad input; 3 the build or the engine failed.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from audit.build.dockerfile import DockerfileBuild, StageAudit, audit_targets, move_tags
from audit.build.plan import NETWORK_AUTO, DockerClient, client_flags
from audit.cli.options import add_image_policy_arguments
from audit.docker import host as docker_host
from audit.docker import registry
from audit.errors import EXIT_OK, EXIT_VIOLATION, UsageError
from audit.gate.images import PolicyChoice
from audit.history.walk.run import WalkContext
from audit.host import atomic, console
from audit.report.layers import render_layers

FORMATS = ("table", "json", "markdown", "html")
# Passed to docker build as given; --secret and --ssh are the recipe build's own options.
PASSED_THROUGH = ("--build-context", "--label", "--add-host")


def add_dockerfile_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the ``--dockerfile`` mode, beside the recipe build's own."""
    group = parser.add_argument_group(
        "your own Dockerfile (build --dockerfile PATH [options] [-- DOCKER-BUILD-OPTIONS])"
    )
    group.add_argument(
        "-f", "--dockerfile", type=Path, metavar="PATH",
        help="build this Dockerfile unchanged instead of a recipe, audit every layer of the "
        "result, and move the tags only when every layer passes",
    )  # fmt: skip
    group.add_argument(
        "--context", type=Path, metavar="DIR",
        help="the build context (default: the Dockerfile's folder)",
    )  # fmt: skip
    group.add_argument(
        "-t", "--tag", action="append", default=[], metavar="NAME:TAG",
        help="tag the image with this when it passes (repeatable)",
    )  # fmt: skip
    for option in PASSED_THROUGH:
        group.add_argument(
            option, action="append", default=[], metavar="VALUE",
            help=f"passed to docker build as {option} VALUE (repeatable)",
        )  # fmt: skip
    group.add_argument(
        "--all-stages", action="store_true",
        help="build and audit every stage of the file, not only the target (tags the target)",
    )  # fmt: skip
    group.add_argument("--output", type=Path, metavar="FILE", help="write the report here")
    add_image_policy_arguments(group)
    parser.add_argument("docker_args", nargs="*", help=argparse.SUPPRESS)
    for action in parser._actions:  # the report formats of an audited image
        if action.dest == "fmt":
            action.choices = FORMATS


RECIPE_FORMATS = ("table", "json")


def dockerfile_only(args: argparse.Namespace) -> list[str]:
    """The ``--dockerfile`` options given without it (a recipe build refuses them)."""
    given = [
        option for option in ("context", "tag", "all_stages", "output",
                              "policy", "recipe", "cuda", "docker_args",
                              *(o.lstrip("-").replace("-", "_") for o in PASSED_THROUGH))
        if getattr(args, option)
    ]  # fmt: skip
    if args.fmt not in RECIPE_FORMATS:
        given.append(f"--format {args.fmt}")
    return [g if g.startswith("--") else "--" + g.replace("_", "-") for g in given]


@dataclass(frozen=True)
class DockerfileOptions:
    """The ``--dockerfile`` command line, parsed once."""

    build: DockerfileBuild
    choice: PolicyChoice
    docker: str | None
    builder: str | None
    push: bool
    fmt: str
    output: Path | None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DockerfileOptions:
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
        choice = PolicyChoice(args.policy, args.recipe, args.cuda)
        return cls(build, choice, args.docker, args.builder, args.push, args.fmt, args.output)


def _refuse_recipe_options(args: argparse.Namespace) -> None:
    if args.no_guard or args.ca_bundle:
        raise UsageError(
            "--no-guard and --ca-bundle build recipes, not a Dockerfile",
            "name the stage with --target; pass CA bundles as --secret id=…,src=… as the "
            "Dockerfile's RUN --mount=type=secret expects",
        )
    if args.push and not args.tag:
        raise UsageError("--push needs a tag to push", "add -t NAME:TAG")


def passthrough(args: argparse.Namespace) -> tuple[str, ...]:
    """Every ``docker build`` option this mode does not read itself, in the user's order."""
    found: list[str] = []
    for secret in args.secrets:
        found += ["--secret", secret]
    for agent in args.ssh:
        found += ["--ssh", agent]
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


def handle(args: argparse.Namespace) -> int:
    """Build, walk, judge; tag (and push) only a passing image."""
    options = DockerfileOptions.from_args(args)
    client = docker_host.detect_client(options.docker)
    prefix = client_flags(client, options.builder)
    audits = audit_targets(
        options.build,
        client=client,
        prefix=prefix,
        context=WalkContext(platform=options.build.platform),
        choice=options.choice,
        today=date.today(),
    )
    text = render_layers(
        f"build --dockerfile {options.build.dockerfile}",
        [audit.judged for audit in audits],
        options.fmt,
        console.stdout.width,
    )
    if options.output is not None:
        atomic.write_text(options.output, text)
    else:
        console.stdout.print(text, markup=False, highlight=False, end="", soft_wrap=True)
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
