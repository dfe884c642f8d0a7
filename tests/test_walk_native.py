"""The loader model inside the layer walk, on images made in memory from ELF files gcc builds.

The walk reads each layer's ELF files with pyelftools as they stream (its default hook), folds
the scene the in-image snapshot records into every state, and the one judge resolves it:

- the nvJitLink replay (pytorch#134929): a wheel's "cusparse" needs
  ``__nvJitLinkComplete_12_4@libnvJitLink.so.12`` and finds the wheel's newer nvJitLink
  through its RUNPATH; a later ``ENV LD_LIBRARY_PATH`` puts an older toolkit's copy first:
  ``missing-symbol`` at that ENV entry, with typed fields (and the real glibc loader, given
  the same files, fails with the same symbol); without the ENV nothing fails;
- a preloaded SONAME reused: the same image with cupy, whose cuda-pathfinder loads the
  wheel's nvJitLink by path before cuSPARSE, passes even with the ENV;
- a sibling ``dlopen``ed through ``$ORIGIN``: cuDNN's shim opens its graph sub-library from
  its own folder, not the older system copy the ld.so cache names: nothing shadowed;
- the reports show which copy loads and why; the SBOM lists the library files.
"""

from __future__ import annotations

import datetime
import json
import struct
from pathlib import Path

import pytest

from audit.history.walk.cache import VERSION, WalkCache
from audit.history.walk.config import env_instruction
from audit.history.walk.delta import FORMAT
from audit.history.walk.run import WalkContext, WalkResult, walk
from audit.native.bridge import resolve_system
from audit.policy.judge import LayerVerdict, judge_history
from audit.policy.model import Policy
from audit.report.layers import JudgedImage, render_layers
from audit.report.sbom import image_sbom
from tests.support import native_images as images
from tests.support.native_build import build, load_in_python, needs_gcc
from tests.support.native_images import NODE, OLD, OLD_FILE, SYMBOL
from tests.support.schemas import validator
from tests.support.walk_images import Layer, config, docker_archive, dpkg_status

pytestmark = needs_gcc

SITE = "/usr/local/lib/python3.11/dist-packages"
CUSPARSE = f"{SITE}/{images.CUSPARSE}"
NEW = f"{SITE}/{images.NVJITLINK}"
TODAY = datetime.date(2026, 12, 1)


def _elf(folder: Path, name: str) -> bytes:
    return build(folder / name, None).read_bytes()


def python_layer(tmp: Path) -> Layer:
    """Debian's Python 3.11, as the walk needs it: a real ELF executable and ``_ctypes``, and
    the C library (listed only: its facts are not read)."""
    system = images.MULTIARCH
    return Layer(links={"/usr/bin/python3": "python3.11", "/lib": "usr/lib"}).add({
        f"{system}/libc.so.6": b"\x7fELF (not read)", f"{system}/libdl.so.2": b"\x7fELF",
        "/usr/bin/python3.11": _elf(tmp / "py", "python3.11"),
        "/usr/lib/python3.11/os.py": "# os\n",
        "/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so": _elf(
            tmp / "py", "_ctypes.cpython-311-x86_64-linux-gnu.so"),
        f"{SITE}/README": "",
        "/var/lib/dpkg/status": dpkg_status([("python3.11-minimal", "3.11.2-6")]),
    })  # fmt: skip


def toolkit_layer(tmp: Path) -> Layer:
    files, links = images.old_toolkit(tmp)
    return Layer(links=links).add(dict(files))


def image(tmp: Path, layers: list[Layer], env: bool, name: str = "img") -> Path:
    """A ``docker save`` tarball of ``layers``; ``env``: then ``ENV LD_LIBRARY_PATH=OLD``."""
    tars = [layer.tar() for layer in layers]
    history = [(f"RUN layer {i + 1}", False) for i in range(len(tars))]
    variables = ["PATH=/usr/local/bin:/usr/bin:/bin"]
    if env:
        history.append((f"ENV LD_LIBRARY_PATH={OLD}", True))
        variables.append(f"LD_LIBRARY_PATH={OLD}")
    path = tmp / f"{name}.tar"
    path.write_bytes(docker_archive(tars, config(tars, history, env=variables), [f"{name}:1"]))
    return path


