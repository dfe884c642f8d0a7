"""Below Python in the snapshot: OS package databases read as files, CUDA-family libraries found
on disk with their SONAMEs, and which copy the dynamic loader maps for each library that needs it.

Real parts: dpkg/apk databases in the format the package managers write, shared objects compiled
with gcc (real DT_SONAME, DT_NEEDED, DT_RUNPATH, DT_RPATH), and this machine's ld.so cache.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from audit.history.snapshot import SCRIPT_PATH, parse_snapshot
from audit.history.system import parse_system
from audit.inimage import snapshot as script  # the in-image script, stdlib only
from tests.support.native import needs_cc, shared_object

STATUS = """\
Package: libc6
Status: install ok installed
Priority: optional
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.36-9+deb12u4
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system. Version: 99 (a continuation line that looks like a field)

Package: libnccl2
Status: install ok installed
Architecture: amd64
Source: nccl (2.29.7-1)
Version: 2.29.7-1+cuda13.0
Description: NVIDIA Collective Communication Library (NCCL) Runtime

Package: old-tool
Status: deinstall ok config-files
Architecture: all
Version: 1.0

Package: libc6
Status: install ok installed
Architecture: i386
Source: glibc
Version: 2.36-9+deb12u4
"""

APK = """\
C:Q1abc=
P:musl
V:1.2.4-r2
A:x86_64
o:musl
T:the musl c library

P:busybox
V:1.36.1-r5
A:x86_64
o:busybox
"""


def test_dpkg_status() -> None:
    packages = script.dpkg_packages(STATUS)
    assert [(p["name"], p["architecture"]) for p in packages] == [
        ("libc6", "amd64"),
        ("libnccl2", "amd64"),
        ("libc6", "i386"),
    ]
    nccl = packages[1]
    assert nccl == {
        "name": "libnccl2",
        "version": "2.29.7-1+cuda13.0",
        "architecture": "amd64",
        "source": "nccl",
    }
    assert packages[0]["version"] == "2.36-9+deb12u4"  # not the continuation line's "99"


def test_apk_installed() -> None:
    assert script.apk_packages(APK) == [
        {"name": "musl", "version": "1.2.4-r2", "architecture": "x86_64", "source": "musl"},
        {"name": "busybox", "version": "1.36.1-r5", "architecture": "x86_64", "source": "busybox"},
    ]


def test_databases_under_a_root(tmp_path: Path) -> None:
    root = str(tmp_path) + "/"
    assert script.os_packages(root)["manager"] == ""
    (tmp_path / "var/lib/rpm").mkdir(parents=True)
    (tmp_path / "var/lib/rpm/rpmdb.sqlite").write_bytes(b"SQLite format 3\0")
    rpm = script.os_packages(root)
    assert rpm["manager"] == "rpm" and rpm["packages"] == []
    assert "not read" in str(rpm["note"])
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text(STATUS)
    found = script.os_packages(root)
    assert found["manager"] == "dpkg"
    names = [p["name"] for p in found["packages"]]  # type: ignore[attr-defined]
    assert names == ["libc6", "libc6", "libnccl2"]  # sorted by name, architecture


def test_this_machine_as_parsed_by_the_core() -> None:
    """The script's output on this machine loads through the core reader (the schema holds)."""
    document = script.seal(script.snapshot(list(sys.path), str(SCRIPT_PATH.parent)))
    env = parse_snapshot(document, "this machine")[0]
    assert env.system is not None
    if os.path.exists("/var/lib/dpkg/status"):
        assert env.system.manager == "dpkg"
        assert any(p.name == "libc6" for p in env.system.packages)
    keyed = env.system.keyed()
    assert all(key.startswith(("deb:", "apk:", "os:", "rpm:")) for key in keyed)


def test_no_system_flag() -> None:
    document = script.seal(script.snapshot(list(sys.path), str(SCRIPT_PATH.parent), False))
    assert parse_snapshot(document, "this machine")[0].system is None


def test_old_snapshots_still_load() -> None:
    """A base recorded before ``system`` existed (the demo's, as committed then) reads as "not
    recorded"."""
    old = Path(__file__).parent / "data" / "snapshots" / "base-before-system.json"
    data = json.dumps(json.loads(old.read_text())["snapshot"]).encode()
    assert all(env.system is None for env in parse_snapshot(data, str(old)))


