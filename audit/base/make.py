"""Offline Python base images made from Debian packages (no registry needed).

``debootstrap --variant=minbase`` writes a Debian root file system with python3, venv and pip
(a foreign architecture runs under qemu-user-static through binfmt_misc); a virtual
environment is made at ``/opt/venv`` inside it (chroot); the tree is tarred (sorted, numeric
owners) into a per-user cache, and a ``FROM scratch`` / ``ADD rootfs.tar /`` build (plus
``PATH``, labels and ``CMD``) through the BuildKit client turns it into
``layer-audit/base:<suite>-<arch>``.
``docker import`` is not used: on Docker 20.10 it ignores ``--platform``.

The tarball is cached under ``$XDG_CACHE_HOME/layer-audit/rootfs/<suite>-<arch>.tar``, so
only the first run pays for debootstrap; ``rebuild`` ignores the cache.
"""

from __future__ import annotations

import contextlib
import os
import platform as host_platform
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from audit.base.offline import (
    ARCHES,
    DEBOOTSTRAP_HINT,
    DEFAULT_ARCH,
    DEFAULT_MIRROR,
    DEFAULT_SUITE,
    EMULATION_HINT,
    LABEL_PREFIX,
    PACKAGES,
    VENV,
    BaseImage,
    BaseImageOptions,
    validate,
)
from audit.build.plan import build_command
from audit.docker import host as docker_host
from audit.errors import EnvironmentProblem
from audit.host import atomic, console
from audit.host import process as commands

# ----------------------------------------------------------------------------- plan (pure)


def cache_dir(env: dict[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/layer-audit/rootfs`` (``~/.cache`` when unset)."""
    environ = os.environ if env is None else env
    root = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "layer-audit" / "rootfs"


def tarball_path(suite: str, arch: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"{suite}-{arch}.tar"


def mirror_from_apt(text: str) -> str | None:
    """The first Debian archive URI (not the security one) in sources.list or deb822 text."""
    one_line: list[str] = re.findall(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)", text, re.MULTILINE)
    deb822: list[str] = re.findall(r"^URIs:(.*)$", text, re.MULTILINE)
    uris = one_line + [uri for line in deb822 for uri in line.split()]
    for uri in uris:
        if uri.rstrip("/").endswith("/debian"):
            return uri.rstrip("/")
    return None


def machine_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt uses, so debootstrap reaches what apt reaches."""
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for path in files:
        with contextlib.suppress(OSError):
            if found := mirror_from_apt(path.read_text(errors="replace")):
                return found
    return DEFAULT_MIRROR


def debootstrap_argv(suite: str, arch: str, target: Path, mirror: str) -> list[str]:
    return [
        "debootstrap",
        "--variant=minbase",
        f"--arch={arch}",
        f"--include={','.join(PACKAGES)}",
        suite,
        str(target),
        mirror,
    ]


def tar_argv(rootfs: Path, dest: Path) -> list[str]:
    """GNU tar, sorted and with numeric owners; the kernel's file systems stay empty dirs."""
    excludes = [f"--exclude=./{d}/*" for d in ("proc", "sys", "dev", "run", "tmp")]
    return [
        "tar",
        "--sort=name",
        "--numeric-owner",
        "-C",
        str(rootfs),
        *excludes,
        "-cf",
        str(dest),
        ".",
    ]


def dockerfile(options: BaseImageOptions, python: str = "") -> str:
    labels = {
        f"{LABEL_PREFIX}.suite": options.suite,
        f"{LABEL_PREFIX}.arch": options.arch,
        f"{LABEL_PREFIX}.venv": VENV,
    }
    label_line = " ".join(f'{key}="{value}"' for key, value in labels.items())
    return (
        "FROM scratch\n"
        "ADD rootfs.tar /\n"
        f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        f"LABEL {label_line}\n"
        'CMD ["/bin/bash"]\n'
    )


def host_arch() -> str:
    machine = host_platform.machine()
    return next((arch for arch, (name, _) in ARCHES.items() if name == machine), machine)


# ----------------------------------------------------------------------------- checks


def emulation_problem(arch: str, binfmt_dir: Path = Path("/proc/sys/fs/binfmt_misc")) -> str:
    """Why ``arch`` binaries cannot run on this machine ("" when they can)."""
    if arch == host_arch():
        return ""
    qemu = ARCHES[arch][1]
    entry = binfmt_dir / f"qemu-{qemu}"
    if not shutil.which(f"qemu-{qemu}-static"):
        return f"qemu-{qemu}-static is not installed"
    try:
        state = entry.read_text()
    except OSError:
        return f"{entry} is not registered (binfmt_misc not mounted or qemu-{qemu} not enabled)"
    return "" if state.startswith("enabled") else f"{entry} is disabled"


def check_host(options: BaseImageOptions) -> None:
    """Root, debootstrap and (for a foreign architecture) emulation; exit 3 with the fix."""
    if os.geteuid() != 0:
        raise EnvironmentProblem("debootstrap and chroot need root", "run as root (or sudo)")
    commands.find_program("debootstrap", DEBOOTSTRAP_HINT)
    if problem := emulation_problem(options.arch):
        qemu = ARCHES[options.arch][1]
        raise EnvironmentProblem(
            f"cannot run {options.arch} binaries here: {problem}", EMULATION_HINT.format(qemu=qemu)
        )


# ----------------------------------------------------------------------------- the root fs


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    points = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


def _remove_tree(path: Path) -> None:
    """Remove a work tree, unmounting what debootstrap left first: never delete through a mount."""
    for point in _mounts_under(path):
        commands.run(["umount", "--lazy", point], check=False)
    if leftover := _mounts_under(path):
        console.stderr.print(f"[yellow]left {path} in place: still mounted: {leftover}[/]")
        return
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _work_dir(parent: Path) -> Iterator[Path]:
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".work-", dir=parent))
    try:
        yield work
    finally:
        _remove_tree(work)