def walked(tmp: Path, archive: Path) -> tuple[WalkResult, list[LayerVerdict]]:
    result = walk(f"docker-archive:{archive}", WalkContext(cache_root=tmp / "cache"))
    return result, judge_history(result.history, Policy(), today=TODAY)


@pytest.fixture
def replay(tmp_path: Path) -> list[Layer]:
    wheels = Layer().add(dict(images.nvjitlink_wheels(tmp_path, SITE)))
    return [python_layer(tmp_path), wheels, toolkit_layer(tmp_path)]


def test_an_env_layer_that_puts_an_older_nvjitlink_first_fails_there(
    tmp_path: Path, replay: list[Layer]
) -> None:
    result, verdicts = walked(tmp_path, image(tmp_path, replay, env=True))
    failing = [v for v in verdicts if v.fails]
    assert [v.ref.instruction for v in failing] == [f"ENV LD_LIBRARY_PATH={OLD}"]
    (finding,) = [f for f in failing[0].findings if f.rule == "missing-symbol"]
    assert finding.package == "nvidia-cusparse-cu12"
    assert (finding.before, finding.after) == ("12.3.1.170", "12.1.105")
    symbol = finding.symbol
    assert symbol is not None
    assert (symbol.requirer, symbol.needed, symbol.version, symbol.symbol) == (
        CUSPARSE, NODE, NODE, SYMBOL)  # fmt: skip
    assert (symbol.loaded, symbol.reason, symbol.entry) == (
        f"{OLD}/{OLD_FILE}", "ld_library_path", OLD)  # fmt: skip
    assert symbol.satisfying == (NEW,)
    assert finding.message.startswith(f"libcusparse.so.12: undefined symbol: {SYMBOL}, version")
    assert f"{NEW} would satisfy it" in finding.message
    assert "[[policy.waiver]]" in finding.hint and 'rule = "missing-symbol"' in finding.hint
    # the state before the ENV entry is the same image with nothing wrong
    assert result.history.states[-2].system is not None
    assert result.history.states[-1].system != result.history.states[-2].system


def test_the_real_loader_fails_the_same_way_on_the_same_files(
    tmp_path: Path, replay: list[Layer]
) -> None:
    """The replay is faithful: glibc, given the walked files, refuses cuSPARSE alike."""
    root = tmp_path / "root"
    for layer in replay:
        for path, data in layer.files.items():
            (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / path.lstrip("/")).write_bytes(data)
        for path, target in layer.links.items():
            (root / path.lstrip("/")).symlink_to(target)
    cusparse = root / CUSPARSE.lstrip("/")
    _, error = load_in_python([cusparse], {"LD_LIBRARY_PATH": str(root / OLD.lstrip("/"))})
    assert f"undefined symbol: {SYMBOL}, version {NODE}" in error
    assert load_in_python([cusparse])[1] == ""


def test_without_that_env_the_runpath_finds_the_newer_copy(
    tmp_path: Path, replay: list[Layer]
) -> None:
    result, verdicts = walked(tmp_path, image(tmp_path, replay, env=False))
    assert not any(v.fails for v in verdicts)
    loads = {(c.soname, c.path, c.reason, c.entry) for v in verdicts for c in v.loads}
    assert (NODE, NEW, "runpath", "$ORIGIN/../../nvjitlink/lib") in loads
    system = result.history.states[-1].system
    assert system is not None and system.loader
    scene = json.loads(system.loader)
    cusparse = scene["view"]["files"][CUSPARSE]
    assert cusparse["runpath"] == "$ORIGIN/../../nvjitlink/lib"
    assert cusparse["imports"] == [{"file": NODE, "versions": [
        {"name": NODE, "weak": False, "symbols": [SYMBOL, "nvJitLinkCreate"]}]}]  # fmt: skip
    assert scene["owners"][CUSPARSE] == {"kind": "wheel", "name": "nvidia-cusparse-cu12",
                                         "version": "12.3.1.170"}  # fmt: skip
    assert scene["python"]["executable"] == "/usr/bin/python3.11"
    assert scene["python"]["ctypes"].endswith(
        "/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so"
    )