@needs_cc
def test_elf_dynamic_section(tmp_path: Path) -> None:
    nccl = shared_object(tmp_path / "libnccl.so.2.29.7", "libnccl.so.2")
    user = shared_object(tmp_path / "libuser.so", None, needs=[nccl], runpath="$ORIGIN/x")
    old = shared_object(tmp_path / "libold.so", None, needs=[nccl], runpath="/a", old_rpath=True)
    assert script.elf_dynamic(str(nccl)) == {
        "soname": "libnccl.so.2",
        "needed": ["libc.so.6"],
        "rpath": "",
        "runpath": "",
    }
    assert script.elf_dynamic(str(user))["runpath"] == "$ORIGIN/x"  # type: ignore[index]
    assert "libnccl.so.2" in script.elf_dynamic(str(user))["needed"]  # type: ignore[index,operator]
    assert script.elf_dynamic(str(old))["rpath"] == "/a"  # type: ignore[index]
    (tmp_path / "notelf.so").write_bytes(b"\x7fELF" + b"\0" * 10)
    assert script.elf_dynamic(str(tmp_path / "notelf.so")) is None
    assert script.elf_dynamic(str(tmp_path / "missing.so")) is None


def test_library_version_from_the_file_name() -> None:
    assert script.library_version("/usr/lib/libnccl.so.2.29.7", "libnccl.so.2") == "2.29.7"
    assert script.library_version("/w/nvidia/nccl/lib/libnccl.so.2", "libnccl.so.2") == ""
    assert script.library_version("/usr/lib/libcudnn.so.9.1.0", "libcudnn.so.9") == "9.1.0"


def test_ld_cache_of_this_machine() -> None:
    cache = script.ld_cache("/")
    if not os.path.exists("/etc/ld.so.cache"):
        pytest.skip("no ld.so cache here")
    libc = [path for soname, paths in cache.items() if soname == "libc.so.6" for path in paths]
    assert libc and all(os.path.exists(path) for path in libc)


def _site(tmp_path: Path) -> tuple[Path, Path]:
    """A site-packages with an ``nvidia-nccl-cu13 2.30.7`` wheel's library and a package library
    that needs it through RUNPATH (the way torch's libraries find the wheel's NCCL)."""
    site = tmp_path / "site-packages"
    wheel_lib = shared_object(site / "nvidia/nccl/lib/libnccl.so.2", "libnccl.so.2")
    info = site / "nvidia_nccl_cu13-2.30.7.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-nccl-cu13\n"
                                   "Version: 2.30.7\n\n")  # fmt: skip
    (info / "RECORD").write_text("nvidia/nccl/lib/libnccl.so.2,sha256=x,1\n"
                                 f"{info.name}/RECORD,,\n")  # fmt: skip
    shared_object(site / "faketorch/lib/libfaketorch_cuda.so", "libfaketorch_cuda.so",
                  needs=[wheel_lib], runpath="$ORIGIN/../../nvidia/nccl/lib")  # fmt: skip
    return site, wheel_lib


def _native(site: Path, environ: dict[str, str]) -> list[dict[str, object]]:
    pairs = script.described([str(site)])
    return script.native_libraries(pairs, "/", environ, ("libnccl",))


@needs_cc
def test_the_wheel_copy_is_loaded_through_runpath(tmp_path: Path) -> None:
    site, wheel_lib = _site(tmp_path)
    (library,) = _native(site, {})
    assert library["soname"] == "libnccl.so.2"
    copies = library["copies"]
    assert copies == [
        {"path": str(wheel_lib), "origin": "wheel", "owner": "nvidia-nccl-cu13 2.30.7",
         "soname": "libnccl.so.2", "version": ""}
    ]  # fmt: skip
    loader = str(site / "faketorch/lib/libfaketorch_cuda.so")
    assert library["loads"] == [{"by": loader, "path": str(wheel_lib)}]


@needs_cc
def test_ld_library_path_shadows_the_wheel(tmp_path: Path) -> None:
    site, _ = _site(tmp_path)
    system = shared_object(tmp_path / "usr-local/nccl/lib/libnccl.so.2.29.7", "libnccl.so.2")
    (system.parent / "libnccl.so.2").symlink_to(system.name)
    (library,) = _native(site, {"LD_LIBRARY_PATH": str(system.parent)})
    assert [c["origin"] for c in library["copies"]] == ["wheel", "LD_LIBRARY_PATH"]  # type: ignore[attr-defined]
    assert library["copies"][1]["version"] == "2.29.7"  # type: ignore[index]
    assert library["loads"][0]["path"] == str(system)  # type: ignore[index]
    parsed = parse_system({"os": {"manager": "", "distro": "", "note": "", "packages": []},
                           "native": [library]}, "system")  # fmt: skip
    assert parsed.native[0].copy_at(str(system)) is not None


