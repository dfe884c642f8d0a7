"""``python -m audit build [IMAGE]``: render, build every stage with the guard, then tag.

Exit codes: 0 built and tagged; 1 the guard (or a smoke test) stopped the build; 2 bad input
(recipe, locks, arguments); 3 the host cannot build (no daemon, no BuildKit, no base image,
disk full). A failed build moves no tag.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from audit import paths
from audit.build import NETWORK_AUTO, BuildOptions, target_stages
from audit.build_run import run_build
from audit.errors import LockError
from audit.lockfile import base_relpath, lock_relpath, read_base, read_lock
from audit.recipe import PipLayer, Recipe
from audit.recipe_parse import load_recipe
from audit.render import render
from audit.sources import DirectorySource

DEFAULT_IMAGE = "demo"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "build",
        help="render and build an image's stages with the guard, then tag them",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("image", nargs="?", default=DEFAULT_IMAGE, help="default: demo")
    parser.add_argument("--stage", help="build this stage only (default: every stage)")
    parser.add_argument("--platform", help="override the recipe's platform, e.g. linux/arm64")
    parser.add_argument("--push", action="store_true", help="push every tag after the build")
    parser.add_argument("--builder", help="an existing buildx builder (remote BuildKit)")
    parser.add_argument("--docker", help="the docker client to build with (path or name)")
    parser.add_argument(
        "--network",
        default=NETWORK_AUTO,
        help="build network: auto (host when layers fetch packages), default, host, none",
    )
    parser.add_argument("--ca-bundle", type=Path, help="CA bundle for pip (a BuildKit secret)")
    parser.add_argument("--no-guard", action="store_true", help="for measuring: no guard, no tags")
    parser.add_argument("--no-cache", action="store_true", help="rebuild every layer")
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
    """Every pip layer up to the target needs its lock; the guard needs the base snapshot."""
    last = target_stages(recipe, options.stage)[0]
    for step in recipe.steps(until=last):
        if isinstance(step.layer, PipLayer) and not source.exists(lock_relpath(recipe, step)):
            raise LockError(
                f"{lock_relpath(recipe, step)}: missing (the lock of {step.label})",
                f"compile the locks: nox -s lock -- {recipe.name}",
            )
        if isinstance(step.layer, PipLayer):
            read_lock(source, lock_relpath(recipe, step))  # truncated or edited: exit 2 now
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