def test_a_soname_preloaded_by_path_is_reused(tmp_path: Path, replay: list[Layer]) -> None:
    """With cupy, nvJitLink is already mapped (the wheel's) when cuSPARSE needs it: the ENV's
    older copy is never searched for, and nothing is missing."""
    layers = [*replay, Layer().add(dict(images.cupy_module(tmp_path, SITE)))]
    result, verdicts = walked(tmp_path, image(tmp_path, layers, env=True))
    assert not any(f.rule == "missing-symbol" for v in verdicts for f in v.findings)
    last = result.history.states[-1].system
    assert last is not None

    (jit,) = [lib for lib in resolve_system(last).libraries if lib.soname == NODE]
    cupy_loads = [load for load in jit.loads if "cuda.pathfinder" in load.requirer]
    assert [(load.path, load.reason) for load in cupy_loads] == [(NEW, "preload")]


def cudnn_layers(tmp: Path) -> list[Layer]:
    """The cuDNN wheel, and Debian's older graph library, which the ld.so cache names."""
    files, links = images.cudnn_deb(tmp)
    graph = f"{images.MULTIARCH}/{images.GRAPH}"
    deb = Layer(links=links).add({**files, "/etc/ld.so.cache": ld_cache([(images.GRAPH, graph)])})
    return [Layer().add(dict(images.cudnn_wheel(tmp, SITE))), deb]


def ld_cache(entries: list[tuple[str, str]]) -> bytes:
    """A glibc-ld.so.cache1.1 file (what ``ldconfig`` writes) naming ``entries``."""
    strings, offsets = b"", []
    header = 48 + 24 * len(entries)
    for soname, path in entries:
        offsets.append((header + len(strings), header + len(strings) + len(soname) + 1))
        strings += soname.encode() + b"\0" + path.encode() + b"\0"
    head = b"glibc-ld.so.cache1.1" + struct.pack("<II", len(entries), len(strings))
    head += bytes([2]) + b"\0" * 3 + struct.pack("<I", 0) + b"\0" * 12
    rows = b"".join(struct.pack("<iIIIQ", 0x0303, k, v, 0, 0) for k, v in offsets)
    return head + rows + strings


def test_a_sibling_dlopened_through_origin_shadows_nothing(tmp_path: Path) -> None:
    layers = [python_layer(tmp_path), *cudnn_layers(tmp_path)]
    result, verdicts = walked(tmp_path, image(tmp_path, layers, env=False))
    assert not any(f.rule == "shadowed-native" for v in verdicts for f in v.findings)
    wheel = f"{SITE}/nvidia/cudnn/lib/libcudnn_graph.so.9"
    loads = [c for v in verdicts for c in v.loads if c.soname == "libcudnn_graph.so.9"]
    assert [(c.path, c.reason, c.entry) for c in loads] == [(wheel, "runpath", "$ORIGIN")]
    assert loads[0].requirer == f"{SITE}/nvidia/cudnn/lib/libcudnn.so.9"
    system = result.history.states[-1].system
    assert system is not None
    assert json.loads(system.loader)["settings"]["cache"] == {
        "libcudnn_graph.so.9": ["/usr/lib/x86_64-linux-gnu/libcudnn_graph.so.9"]}  # fmt: skip


