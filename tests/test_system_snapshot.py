"""Below Python in the snapshot: OS package databases read as files, CUDA-family libraries found
on disk with their SONAMEs, and the loader facts from which the host's model says which copy
loads (the script resolves nothing itself).

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
from audit.history.system import System, parse_system
from audit.inimage import snapshot as script  # the in-image script, stdlib only
from audit.native.bridge import resolve_system
from audit.native.catalog import NAME_PREFIXES, family_of
from audit.policy.model import Policy
from audit.policy.system_rules import native_findings
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


def test_the_families_are_the_catalogs() -> None:
    """The script cannot import the catalog: its copy of the names must not drift."""
    names = ["libcudnn_graph.so.9", "libcublasLt.so.13", "libnvJitLink.so.13", "libnccl.so.2",
             "libcusparseLt.so.0", "libnvrtc-builtins.so.13.0", "libnvshmem_host.so.3",
             "nvshmem_transport_ibrc.so.3", "libcufile_rdma.so.1", "libc.so.6",
             "libtorch.so"]  # fmt: skip
    assert script.NATIVE_FAMILIES == NAME_PREFIXES
    for name in names:
        assert script._family(name, script.NATIVE_FAMILIES) == (family_of(name) is not None), name


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


def _system(site: Path, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> System:
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    facts = script.system_facts(script.described([str(site)]), "/", ("libnccl",))
    return parse_system(json.loads(script.canonical_json(facts)), "system")


def _loads(system: System) -> set[tuple[str, str, str]]:
    """(requester, path, reason) of every load of libnccl.so.2 the host's model resolves."""
    (library,) = resolve_system(system).libraries
    return {(load.requirer, load.path, load.reason) for load in library.loads}


@needs_cc
def test_the_wheel_copy_is_loaded_through_runpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, wheel_lib = _site(tmp_path)
    system = _system(site, {}, monkeypatch)
    (library,) = system.native
    assert library.soname == "libnccl.so.2" and library.loads == ()  # the model's answer
    (copy,) = library.copies
    assert (copy.path, copy.origin, copy.owner, copy.version) == (
        str(wheel_lib), "wheel", "nvidia-nccl-cu13 2.30.7", "")  # fmt: skip
    loader = str(site / "faketorch/lib/libfaketorch_cuda.so")
    assert _loads(system) == {(loader, str(wheel_lib), "runpath")}
    files = json.loads(system.loader)["view"]["files"]
    assert {str(wheel_lib), loader} <= set(files)


@needs_cc
def test_ld_library_path_shadows_the_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site, _ = _site(tmp_path)
    system_lib = shared_object(tmp_path / "usr-local/nccl/lib/libnccl.so.2.29.7", "libnccl.so.2")
    (system_lib.parent / "libnccl.so.2").symlink_to(system_lib.name)
    system = _system(site, {"LD_LIBRARY_PATH": str(system_lib.parent)}, monkeypatch)
    (library,) = system.native
    assert [c.origin for c in library.copies] == ["wheel", "LD_LIBRARY_PATH"]
    assert library.copies[1].version == "2.29.7"
    loader = str(site / "faketorch/lib/libfaketorch_cuda.so")
    assert _loads(system) == {(loader, str(system_lib), "ld_library_path")}
    (finding,) = native_findings(system, Policy(), "here")
    assert (finding.package, finding.after) == ("nvidia-nccl-cu13", "2.29.7")
    assert f"{loader} (ld_library_path {system_lib.parent}) loads {system_lib}" in finding.message


@needs_cc
def test_old_rpath_comes_before_ld_library_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DT_RPATH (without DT_RUNPATH) is searched before LD_LIBRARY_PATH: the wheel wins."""
    site, wheel_lib = _site(tmp_path)
    shared_object(site / "faketorch/lib/libfaketorch_cuda.so", "libfaketorch_cuda.so",
                  needs=[wheel_lib], runpath="$ORIGIN/../../nvidia/nccl/lib",
                  old_rpath=True)  # fmt: skip
    system_lib = shared_object(tmp_path / "other/libnccl.so.2", "libnccl.so.2")
    system = _system(site, {"LD_LIBRARY_PATH": str(system_lib.parent)}, monkeypatch)
    loader = str(site / "faketorch/lib/libfaketorch_cuda.so")
    assert _loads(system) == {(loader, str(wheel_lib), "rpath")}


@needs_cc
def test_without_a_package_library_the_wheel_copy_loads_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No library needs it: loaded by its path (as cuda-pathfinder does); by name, from the
    interpreter, nothing finds a wheel's folder."""
    site, wheel_lib = _site(tmp_path)
    (site / "faketorch/lib/libfaketorch_cuda.so").unlink()
    step = "dlopen libnccl.so.2 by path (as cuda-pathfinder does)"
    assert _loads(_system(site, {}, monkeypatch)) == {(step, str(wheel_lib), "preload")}


@needs_cc
def test_a_library_at_the_site_root_is_a_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Extensions installed straight into site-packages (flash_attn_2_cuda.*.so) count too."""
    site, wheel_lib = _site(tmp_path)
    (site / "faketorch/lib/libfaketorch_cuda.so").unlink()
    shared_object(site / "flash_ext.so", None, needs=[wheel_lib], runpath="$ORIGIN/nvidia/nccl/lib")
    loader = str(site / "flash_ext.so")
    assert _loads(_system(site, {}, monkeypatch)) == {(loader, str(wheel_lib), "runpath")}


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
