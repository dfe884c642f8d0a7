"""``python -m audit base-image``: make an offline Python base image from Debian packages."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from audit.base import make as baseimage
from audit.base import offline as base_image
from audit.base import replica
from audit.cli.context import RunContext
from audit.cli.options import add_client_option
from audit.errors import EXIT_OK, UsageError
from audit.host import console

HELP = "make an offline Debian base image with python3 and a venv at /opt/venv"
DESCRIPTION = (
    "Make an offline Python base image from Debian packages with debootstrap (as root; no "
    "registry needed): python3 plus a virtual environment at /opt/venv."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--suite",
        default=base_image.DEFAULT_SUITE,
        help=f"Debian suite (default: {base_image.DEFAULT_SUITE})",
    )
    parser.add_argument(
        "--arch",
        default=base_image.DEFAULT_ARCH,
        choices=sorted(base_image.ARCHES),
        help=f"architecture; a foreign one runs under qemu (default: {base_image.DEFAULT_ARCH})",
    )
    parser.add_argument(
        "--tag", default="", help="image tag (default: layer-audit/base:SUITE-ARCH)"
    )
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help="run debootstrap again instead of using the cached root file system",
    )
    parser.add_argument(
        "--mirror", default="", help="Debian mirror URL (default: the one this machine's apt uses)"
    )
    parser.add_argument(
        "--replica",
        type=Path,
        metavar="FILE",
        help="make a replica of a base you cannot pull: FILE is a pip freeze of the real image "
        "(or a requirements file resolved for its platform); each pinned distribution gets its "
        "real published METADATA from the index, no payload (then: lock IMAGE --record-base)",
    )
    parser.add_argument(
        "--index-url",
        default=replica.DEFAULT_INDEX,
        help=f"with --replica: the index to read metadata from (default: {replica.DEFAULT_INDEX})",
    )
    parser.add_argument(
        "--metadata-from",
        type=Path,
        metavar="SNAPSHOT",
        help="with --replica: a snapshot file of the real image; its requirements stand in for "
        "distributions the index does not carry (vendor builds, +cu130 local versions)",
    )
    add_client_option(parser)


@dataclass(frozen=True)
class BaseImageCommandOptions:
    """The command line, parsed and checked once (an unknown arch or suite: exit 2)."""

    make: base_image.BaseImageOptions

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BaseImageCommandOptions:
        make = base_image.BaseImageOptions(
            suite=args.suite,
            arch=args.arch,
            tag=args.tag,
            rebuild=args.rebuild,
            mirror=args.mirror,
            docker=args.docker,
        )
        return cls(base_image.validate(make))


def handle(args: argparse.Namespace, context: RunContext) -> int:
    options = BaseImageCommandOptions.from_args(args)
    if args.replica is not None:
        return _replica(args, options.make)
    if args.metadata_from is not None:
        raise UsageError("--metadata-from goes with --replica FILE")
    made = baseimage.build_base_image(options.make)
    console.stdout.print(
        f"{escape(made.tag)}  {made.image_id[:19]}  python {made.python} ({made.machine})"
        f"  {made.seconds:.1f}s"
    )
    return EXIT_OK


def _replica(args: argparse.Namespace, make: base_image.BaseImageOptions) -> int:
    """``--replica FILE``: the offline base for the suite and arch, plus metadata-only
    stand-ins of FILE's pins (see :mod:`audit.base.replica`)."""
    options = replica.ReplicaOptions(
        pins_file=args.replica,
        suite=make.suite,
        arch=make.arch,
        tag=make.tag,
        index_url=args.index_url,
        metadata_from=args.metadata_from,
        docker=make.docker,
        cache=replica.metadata_cache(),
    )
    made = replica.build_replica(options)
    replica.report(made)
    console.stderr.print(
        f'next: a recipe with base = "{escape(made.tag)}" and platform = '
        f'"linux/{make.arch}", then nox -s lock -- IMAGE --record-base (records '
        '"source": "replica"); builds on it are dry builds'
    )
    return EXIT_OK
