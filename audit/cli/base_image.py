"""``python -m audit base-image``: make an offline Python base image from Debian packages."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from rich.markup import escape

from audit.cli.options import add_client_option
from audit.core.errors import EXIT_OK
from audit.engines import baseimage, console
from audit.plan import base_image


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "base-image",
        help="make an offline Debian base image with python3 and a venv at /opt/venv",
        description="Make an offline Python base image from Debian packages with debootstrap "
        "(as root; no registry needed): python3 plus a virtual environment at /opt/venv.",
    )
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
    add_client_option(parser)
    parser.set_defaults(handler=handle)


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


def handle(args: argparse.Namespace) -> int:
    options = BaseImageCommandOptions.from_args(args)
    made = baseimage.build_base_image(options.make)
    console.stdout.print(
        f"{escape(made.tag)}  {made.image_id[:19]}  python {made.python} ({made.machine})"
        f"  {made.seconds:.1f}s"
    )
    return EXIT_OK