def _populate(rootfs: Path, options: BaseImageOptions, mirror: str) -> None:
    hint = DEBOOTSTRAP_HINT + f"; check that {mirror} is reachable"
    pace = "about 45 s" if options.arch == host_arch() else "minutes: emulated"
    console.stderr.print(f"debootstrap {options.suite} {options.arch} from {mirror} ({pace})")
    commands.run(debootstrap_argv(options.suite, options.arch, rootfs, mirror), hint=hint)
    commands.run(["chroot", str(rootfs), "/usr/bin/python3", "-m", "venv", VENV])
    for leftovers in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for item in (rootfs / leftovers).glob("*"):
            if item.is_file() and item.name != "lock":
                item.unlink()


def make_rootfs_tarball(options: BaseImageOptions) -> Path:
    """The cached rootfs tarball for the suite and arch, made when missing or on ``rebuild``."""
    target = tarball_path(options.suite, options.arch)
    if target.is_file() and not options.rebuild:
        console.stderr.print(f"reusing cached root file system {target}")
        return target
    check_host(options)
    mirror = options.mirror or machine_mirror()
    with _work_dir(target.parent) as work:
        rootfs = work / "rootfs"
        _populate(rootfs, options, mirror)
        partial = work / target.name
        commands.run(tar_argv(rootfs, partial))
        partial.replace(target)  # same file system: the cache never holds half a tarball
    return target


# ----------------------------------------------------------------------------- the image


def _build_image(options: BaseImageOptions, tarball: Path) -> None:
    client = docker_host.detect_client(options.docker)
    with _work_dir(tarball.parent) as context:
        try:
            os.link(tarball, context / "rootfs.tar")  # no 300 MB copy on the same file system
        except OSError:
            shutil.copyfile(tarball, context / "rootfs.tar")
        atomic.write_text(context / "Dockerfile", dockerfile(options))
        argv = [*build_command(client), "--platform", options.platform]
        argv += ["--tag", options.image_tag, str(context)]
        commands.run(argv, env=docker_host.client_env(client), capture=True)


def _probe_python(options: BaseImageOptions) -> tuple[str, str]:
    code = "import platform; print(platform.python_version(), platform.machine())"
    out = docker_host.run_in_image(
        options.image_tag, [f"{VENV}/bin/python", "-c", code], platform=options.platform
    )
    version, machine = out.split()
    return version, machine


def build_base_image(options: BaseImageOptions) -> BaseImage:
    """Make (or, unless ``rebuild``, reuse) the rootfs tarball and build the image from it."""
    validate(options)
    started = time.monotonic()
    docker_host.daemon()  # fail before minutes of debootstrap when no daemon answers
    with atomic.exclusive(cache_dir() / f"{options.suite}-{options.arch}.lock", timeout=1800):
        tarball = make_rootfs_tarball(options)
        _build_image(options, tarball)
    python, machine = _probe_python(options)
    info = docker_host.image_info(options.image_tag)
    return BaseImage(options.image_tag, info.id, python, machine, time.monotonic() - started)


def ensure_base_image(suite: str = DEFAULT_SUITE, arch: str = DEFAULT_ARCH) -> str:
    """The tag of the default base image for suite and arch, built only when missing."""
    options = validate(BaseImageOptions(suite=suite, arch=arch))
    if not docker_host.image_exists(options.image_tag):
        build_base_image(options)
    return options.image_tag