@needs_cc
def test_old_rpath_comes_before_ld_library_path(tmp_path: Path) -> None:
    """DT_RPATH (without DT_RUNPATH) is searched before LD_LIBRARY_PATH: the wheel wins."""
    site, wheel_lib = _site(tmp_path)
    shared_object(site / "faketorch/lib/libfaketorch_cuda.so", "libfaketorch_cuda.so",
                  needs=[wheel_lib], runpath="$ORIGIN/../../nvidia/nccl/lib",
                  old_rpath=True)  # fmt: skip
    system = shared_object(tmp_path / "other/libnccl.so.2", "libnccl.so.2")
    (library,) = _native(site, {"LD_LIBRARY_PATH": str(system.parent)})
    assert library["loads"][0]["path"] == str(wheel_lib)  # type: ignore[index]


@needs_cc
def test_without_a_package_library_a_dlopen_by_name_is_resolved(tmp_path: Path) -> None:
    site, _ = _site(tmp_path)
    (site / "faketorch/lib/libfaketorch_cuda.so").unlink()
    (library,) = _native(site, {})
    assert library["loads"] == [{"by": "dlopen libnccl.so.2", "path": ""}]


def test_this_machine_matches_the_published_schema() -> None:
    from importlib.resources import files

    from jsonschema import Draft7Validator

    schema = json.loads((files("audit") / "schemas" / "snapshot.schema.json").read_text())
    document = script.seal(script.snapshot(list(sys.path), str(SCRIPT_PATH.parent)))
    Draft7Validator(schema).validate(json.loads(document))


def test_ld_so_conf_folders_with_its_includes(tmp_path: Path) -> None:
    (tmp_path / "etc/ld.so.conf.d").mkdir(parents=True)
    (tmp_path / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n/opt/lib\n")
    (tmp_path / "etc/ld.so.conf.d/cuda.conf").write_text("# CUDA\n/usr/local/cuda/lib64\n")
    (tmp_path / "etc/ld.so.conf.d/skip.txt").write_text("/not/read\n")
    assert script.ld_so_conf_dirs(str(tmp_path) + "/") == ["/opt/lib", "/usr/local/cuda/lib64"]


@needs_cc
def test_a_library_at_the_site_root_is_a_loader(tmp_path: Path) -> None:
    """Extensions installed straight into site-packages (flash_attn_2_cuda.*.so) count too."""
    site, wheel_lib = _site(tmp_path)
    (site / "faketorch/lib/libfaketorch_cuda.so").unlink()
    shared_object(site / "flash_ext.so", None, needs=[wheel_lib], runpath="$ORIGIN/nvidia/nccl/lib")
    (library,) = _native(site, {})
    assert library["loads"] == [{"by": str(site / "flash_ext.so"), "path": str(wheel_lib)}]


@needs_cc
def test_a_recipe_names_more_libraries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--libraries=libmooncake`` records that family too (the guard passes the recipe's)."""
    library = shared_object(tmp_path / "lib/libmooncake.so.1.2.0", "libmooncake.so.1")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(library.parent))
    output = tmp_path / "snapshot.json"
    assert script.main(["--libraries=libmooncake", "--output", str(output)]) == 0
    (env,) = parse_snapshot(output.read_bytes(), str(output))
    assert env.system is not None
    (found,) = [lib for lib in env.system.native if lib.soname == "libmooncake.so.1"]
    assert [(c.path, c.origin, c.version) for c in found.copies] == [
        (str(library), "LD_LIBRARY_PATH", "1.2.0")
    ]
    assert script.main(["--output", str(output)]) == 0
    (env,) = parse_snapshot(output.read_bytes(), str(output))
    assert env.system is not None
    assert all(lib.soname != "libmooncake.so.1" for lib in env.system.native)


def test_record_digests_are_the_sha256_recorded_before() -> None:
    """The faster hash gives the digests older snapshots hold: no phantom ``rebuilt``."""
    import hashlib

    data = Path("locks/demo/base.json").read_bytes()
    assert script.sha256_digest(data) == "sha256:" + hashlib.sha256(data).hexdigest()
