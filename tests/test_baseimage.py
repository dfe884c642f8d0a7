"""Offline base images: the plan (pure) and real images from debootstrap (``--docker``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from audit.base import make as baseimage
from audit.base import offline as base_image
from audit.base.offline import BaseImageOptions
from audit.cli.main import main
from audit.docker import host as docker_host
from audit.errors import EXIT_BAD_INPUT, EnvironmentProblem, UsageError
from audit.host import process as commands

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian-security http://mirror.example/debian/
Suites: bookworm
"""


def test_mirror_from_apt_sources_both_formats(tmp_path: Path) -> None:
    assert baseimage.mirror_from_apt(DEB822) == "http://mirror.example/debian"
    one_line = "deb [arch=amd64 signed-by=/k.gpg] https://ftp.example/debian bookworm main\n"
    assert baseimage.mirror_from_apt(one_line) == "https://ftp.example/debian"
    assert baseimage.mirror_from_apt("deb https://packages.cloud.google.com/apt x main") is None
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    assert baseimage.machine_mirror(tmp_path) == "http://mirror.example/debian"
    assert baseimage.machine_mirror(tmp_path / "none") == base_image.DEFAULT_MIRROR


def test_debootstrap_and_tar_commands(tmp_path: Path) -> None:
    argv = baseimage.debootstrap_argv("bullseye", "arm64", tmp_path / "r", "http://m/debian")
    assert argv == [
        "debootstrap",
        "--variant=minbase",
        "--arch=arm64",
        "--include=python3,python3-venv,python3-pip",
        "bullseye",
        str(tmp_path / "r"),
        "http://m/debian",
    ]
    tar = baseimage.tar_argv(tmp_path / "r", tmp_path / "out.tar")
    assert tar[:3] == ["tar", "--sort=name", "--numeric-owner"]
    assert "--exclude=./proc/*" in tar
    assert tar[-3:] == ["-cf", str(tmp_path / "out.tar"), "."]


def test_dockerfile_is_from_scratch_with_venv_first_on_path() -> None:
    text = baseimage.dockerfile(BaseImageOptions(suite="bookworm", arch="arm64"))
    lines = text.splitlines()
    assert lines[:2] == ["FROM scratch", "ADD rootfs.tar /"]
    assert lines[-1] == 'CMD ["/bin/bash"]'
    assert "ENV PATH=/opt/venv/bin:" in text
    assert 'io.layer-audit.base.arch="arm64"' in text


def test_cache_location_and_default_tag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert baseimage.cache_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/layer-audit/rootfs")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert baseimage.cache_dir({}) == tmp_path / ".cache/layer-audit/rootfs"
    options = BaseImageOptions(suite="bullseye", arch="arm64")
    assert options.image_tag == "layer-audit/base:bullseye-arm64"
    assert options.platform == "linux/arm64"
    assert BaseImageOptions(tag="me/base:1").image_tag == "me/base:1"


def test_a_missing_default_tag_names_the_command_that_makes_it() -> None:
    command = "python -m audit base-image --suite bullseye --arch arm64"
    assert base_image.make_command("layer-audit/base:bullseye-arm64") == command
    assert base_image.make_command("layer-audit/base:bullseye-i386") is None
    assert base_image.make_command("python:3.11-slim") is None


def test_validate_refuses_bad_arch_and_suite() -> None:
    with pytest.raises(UsageError, match="unknown architecture"):
        base_image.validate(BaseImageOptions(arch="s390x"))
    with pytest.raises(UsageError, match="not a Debian suite"):
        base_image.validate(BaseImageOptions(suite="bookworm; rm -rf /"))


def test_cli_rejects_unknown_arch(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["base-image", "--arch", "mips"])
    assert caught.value.code == EXIT_BAD_INPUT
    assert "invalid choice" in capsys.readouterr().err


def test_emulation_problems_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(baseimage, "host_arch", lambda: "amd64")
    assert baseimage.emulation_problem("amd64", tmp_path) == ""
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert "qemu-aarch64-static is not installed" in baseimage.emulation_problem("arm64", tmp_path)
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    assert "not registered" in baseimage.emulation_problem("arm64", tmp_path)
    (tmp_path / "qemu-aarch64").write_text("disabled\n")
    assert "disabled" in baseimage.emulation_problem("arm64", tmp_path)
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu-aarch64-static\n")
    assert baseimage.emulation_problem("arm64", tmp_path) == ""


def test_missing_emulation_exits_3_with_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(commands, "find_program", lambda name, hint="": f"/usr/sbin/{name}")
    monkeypatch.setattr(baseimage, "emulation_problem", lambda arch: "qemu-aarch64 is disabled")
    with pytest.raises(EnvironmentProblem) as caught:
        baseimage.check_host(BaseImageOptions(arch="arm64"))
    assert caught.value.exit_code == 3
    assert "update-binfmts --enable qemu-aarch64" in caught.value.hint


def test_cached_tarball_is_reused_without_running_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cached = baseimage.tarball_path("bookworm", "amd64")
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"tar")

    def no_commands(args: Sequence[str | Path], **_: Any) -> None:
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr(commands, "run", no_commands)
    assert baseimage.make_rootfs_tarball(BaseImageOptions()) == cached
    with pytest.raises(AssertionError, match="debootstrap"):
        monkeypatch.setattr(baseimage, "check_host", lambda options: None)
        baseimage.make_rootfs_tarball(BaseImageOptions(rebuild=True))
    assert cached.read_bytes() == b"tar"  # a failed rebuild leaves the cache as it was
    assert [p.name for p in cached.parent.iterdir()] == [cached.name]


# ----------------------------------------------------------------------------- real images

PROBE = "import platform, sys; print(platform.machine(), sys.prefix, platform.python_version())"


def _probe(tag: str, arch: str) -> list[str]:
    argv = ["/opt/venv/bin/python", "-c", PROBE]
    return docker_host.run_in_image(tag, argv, platform=f"linux/{arch}").split()


@pytest.mark.docker
@pytest.mark.parametrize(("suite", "python"), [("bookworm", "3.11."), ("bullseye", "3.9.")])
def test_amd64_base_images_run_their_venv(base_image: Any, suite: str, python: str) -> None:
    machine, prefix, version = _probe(base_image(suite, "amd64"), "amd64")
    assert (machine, prefix) == ("x86_64", "/opt/venv")
    assert version.startswith(python)


@pytest.mark.docker
@pytest.mark.emulation
def test_arm64_base_image_runs_under_emulation(base_image: Any) -> None:
    tag = base_image("bookworm", "arm64")
    assert docker_host.image_info(tag).architecture == "arm64"
    assert _probe(tag, "arm64")[:2] == ["aarch64", "/opt/venv"]


@pytest.mark.docker
def test_cli_builds_a_tag_from_the_cached_root_fs(
    base_image: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    base_image()  # makes sure the rootfs tarball is cached
    tag = f"{os.environ.get('AUDIT_TEST_REPOSITORY', 'layer-audit-test')}/base:cli"
    try:
        assert main(["base-image", "--tag", tag]) == 0
        assert f"{tag}  sha256:" in capsys.readouterr().out
        assert docker_host.image_info(tag).labels["io.layer-audit.base.venv"] == "/opt/venv"
    finally:
        docker_host.remove_image(tag)
    assert not docker_host.image_exists(tag)
