"""The pure parts of the loader model: purity, paths and links, the ld.so cache and
ld.so.conf, token expansion, search order details, the catalog."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit.native.catalog import family_of, file_version, stem, toolkit_owner
from audit.native.elf import ElfFacts
from audit.native.fsview import MAX_LINKS, FileSystemView, LinkLoop, view_from_json
from audit.native.ldcache import LdCacheError, cache_map, conf_folders, parse_cache
from audit.native.process import Step, run_process
from audit.native.search import LoaderSettings, Miss, Reason, Requester, expand, search

PACKAGE = Path(__file__).resolve().parent.parent / "audit/native"

X86 = ElfFacts("x86_64", 64)


def _view(files: dict[str, ElfFacts], links: dict[str, str] | None = None) -> FileSystemView:
    listings: dict[str, list[str]] = {}
    for path in [*files, *(links or {})]:
        folder, name = path.rsplit("/", 1)
        listings.setdefault(folder, []).append(name)
    return FileSystemView(files, links or {}, {k: tuple(sorted(v)) for k, v in listings.items()})


def test_links_resolve_component_by_component() -> None:
    view = _view({"/usr/lib/x86_64-linux-gnu/libz.so.1.3": X86},
                 {"/lib": "usr/lib", "/usr/lib/x86_64-linux-gnu/libz.so.1": "libz.so.1.3",
                  "/opt/cuda": "/opt/cuda-13.0", "/opt/cuda-13.0/lib": "../up/lib"})  # fmt: skip
    assert (
        view.realpath("/lib/x86_64-linux-gnu/libz.so.1") == "/usr/lib/x86_64-linux-gnu/libz.so.1.3"
    )
    assert view.realpath("/opt/cuda/lib/x") == "/opt/up/lib/x"  # '..' after the link's target
    found = view.lookup("/lib/./x86_64-linux-gnu//libz.so.1")
    assert found is not None and found.facts == X86
    assert view_from_json(view.to_json()) == view


def test_a_link_loop_is_absent_not_an_error() -> None:
    view = _view({}, {"/l/a.so": "b.so", "/l/b.so": "a.so"})
    with pytest.raises(LinkLoop, match=f"more than {MAX_LINKS}"):
        view.realpath("/l/a.so")
    assert view.lookup("/l/a.so") is None
    assert not view.is_folder("/l/a.so")


def test_this_machines_ld_so_cache_reads_as_ldconfig_prints_it() -> None:
    cache = Path("/etc/ld.so.cache")
    if not cache.exists():
        pytest.skip("no /etc/ld.so.cache here")
    entries = parse_cache(cache.read_bytes())
    printed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    lines = [line.strip() for line in printed.splitlines()[1:] if "=>" in line]
    assert [(line.split(" ", 1)[0], line.rsplit("=> ", 1)[1]) for line in lines] == [
        (e.soname, e.path) for e in entries
    ]
    machine = "x86_64" if "x86-64" in printed else "aarch64"
    assert cache_map(entries, machine)["libc.so.6"][0].endswith("/libc.so.6")


def test_a_broken_cache_is_a_clear_error() -> None:
    with pytest.raises(LdCacheError, match=r"no ld\.so cache magic"):
        parse_cache(b"\x7fELF")
    with pytest.raises(LdCacheError, match="do not fit"):
        parse_cache(b"glibc-ld.so.cache1.1" + (1000).to_bytes(4, "little") + bytes(24))


def test_ld_so_conf_follows_includes_once() -> None:
    files = {
        "/etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n/opt/lib # trailing\n",
        "/etc/ld.so.conf.d/a.conf": "/usr/local/cuda/lib64\ninclude ../ld.so.conf\n",
        "/etc/ld.so.conf.d/b.conf": "hwcap 1 nosegneg\n/usr/local/cuda/lib64\n/opt/nccl\n",
        "/etc/ld.so.conf.d/c.txt": "/not/read\n",
    }
    folders = conf_folders(files.get, lambda d: [p.rsplit("/", 1)[1] for p in files
                                                 if p.rsplit("/", 1)[0] == d])  # fmt: skip
    assert folders == ("/usr/local/cuda/lib64", "/opt/nccl", "/opt/lib")


def test_dynamic_string_tokens() -> None:
    tokens = {"LIB": "lib/x86_64-linux-gnu", "PLATFORM": "x86_64"}
    assert expand("$ORIGIN/../lib:${ORIGIN}", "/o", tokens) == "/o/../lib:/o"
    assert (
        expand("$ORIGINAL/$LIB/${PLATFORM}", "/o", tokens)
        == "$ORIGINAL/lib/x86_64-linux-gnu/x86_64"
    )
    assert expand("$ORIGIN/x", None, tokens) is None


def test_the_cache_gives_its_first_entry_then_the_default_folders() -> None:
    wheel, system = "/site/nvidia/nccl/lib/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
    view = _view({wheel: X86, system: X86, "/usr/lib/libnccl.so.2": X86})
    settings = LoaderSettings(cache={"libnccl.so.2": ("/gone/libnccl.so.2", system)})
    hit = search("libnccl.so.2", [], None, view, settings)
    assert not isinstance(hit, Miss) and hit.reason == Reason.DEFAULT  # the first entry is gone
    settings = replace_cache(settings, {"libnccl.so.2": (system,)})
    hit = search("libnccl.so.2", [], None, view, settings)
    assert not isinstance(hit, Miss) and (hit.found.path, hit.reason) == (system, Reason.CACHE)
    nodeflib = Requester("/site/x.so", ElfFacts("x86_64", 64, nodeflib=True))
    assert isinstance(search("libnccl.so.2", [nodeflib], None, view, settings), Miss)
    no_cache = LoaderSettings(conf_folders=("/site/nvidia/nccl/lib",))
    hit = search("libnccl.so.2", [], None, view, no_cache)
    assert not isinstance(hit, Miss) and (hit.found.path, hit.reason) == (wheel, Reason.LD_SO_CONF)


def replace_cache(settings: LoaderSettings, cache: dict[str, tuple[str, ...]]) -> LoaderSettings:
    from dataclasses import replace

    return replace(settings, cache=cache)


def test_a_step_falls_back_and_a_group_stops_after_a_failure() -> None:
    main = "/usr/bin/python3"
    view = _view({main: X86, "/w/libcudnn_graph.so.9": X86, "/w/libb.so.1": X86})
    steps = [
        Step("libcudnn_graph.so.9.19.0", label="cudnn",
             fallbacks=("libcudnn_graph.so.9.19", "libcudnn_graph.so.9")),
        Step("/w/missing.so", group="g", label="first"),
        Step("/w/libb.so.1", group="g", label="second"),
        Step("/w/libb.so.1", label="after", only_if_maps="nothing", after_failure_of="first"),
    ]  # fmt: skip
    settings = LoaderSettings(ld_library_path="/w")
    outcome = run_process(view, settings, main, [steps])
    assert [load.path for load in outcome.loads] == [main, "/w/libcudnn_graph.so.9", "/w/libb.so.1"]
    assert outcome.loads[2].step == "after"
    assert [(f.name, f.why) for f in outcome.failures] == [("/w/missing.so", "no such file")]


def test_the_catalog() -> None:
    for name in ("libcudnn_engines_runtime_compiled.so.9", "libnvrtc-builtins.so.13.0",
                 "libnvrtc.alt.so.13", "nvshmem_bootstrap_uid.so.3", "libnvToolsExt.so.1",
                 "libnvtx3interop.so.1", "libcufile_rdma.so.1", "libcusparseLt.so.0"):  # fmt: skip
        assert family_of(name) is not None, name
    for name in ("libcuda.so.1", "libnvidia-ml.so.1", "libcudnn", "libc.so.6"):
        assert family_of(name) is None, name
    assert stem("/x/libcudnn_graph.so.9.14.0") == "libcudnn_graph"
    assert file_version("/x/libnccl.so.2.28.3", "libnccl.so.2") == "2.28.3"
    assert file_version("/w/libnccl.so.2", "libnccl.so.2") == ""
    owner = toolkit_owner("/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcufft.so.12")
    assert owner is not None and owner.label() == "CUDA toolkit 13.0"


def test_pure_modules_run_on_python_39() -> None:
    """Imported and used by a real Python 3.9 (the guard's oldest), where one is installed."""
    candidates = sorted(Path.home().glob(".pyenv/versions/3.9*/bin/python3.9"))
    candidates += [Path(p) for p in ("/usr/bin/python3.9", "/usr/local/bin/python3.9")]
    python = next((str(p) for p in candidates if p.exists()), None)
    if python is None:
        pytest.skip("no python3.9 here")
    code = (
        "from audit.native.search import LoaderSettings, search\n"
        "from audit.native.fsview import FileSystemView\n"
        "from audit.native import bridge, pyrules, versions, scene, ldcache\n"
        "print(search('libx.so.1', [], None, FileSystemView(), LoaderSettings()).why)\n"
    )
    done = subprocess.run([python, "-c", code], cwd=PACKAGE.parent.parent, capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "not found"


def test_the_kit_records_a_scene_where_no_cuda_package_is(tmp_path: Path) -> None:
    """Without torch, cupy or jax the kit runs no process and still records the machine."""
    import gzip
    import json

    from audit.native.kit import main
    from audit.native.scene import scene_from_json

    output = tmp_path / "scene.json.gz"
    assert main(["--output", str(output), "--scenarios", "torch,cupy,jax"]) == 0
    document = json.loads(gzip.decompress(output.read_bytes()))
    assert document["schema"] == "layer-audit.native-kit/1" and document["processes"] == []
    scene = scene_from_json(document["scene"])
    assert scene.python is not None and scene.python.executable == os.path.realpath(sys.executable)
