"""``python -m audit build [IMAGE]``: render, build every stage with the guard, then tag.

Exit codes: 0 built and tagged; 1 the guard (or a smoke test) stopped the build; 2 bad input
(recipe, locks, arguments); 3 the host cannot build (no daemon, no BuildKit, no base image,
disk full). A failed build moves no tag.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from audit.engines import docker_host
from audit.engines.build_run import run_build
from audit.engines.context import render
from audit.plan import paths
from audit.plan.build import NETWORK_AUTO, BuildOptions, target_stages
from audit.plan.lock import survey_locks
from audit.plan.lockfile import base_relpath, read_base
from audit.plan.recipe import PipLayer, Recipe
from audit.plan.recipe_parse import load_recipe
from audit.plan.sources import DirectorySource
from audit.plan.trust import stale_locks_failure

DEFAULT_IMAGE = "demo"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "build",
        help="render and build an image's stages with the guard, then tag them",
        description="Render the recipe, build its stages with BuildKit and the guard after "
        "every pip and run layer, then tag them. Needs the locks (nox -s lock) and Docker; a "
        "failed build moves no tag.",
    )
    parser.add_argument(
        "image",
        nargs="?",
        default=DEFAULT_IMAGE,
        help=f"a recipe: the folder name under images/ (default: {DEFAULT_IMAGE})",
    )
    parser.add_argument(
        "--stage",
        metavar="vK",
        help="build stages v1 up to vK and tag vK only (default: every stage, each tagged)",
    )
    parser.add_argument(
        "--platform",
        metavar="OS/ARCH",
        help="build for this platform, e.g. linux/arm64 (default: the recipe's platform)",
    )
    parser.add_argument("--push", action="store_true", help="push every tag after the build")
    parser.add_argument(
        "--builder",
        metavar="NAME",
        help="hand the build to this existing buildx builder, e.g. a remote BuildKit",
    )
    docker_host.add_client_option(parser)
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
    parser.set_defaults(handler=handle)


def options_from(args: argparse.Namespace) -> BuildOptions:
    return BuildOptions(
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
    )


def check_locks(source: DirectorySource, recipe: Recipe, options: BuildOptions) -> None:
    """Before any Docker work: every lock up to the target is fresh (the ``lock --check`` rule,
    a base record of another base included), else exit 1; the guard needs the base snapshot."""
    last = target_stages(recipe, options.stage)[0]
    wanted = {s.slug for s in recipe.steps(until=last) if isinstance(s.layer, PipLayer)}
    states = [state for state in survey_locks(source, recipe).states if state.step.slug in wanted]
    failure = stale_locks_failure(recipe, states)
    if failure is not None:
        raise failure
    if options.guard:
        read_base(source, base_relpath(recipe))


def handle(args: argparse.Namespace) -> int:
    options = options_from(args)
    root = paths.find_root()
    source = DirectorySource(root)
    recipe = load_recipe(source, options.image)
    check_locks(source, recipe, options)
    render(root, recipe, stage=options.stage)
    return run_build(root, recipe, options, paths.build_dir(root, recipe.name))
