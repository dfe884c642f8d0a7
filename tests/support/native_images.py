"""The loader-model cases as image contents: files (path in the image -> bytes) and symbolic
links, ELF files built with gcc, for the walk's tests on images made in memory and on images
BuildKit builds from the offline base.

- :func:`nvjitlink_wheels`: ``nvidia-nvjitlink-cu12`` and ``nvidia-cusparse-cu12`` as pip
  leaves them in ``SITE`` (their RECORDs list the libraries): cuSPARSE needs
  ``__nvJitLinkComplete_12_4@libnvJitLink.so.12`` and finds the wheel's nvJitLink, which
  defines it, through its RUNPATH;
- :func:`old_toolkit`: an older CUDA toolkit's nvJitLink in :data:`OLD` (the same version
  node, without that symbol), what ``ENV LD_LIBRARY_PATH=OLD`` puts first (pytorch#134929);
- :func:`cupy_module`: cupy's cuSPARSE module, for which cuda-pathfinder loads nvJitLink and
  cuSPARSE by path first (a SONAME then reused);
- :func:`cudnn_wheel` and :func:`cudnn_deb`: cuDNN's shim (RUNPATH ``$ORIGIN``, opens
  ``libcudnn_graph.so.9`` by name) beside its graph library, and Debian's older graph library.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.native_build import build
from tests.support.walk_images import dist_info

SITE = "/opt/venv/lib/python3.11/site-packages"
NODE = "libnvJitLink.so.12"
SYMBOL = "__nvJitLinkComplete_12_4"
OLD = "/usr/local/cuda-12.1/lib64"
OLD_FILE = "libnvJitLink.so.12.1.105"
CUSPARSE = "nvidia/cusparse/lib/libcusparse.so.12"
NVJITLINK = f"nvidia/nvjitlink/lib/{NODE}"
GRAPH = "libcudnn_graph.so.9"
MULTIARCH = "/usr/lib/x86_64-linux-gnu"

Files = dict[str, bytes]
Links = dict[str, str]


def _bytes(members: dict[str, bytes | str]) -> Files:
    return {
        path: data.encode() if isinstance(data, str) else data for path, data in members.items()
    }


def nvjitlink_wheels(tmp: Path, site: str = SITE) -> Files:
    script = f"{NODE} {{ global: nvJitLinkCreate; {SYMBOL}; local: *; }};\n"
    new = build(tmp / "w" / NVJITLINK, NODE, version_script=script,
                defines=("nvJitLinkCreate", SYMBOL))  # fmt: skip
    cusparse = build(tmp / "w" / CUSPARSE, "libcusparse.so.12", calls=("nvJitLinkCreate", SYMBOL),
                     needs=[new], runpath="$ORIGIN/../../nvjitlink/lib")  # fmt: skip
    files = dist_info(site, "nvidia-nvjitlink-cu12", "12.4.127",
                      files={NVJITLINK: new.read_bytes()})  # fmt: skip
    files |= dist_info(site, "nvidia-cusparse-cu12", "12.3.1.170",
                       files={CUSPARSE: cusparse.read_bytes()})  # fmt: skip
    return _bytes(files)


def old_toolkit(tmp: Path) -> tuple[Files, Links]:
    script = f"{NODE} {{ global: nvJitLinkCreate; local: *; }};\n"
    old = build(tmp / "old" / OLD_FILE, NODE, version_script=script, defines=("nvJitLinkCreate",))
    return {f"{OLD}/{OLD_FILE}": old.read_bytes()}, {f"{OLD}/{NODE}": OLD_FILE}


def cupy_module(tmp: Path, site: str = SITE) -> Files:
    stub = build(tmp / "stub/libcusparse.so.12", "libcusparse.so.12", defines=("cusparseCreate",))
    module = build(tmp / "cupy/cusparse.so", None, calls=("cusparseCreate",), needs=[stub])
    name = "cupy_backends/cuda/libs/cusparse.cpython-311-x86_64-linux-gnu.so"
    return _bytes(dist_info(site, "cupy-cuda12x", "13.6.0", files={name: module.read_bytes()}))


def cudnn_wheel(tmp: Path, site: str = SITE) -> Files:
    shim = build(tmp / "cudnn/libcudnn.so.9", "libcudnn.so.9", runpath="$ORIGIN", opens=GRAPH)
    graph = build(tmp / "cudnn" / GRAPH, GRAPH)
    files = {"nvidia/cudnn/lib/libcudnn.so.9": shim.read_bytes(),
             f"nvidia/cudnn/lib/{GRAPH}": graph.read_bytes()}  # fmt: skip
    return _bytes(dist_info(site, "nvidia-cudnn-cu12", "9.19.0.56", files=files))


def cudnn_deb(tmp: Path) -> tuple[Files, Links]:
    old = build(tmp / "deb" / f"{GRAPH}.9.14.0", GRAPH)
    return {f"{MULTIARCH}/{GRAPH}.9.14.0": old.read_bytes()}, {
        f"{MULTIARCH}/{GRAPH}": f"{GRAPH}.9.14.0"
    }


def write_tree(root: Path, files: Files, links: Links | None = None, strip: str = "") -> Path:
    """``files`` and ``links`` under ``root`` (paths with ``strip`` cut from their front)."""
    for path, data in files.items():
        target = root / path.removeprefix(strip).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for path, link in (links or {}).items():
        target = root / path.removeprefix(strip).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(link)
    return root
