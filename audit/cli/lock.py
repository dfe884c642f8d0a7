"""``layer-audit lock IMAGE``: the command line of :func:`audit.lock.workflow.run_lock`.

One parser, two uses: the command table (:mod:`audit.cli.main`) adds it to the full command
line, and :func:`audit.cli.lock_quick.quick_exit` parses with the same :func:`add_arguments`
before anything heavy is imported, to answer a ``lock`` on unchanged inputs from its
verified-fresh stamp. This module imports only argparse at the top: the workflow comes in with
:func:`handle`.
"""

from __future__ import annotations

import argparse

from audit.cli.options import (
    JSON,
    OLD_TEXT,
    TERMINAL,
    add_client_option,
    add_report_arguments,
)

TYPE_CHECKING = False  # typing costs import time the quick path exists to avoid
if TYPE_CHECKING:
    from typing import Any

    from audit.cli.context import RunContext
    from audit.lock.workflow import LockOptions

FORMATS = (TERMINAL, JSON)
HELP = "compile one hermetic lock per pip layer (only the stale ones)"
DESCRIPTION = (
    "Record the base image's snapshot (locks/IMAGE/base.json) when missing, then compile a "
    "hash-pinned lock for every stale pip layer, against everything installed before it, and "
    "judge every lock, fresh or new, under today's policy and waivers. Needs Docker for the "
    "pip-tools resolver, except for --check."
)


class _Recording(argparse.Action):
    """Stores the value and marks the run as recording the base (``record_base``)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.record_base = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every argument of ``lock`` (the full command line and the quick path share them)."""
    add = parser.add_argument
    add("image", help="a recipe: the folder name under images/")
    add("--stage", metavar="vK", help="lock the pip layers of stages v1 up to vK only")
    add(
        "--check",
        action="store_true",
        help="compile nothing; exit 1 when a lock is stale or missing, or fails the policy",
    )
    add(
        "--record-base",
        action="store_true",
        help="snapshot the base image again and rewrite locks/IMAGE/base.json",
    )
    add(
        "--host",
        action="store_true",
        help="compile with this machine's Python instead of inside the base image (only when "
        "its platform and Python version match the base)",
    )
    add(
        "--build-on-host",
        metavar="NAME",
        action="append",
        default=[],
        help="allow this package's source distribution to be built on this machine (its build "
        "code runs here) when no wheel fits the target; without it, uv and --host take wheels "
        "only and refuse such a package by name; repeatable",
    )
    add(
        "--upgrade",
        action="store_true",
        help="move every layer's own pins to the newest versions allowed (what the base and "
        "earlier layers installed stays given); the summary says what moved",
    )
    add(
        "--upgrade-package",
        metavar="NAME[==VERSION]",
        action="append",
        default=[],
        help="move this package (to VERSION, or the newest allowed) wherever it is pinned or "
        "installed, and nothing else; repeatable",
    )
    add(
        "--resolver",
        choices=("pip-tools", "uv"),
        help="accepted only when it is image.toml's [image] resolver (a lock records its "
        'resolver): to switch, set resolver = "uv" there',
    )
    add_report_arguments(
        parser,
        FORMATS,
        what="the summary (json: one document: what is stale, what was written, what moved, "
        "findings)",
        old_names=OLD_TEXT,
    )
    add_client_option(parser)
    add(
        "--from-snapshot",
        action=_Recording,
        metavar="FILE",
        help="record base.json (implies --record-base) from the snapshot script's output taken "
        "on the machine that has the image (see the README); needs no image here",
    )
    add(
        "--image-id",
        action=_Recording,
        metavar="sha256:…",
        help="with --from-snapshot: the image's id",
    )
    add(
        "--repo-digest",
        action=_Recording,
        metavar="[REPO@]sha256:…",
        help="with --from-snapshot: the image's repository digest (default: base_digest)",
    )


def options_from(args: argparse.Namespace) -> LockOptions:
    """The typed options of a parsed command line (nothing below cli/ sees the Namespace)."""
    from pathlib import Path

    from audit.base.record import BaseOptions, SnapshotFile
    from audit.cli.output import command_reports
    from audit.lock.host_builds import HostBuilds
    from audit.lock.plan import Upgrade, parse_upgrade_package
    from audit.lock.workflow import LockOptions

    output = command_reports(args, FORMATS, file_formats=(JSON,))

    snapshot = None
    if args.from_snapshot is not None:
        snapshot = SnapshotFile(Path(args.from_snapshot), args.image_id, args.repo_digest)
    identity = snapshot is None and bool(args.image_id or args.repo_digest)
    base = BaseOptions(args.check, bool(args.record_base), snapshot, identity)
    packages = dict(parse_upgrade_package(text) for text in args.upgrade_package)
    return LockOptions(
        image=args.image,
        stage=args.stage,
        check=args.check,
        host=args.host,
        docker=args.docker,
        resolver=args.resolver,
        upgrade=Upgrade(args.upgrade, packages),
        base=base,
        fmt=output.fmt,
        output=output.path,
        builds=HostBuilds.of(args.build_on_host),
    )


def handle(args: argparse.Namespace, context: RunContext) -> int:
    from audit.lock.workflow import run_lock

    return run_lock(context.root(), options_from(args))
