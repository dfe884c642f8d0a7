"""The loader model against the real glibc loader, on ELF files gcc builds here.

Each test builds a small tree of shared objects, asks the model which files a process maps and
why, and loads the same files with ``ctypes`` in a fresh interpreter to compare with what
``/proc/self/maps`` shows (or the loader's error).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from audit.native.search import Reason
from audit.native.versions import MISSING_SYMBOL, MISSING_VERSION, version_findings
from tests.support.native_build import (
    build,
    load_in_python,
    needs_gcc,
    predict_loads,
    scene_for,
    under,
)

pytestmark = needs_gcc

NODE = "libnvJitLink.so.12"
NEW_SCRIPT = f"{NODE} {{ global: nvJitLinkCreate; __nvJitLinkComplete_12_4; local: *; }};\n"
OLD_SCRIPT = f"{NODE} {{ global: nvJitLinkCreate; local: *; }};\n"


def _nvjitlink_case(root: Path) -> tuple[Path, Path, Path]:
    """(cusparse, the wheel's newer nvJitLink, an older toolkit's nvJitLink): the cusparse of
    a wheel needs ``__nvJitLinkComplete_12_4@libnvJitLink.so.12`` and finds its nvJitLink
    through RUNPATH; the older copy defines the same version node without that symbol."""
    site = root / "site-packages/nvidia"
    new = build(site / "nvjitlink/lib/libnvJitLink.so.12", NODE, version_script=NEW_SCRIPT,
                defines=("nvJitLinkCreate", "__nvJitLinkComplete_12_4"))  # fmt: skip
    old = build(root / "cuda-12.1/lib64/libnvJitLink.so.12", NODE, version_script=OLD_SCRIPT,
                defines=("nvJitLinkCreate",))  # fmt: skip
    cusparse = build(site / "cusparse/lib/libcusparse.so.12", "libcusparse.so.12",
                     calls=("nvJitLinkCreate", "__nvJitLinkComplete_12_4"), needs=[new],
                     runpath="$ORIGIN/../../nvjitlink/lib")  # fmt: skip
    return cusparse, new, old


def test_an_older_nvjitlink_first_on_ld_library_path_is_the_finding(tmp_path: Path) -> None:
    cusparse, new, old = _nvjitlink_case(tmp_path)
    env = {"LD_LIBRARY_PATH": str(old.parent)}
    maps, error = load_in_python([cusparse], env)
    assert "undefined symbol: __nvJitLinkComplete_12_4, version libnvJitLink.so.12" in error
    scene = scene_for(tmp_path, env)
    outcome = predict_loads(scene, [cusparse])
    (finding,) = version_findings(outcome, scene.view)
    assert (finding.kind, finding.symbol, finding.version) == (
        MISSING_SYMBOL, "__nvJitLinkComplete_12_4", NODE)  # fmt: skip
    assert finding.requirer == str(cusparse)
    assert finding.loaded.path == str(old)
    assert finding.loaded.reason == Reason.LD_LIBRARY_PATH
    assert finding.satisfying == (str(new),)
    text = finding.describe()
    assert text.startswith("libcusparse.so.12: undefined symbol: __nvJitLinkComplete_12_4")
    assert f"{old} loads (ld_library_path" in text and f"{new} would satisfy it" in text
    del maps


def test_without_that_ld_library_path_runpath_finds_the_newer_copy(tmp_path: Path) -> None:
    cusparse, new, _ = _nvjitlink_case(tmp_path)
    maps, error = load_in_python([cusparse])
    assert error == ""
    scene = scene_for(tmp_path)
    outcome = predict_loads(scene, [cusparse])
    assert version_findings(outcome, scene.view) == []
    (load,) = [x for x in outcome.loads if x.soname == NODE]
    assert (load.path, load.reason, load.entry) == (str(new), Reason.RUNPATH,
                                                    "$ORIGIN/../../nvjitlink/lib")  # fmt: skip
    assert under(maps, tmp_path) == sorted(under([x.path for x in outcome.loads], tmp_path))


def test_a_missing_version_node_is_its_own_finding(tmp_path: Path) -> None:
    """A node named after the SONAME always exists (the base definition); one named otherwise
    (``NVJITLINK_12.4``) can be missing, and the loader then refuses the requirer."""
    new = build(tmp_path / "new/libjit.so.1", "libjit.so.1", defines=("create",),
                version_script="NVJITLINK_12.4 { global: create; local: *; };\n")  # fmt: skip
    old = build(tmp_path / "old/libjit.so.1", "libjit.so.1", defines=("create",),
                version_script="NVJITLINK_12.1 { global: create; local: *; };\n")  # fmt: skip
    user = build(tmp_path / "lib/libuser.so", "libuser.so", calls=("create",), needs=[new],
                 runpath=str(new.parent))  # fmt: skip
    env = {"LD_LIBRARY_PATH": str(old.parent)}
    _, error = load_in_python([user], env)
    assert "version `NVJITLINK_12.4' not found (required by" in error
    scene = scene_for(tmp_path, env)
    findings = version_findings(predict_loads(scene, [user]), scene.view)
    assert [(f.kind, f.version, f.symbol, f.satisfying) for f in findings] == [
        (MISSING_VERSION, "NVJITLINK_12.4", "", (str(new),))
    ]
    assert findings[0].describe().startswith("version `NVJITLINK_12.4' not found (required by")


def test_a_dlopened_sibling_is_found_through_the_openers_runpath(tmp_path: Path) -> None:
    """cuDNN's shim opens its sub-libraries by name: its own RUNPATH ($ORIGIN) finds them,
    unless LD_LIBRARY_PATH (searched before RUNPATH) holds another copy."""
    wheel = tmp_path / "site-packages/nvidia/cudnn/lib"
    sibling = build(wheel / "libcudnn_graph.so.9", "libcudnn_graph.so.9")
    shim = build(wheel / "libcudnn.so.9", "libcudnn.so.9", runpath="$ORIGIN",
                 opens="libcudnn_graph.so.9")  # fmt: skip
    system = build(tmp_path / "usr/lib/libcudnn_graph.so.9", "libcudnn_graph.so.9")
    for env, expected, reason in (({}, sibling, Reason.RUNPATH),
                                  ({"LD_LIBRARY_PATH": str(system.parent)}, system,
                                   Reason.LD_LIBRARY_PATH)):  # fmt: skip
        maps, error = load_in_python([shim], env, call_open=True)
        assert error == ""
        assert str(expected) in maps
        outcome = predict_loads(scene_for(tmp_path, env), [shim], "libcudnn_graph.so.9")
        (load,) = [x for x in outcome.loads if x.soname == "libcudnn_graph.so.9"]
        assert (load.path, load.reason, load.requirer) == (str(expected), reason, str(shim))


def test_a_preloaded_soname_is_reused_not_searched(tmp_path: Path) -> None:
    """torch preloads nvidia/nccl/lib/libnccl.so.2 by path; a library whose RUNPATH would find
    another copy gets the preloaded one (the name matches its SONAME)."""
    preloaded = build(tmp_path / "site-packages/nvidia/nccl/lib/libnccl.so.2", "libnccl.so.2")
    other = build(tmp_path / "vendor/lib/libnccl.so.2", "libnccl.so.2")
    user = build(tmp_path / "vendor/lib/libuser.so", "libuser.so", needs=[other],
                 runpath="$ORIGIN")  # fmt: skip
    maps, error = load_in_python([preloaded, user])
    assert error == "" and str(preloaded) in maps and str(other) not in maps
    outcome = predict_loads(scene_for(tmp_path), [preloaded, user])
    assert under([x.path for x in outcome.loads], tmp_path) == under(maps, tmp_path)
    (use,) = [u for u in outcome.uses if u.name == "libnccl.so.2" and u.requirer == str(user)]
    assert (use.path, use.reason) == (str(preloaded), Reason.ALREADY_MAPPED)
    (load,) = outcome.loaded("libnccl.so.2")
    assert load.reason == Reason.PRELOAD


def _chain(root: Path, old_rpath: bool) -> tuple[Path, Path]:
    """top (RPATH or RUNPATH = deps folder) needs middle (beside top), which needs leaf (only
    in the deps folder)."""
    leaf = build(root / "deps/libleaf.so.1", "libleaf.so.1")
    middle = build(root / "lib/libmiddle.so.1", "libmiddle.so.1", needs=[leaf])
    top = build(root / "lib/libtop.so.1", "libtop.so.1", needs=[middle],
                runpath=f"$ORIGIN:{root}/deps", old_rpath=old_rpath)  # fmt: skip
    return top, leaf


def test_dt_rpath_is_inherited_by_dependencies(tmp_path: Path) -> None:
    top, leaf = _chain(tmp_path, old_rpath=True)
    maps, error = load_in_python([top])
    assert error == "" and str(leaf) in maps
    outcome = predict_loads(scene_for(tmp_path), [top])
    (load,) = outcome.loaded("libleaf.so.1")
    assert (load.reason, load.list_of, load.requirer) == (
        Reason.RPATH, str(top), str(tmp_path / "lib/libmiddle.so.1"))  # fmt: skip
    assert under([x.path for x in outcome.loads], tmp_path) == under(maps, tmp_path)


def test_dt_runpath_is_not_inherited(tmp_path: Path) -> None:
    top, _ = _chain(tmp_path, old_rpath=False)
    maps, error = load_in_python([top])
    assert "libleaf.so.1: cannot open shared object file" in error
    outcome = predict_loads(scene_for(tmp_path), [top])
    (failure,) = outcome.failures
    assert (failure.name, failure.requirer, failure.why) == (
        "libleaf.so.1", str(tmp_path / "lib/libmiddle.so.1"), "not found")  # fmt: skip
    assert under([x.path for x in outcome.loads], tmp_path) == [] == under(maps, tmp_path)


def test_dt_rpath_comes_before_ld_library_path_runpath_after(tmp_path: Path) -> None:
    wanted = build(tmp_path / "wheel/libnccl.so.2", "libnccl.so.2")
    shadow = build(tmp_path / "system/libnccl.so.2", "libnccl.so.2")
    env = {"LD_LIBRARY_PATH": str(shadow.parent)}
    for old_rpath, expected in ((True, wanted), (False, shadow)):
        user = build(tmp_path / f"lib{old_rpath}/libuser.so", "libuser.so", needs=[wanted],
                     runpath=str(wanted.parent), old_rpath=old_rpath)  # fmt: skip
        maps, _ = load_in_python([user], env)
        assert str(expected) in maps
        (load,) = predict_loads(scene_for(tmp_path, env), [user]).loaded("libnccl.so.2")
        assert load.path == str(expected)


def test_a_non_elf_file_first_on_the_path_stops_the_search(tmp_path: Path) -> None:
    good = build(tmp_path / "good/libfoo.so.1", "libfoo.so.1")
    bad = tmp_path / "bad/libfoo.so.1"
    bad.parent.mkdir()
    user = build(tmp_path / "lib/libuser.so", "libuser.so", needs=[good], runpath=str(good.parent))
    env = {"LD_LIBRARY_PATH": str(bad.parent)}
    for text, words in (
        ("not a library\n" * 8, "invalid ELF header"),
        ("short\n", "file too short"),
    ):
        bad.write_text(text)
        _, error = load_in_python([user], env)
        assert f"{bad}: {words}" in error
        outcome = predict_loads(scene_for(tmp_path, env), [user])
        (failure,) = outcome.failures
        assert failure.why.startswith(f"{bad}: ") and failure.name == "libfoo.so.1"


def test_another_machine_and_a_symlink_loop_are_skipped(tmp_path: Path) -> None:
    good = build(tmp_path / "good/libfoo.so.1", "libfoo.so.1")
    arm = tmp_path / "arm/libfoo.so.1"
    arm.parent.mkdir()
    data = bytearray(good.read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # e_machine: EM_AARCH64
    arm.write_bytes(bytes(data))
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "libfoo.so.1").symlink_to("libfoo.so.1")
    user = build(tmp_path / "lib/libuser.so", "libuser.so", needs=[good], runpath=str(good.parent))
    env = {"LD_LIBRARY_PATH": f"{loop}:{arm.parent}"}
    maps, error = load_in_python([user], env)
    assert error == "" and str(good) in maps
    scene = scene_for(tmp_path, env)
    assert getattr(scene.view.files[str(arm)], "machine", "") == "aarch64"
    (load,) = predict_loads(scene, [user]).loaded("libfoo.so.1")
    assert (load.path, load.reason) == (str(good), Reason.RUNPATH)


def test_glibc_hwcaps_folders_come_first(tmp_path: Path) -> None:
    scene = scene_for(tmp_path)
    if not scene.settings.hwcaps:
        return  # this glibc lists no glibc-hwcaps subfolders (older than 2.33)
    level = scene.settings.hwcaps[-1]
    plain = build(tmp_path / "lib/libfoo.so.1", "libfoo.so.1")
    tuned = build(tmp_path / f"lib/glibc-hwcaps/{level}/libfoo.so.1", "libfoo.so.1")
    user = build(
        tmp_path / "app/libuser.so", "libuser.so", needs=[plain], runpath=str(plain.parent)
    )
    maps, _ = load_in_python([user])
    assert str(tuned) in maps
    scene = scene_for(tmp_path)
    (load,) = predict_loads(scene, [user]).loaded("libfoo.so.1")
    assert load.path == str(tuned)


def test_origin_is_the_folder_the_file_was_opened_in(tmp_path: Path) -> None:
    """$ORIGIN of a library opened through a symbolic link is the link's folder."""
    real = build(tmp_path / "real/libuser.so", "libuser.so",
                 needs=[build(tmp_path / "real/libdep.so.1", "libdep.so.1")],
                 runpath="$ORIGIN")  # fmt: skip
    link_folder = tmp_path / "linked"
    link_folder.mkdir()
    (link_folder / "libuser.so").symlink_to(real)
    beside_link = build(link_folder / "libdep.so.1", "libdep.so.1")
    maps, error = load_in_python([link_folder / "libuser.so"])
    assert error == "" and str(beside_link) in maps
    (load,) = predict_loads(scene_for(tmp_path), [link_folder / "libuser.so"]).loaded("libdep.so.1")
    assert load.path == str(beside_link)
    shutil.rmtree(link_folder)
    assert not os.path.exists(link_folder)
