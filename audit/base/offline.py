"""What an offline base image is: options, names and checks (pure; the maker is
:mod:`audit.base.make`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from audit.errors import UsageError

DEFAULT_SUITE = "bookworm"
DEFAULT_ARCH = "amd64"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "python3-venv", "python3-pip")
VENV = "/opt/venv"
# Debian architecture -> (machine name the kernel reports, qemu-user binary suffix)
ARCHES = {"amd64": ("x86_64", "x86_64"), "arm64": ("aarch64", "aarch64")}
LABEL_PREFIX = "io.layer-audit.base"
EMULATION_HINT = (
    "apt-get install -y qemu-user-static binfmt-support; "
    "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; "
    "update-binfmts --enable qemu-{qemu}"
)
DEBOOTSTRAP_HINT = "apt-get install -y debootstrap (and run as root)"


@dataclass(frozen=True)
class BaseImageOptions:
    """What to make: Debian suite, architecture, image tag, mirror; ``rebuild`` skips caches."""

    suite: str = DEFAULT_SUITE
    arch: str = DEFAULT_ARCH
    tag: str = ""
    rebuild: bool = False
    mirror: str = ""
    docker: str | None = None

    @property
    def image_tag(self) -> str:
        return self.tag or default_tag(self.suite, self.arch)

    @property
    def platform(self) -> str:
        return f"linux/{self.arch}"


@dataclass(frozen=True)
class BaseImage:
    """A made image: its tag and id, and what its venv interpreter reported."""

    tag: str
    image_id: str
    python: str
    machine: str
    seconds: float


# repository[:tag], as docker accepts it (lower-case path components, optional registry host)
TAG_REFERENCE = re.compile(
    r"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
)


SUITE_NAME = r"[a-z][a-z0-9-]*"
DEFAULT_TAG = re.compile(rf"layer-audit/base:(?P<suite>{SUITE_NAME})-(?P<arch>{'|'.join(ARCHES)})")


def default_tag(suite: str, arch: str) -> str:
    return f"layer-audit/base:{suite}-{arch}"


def make_command(ref: str) -> str | None:
    """The ``base-image`` command that makes ``ref`` when it is a default tag, else None."""
    match = DEFAULT_TAG.fullmatch(ref)
    if match is None:
        return None
    return f"python -m audit base-image --suite {match['suite']} --arch {match['arch']}"


def validate(options: BaseImageOptions) -> BaseImageOptions:
    """Refuse an unknown architecture or a suite name that could not be a Debian codename."""
    if options.arch not in ARCHES:
        known = ", ".join(sorted(ARCHES))
        raise UsageError(f"--arch {options.arch}: unknown architecture", f"use one of: {known}")
    if not re.fullmatch(SUITE_NAME, options.suite):
        raise UsageError(f"--suite {options.suite!r}: not a Debian suite name", "e.g. bookworm")
    if options.tag and not TAG_REFERENCE.fullmatch(options.tag):
        raise UsageError(
            f"--tag {options.tag!r}: not an image reference",
            "lower-case repository and a tag, e.g. layer-audit/base:bookworm-amd64",
        )
    return options
