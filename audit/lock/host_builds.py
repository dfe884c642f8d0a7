"""Where ``lock`` may build a source distribution: inside the base image, never on this machine
unless the run names the package.

Building an sdist runs its code (``setup.py``, its build backend), and a resolver builds one to
read its dependencies. ``lock`` runs on the machine that locks (a CI runner, on other people's
pull requests), so the resolvers that run here (uv; pip-compile with ``--host``) take wheels
only (``--only-binary :all:``); a requirement no index has a wheel of for the target is refused
by name (:func:`refused`), with two ways on: pip-tools in the base image (it builds inside that
container, as the image's own ``pip install`` will), or ``lock --build-on-host NAME``, an
explicit, per-package opt-in for this machine (``--no-binary NAME``: that package is then taken
from its source distribution, built here).

Invariant: a package is built on this machine only when its canonical name is in
:attr:`HostBuilds.allowed`; nothing else reads or widens that set.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packaging.utils import InvalidSdistFilename, parse_sdist_filename
from packaging.version import Version

from audit.errors import LockError
from audit.history.snapshot import canonical_name

OPTION = "--build-on-host"


class SourceBuildRefused(LockError):
    """A requirement has only a source distribution, and building it here was not allowed."""


@dataclass(frozen=True)
class HostBuilds:
    """The packages whose source distributions may be built on this machine (canonical names)."""

    allowed: frozenset[str] = frozenset()

    @classmethod
    def of(cls, names: Iterable[str]) -> HostBuilds:
        """From the names given on the command line, in any spelling."""
        return cls(frozenset(canonical_name(name) for name in names))

    def resolver_args(self) -> list[str]:
        """uv's and pip's options: wheels only, but for the allowed packages (sdist, built)."""
        named = [arg for name in sorted(self.allowed) for arg in ("--no-binary", name)]
        return ["--only-binary", ":all:", *named]


WHEELS_ONLY = HostBuilds()  # the default: nothing is built on this machine


def refused(where: str, name: str, version: str, *, in_image_route: str) -> SourceBuildRefused:
    """The refusal of ``name`` (``version`` when known), with the two ways on.

    ``in_image_route`` says how to have it built inside the base image with this recipe (set
    the pip-tools resolver, or drop ``--host``).
    """
    what = f"{name} {version}" if version else name
    return SourceBuildRefused(
        f"{where}: {what} has no wheel for the target on the recipe's indexes, only a source "
        "distribution; building it runs its code, and lock runs no index's code on this "
        "machine",
        f"{in_image_route} to build it inside the base image, or, trusting its build code to "
        f"run here, pass {OPTION} {name} to lock",
    )


def newest_sdist(filenames: Iterable[str]) -> str | None:
    """The newest version among the source distributions an index lists (file names), or None
    when it lists none."""
    versions: list[Version] = []
    for filename in filenames:
        try:
            versions.append(parse_sdist_filename(filename)[1])
        except InvalidSdistFilename:
            continue  # a wheel, or a file that is not a distribution
    return str(max(versions)) if versions else None
