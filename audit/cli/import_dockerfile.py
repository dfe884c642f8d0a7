"""``layer-audit import DOCKERFILE``: placeholder."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("import", help="turn a Dockerfile into a recipe")
    parser.set_defaults(handler=lambda args: 0)