def test_the_reports_and_the_sbom_show_which_copy_loads_and_why(
    tmp_path: Path, replay: list[Layer]
) -> None:
    result, verdicts = walked(tmp_path, image(tmp_path, replay, env=True))
    judged = JudgedImage("img", result.history, tuple(verdicts))
    terminal = render_layers("walk", [judged], "terminal", width=200)
    assert f"→ {NODE} loads {OLD}/{OLD_FILE}" in terminal
    assert f"(ld_library_path {OLD}); was {NEW}" in terminal
    document = json.loads(render_layers("walk", [judged], "json"))
    validator("report").validate(document)  # the symbol and loads keys are in the schema
    (section,) = [
        s for s in document["sections"] if s["title"].endswith(f"ENV LD_LIBRARY_PATH={OLD}")
    ]
    assert [f["symbol"]["symbol"] for f in section["findings"] if "symbol" in f] == [SYMBOL]
    assert {(x["soname"], x["reason"]) for x in section["loads"]} == {(NODE, "ld_library_path")}
    markdown = render_layers("walk", [judged], "markdown")
    assert f"| `{NODE}` | `{OLD}/{OLD_FILE}` |" in markdown
    sbom = json.loads(image_sbom(result.history, "img:1", "2026-12-01T00:00:00Z"))
    native = {c["name"]: c for c in sbom["components"] if c["purl"].startswith("pkg:generic/")}
    old = next(c for c in sbom["components"] if c["purl"].endswith(f"{OLD}/{OLD_FILE}"))
    properties = {(p["name"], p["value"]) for p in old["properties"]}
    assert ("layer-audit:soname", NODE) in properties
    assert ("layer-audit:shadows", NEW) in properties
    assert any(n == "layer-audit:loaded-by" and "ld_library_path" in v for n, v in properties)
    assert "libcusparse.so.12" in native


def test_old_cache_entries_miss_and_the_env_timeline_reads_both_builders(tmp_path: Path) -> None:
    assert VERSION == "v3" and FORMAT.endswith("/2")
    old = tmp_path / "cache" / "v2" / "layers"  # deltas read without the .pth files' text
    old.mkdir(parents=True)
    digest = "sha256:" + "0" * 64
    (old / f"{'0' * 64}.json").write_text("{}\n{}")
    assert WalkCache(tmp_path / "cache").delta(digest) is None
    assert env_instruction("ENV LD_LIBRARY_PATH=/a:/b") == (("LD_LIBRARY_PATH", "/a:/b"),)
    assert env_instruction("/bin/sh -c #(nop)  ENV A=1 B=2") == (("A", "1"), ("B", "2"))
    assert env_instruction("RUN echo ENV A=1") is None


def test_a_package_extension_that_needs_the_family_is_a_requester(
    tmp_path: Path, replay: list[Layer]
) -> None:
    """An extension outside the rules' trees (``<site>/spext/_C.so``) is imported by path: its
    DT_NEEDED cuSPARSE comes through its RUNPATH, and is named as who asked."""
    stub = build(tmp_path / "stub/libcusparse.so.12", "libcusparse.so.12", defines=("x",))
    extension = build(tmp_path / "ext/_C.so", None, calls=("x",), needs=[stub],
                      runpath="$ORIGIN/../nvidia/cusparse/lib")  # fmt: skip
    layer = Layer().add(
        {f"{SITE}/spext/_C.cpython-311-x86_64-linux-gnu.so": extension.read_bytes()}
    )
    result, verdicts = walked(tmp_path, image(tmp_path, [*replay, layer], env=False))
    assert not any(v.fails for v in verdicts)
    last = result.history.states[-1].system
    assert last is not None
    (library,) = [
        lib for lib in resolve_system(last).libraries if lib.soname == "libcusparse.so.12"
    ]
    requester = f"{SITE}/spext/_C.cpython-311-x86_64-linux-gnu.so"
    assert {(x.path, x.requirer, x.reason) for x in library.loads} == {
        (CUSPARSE, requester, "runpath")
    }
