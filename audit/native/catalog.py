"""The CUDA family: the libraries NVIDIA ships in wheels, the CUDA toolkit and deb packages.

PURE: standard library only, Python 3.9 syntax.

A file belongs to a family by its stem, the part of its name before ``.so`` (``libcudnn_graph``
of ``libcudnn_graph.so.9``). The stems were checked against what NVIDIA's CUDA 13 wheels
really install (``site-packages/nvidia/cu13/lib``, ``nvidia/cudnn/lib``, ``nvidia/nccl/lib``,
``nvidia/cusparselt/lib``, ``nvidia/nvshmem/lib`` of torch 2.11.0+cu130's environment, listed
on the accelerator machine), CUDA 13.0's toolkit (``/usr/local/cuda-13.0/targets/*/lib``) and
cuDNN 9.14 / NCCL 2.28 deb packages; CUDA 12 and cuDNN 8 names are kept where they differ
(``libnvToolsExt``, ``libcudnn_ops_infer``). The CUDA driver (``libcuda``,
``libnvidia-*``) is not in the family: it comes from the host, not from the image.

``opens`` lists the libraries a family member opens with ``dlopen`` by itself when the work
needs them (cuDNN 9's ``libcudnn.so.9`` is a shim that opens its sub-libraries), so a process
model maps them lazily, from that member, with its RUNPATH.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    key: str
    title: str
    stems: tuple[str, ...]
    wheels: tuple[str, ...]  # distributions that install it (canonical names)
    debs: tuple[str, ...] = ()  # package name prefixes (NVIDIA's repository, Debian/Ubuntu)
    prefixes: tuple[str, ...] = ()  # stems that start so (NVSHMEM's plug-ins)


@dataclass(frozen=True)
class Owner:
    """Who installed a file: ``kind`` is wheel, deb, toolkit or unknown."""

    kind: str
    name: str
    version: str

    def label(self) -> str:
        return f"{self.name} {self.version}".strip() if self.kind != "unknown" else ""


_CUDNN9 = ("graph", "ops", "cnn", "adv", "heuristic", "engines_precompiled",
           "engines_runtime_compiled")  # fmt: skip
_CUDNN8 = ("ops_infer", "ops_train", "cnn_infer", "cnn_train", "adv_infer", "adv_train")


def _wheels(*names: str) -> tuple[str, ...]:
    """The CUDA 13 wheel names and their -cu12/-cu11 predecessors."""
    return tuple(f"{n}{s}" for n in names for s in ("", "-cu12", "-cu11"))


FAMILIES = (
    Family("cudart", "CUDA runtime", ("libcudart",), _wheels("nvidia-cuda-runtime"),
           ("cuda-cudart-", "libcudart")),
    Family("cublas", "cuBLAS", ("libcublas", "libcublasLt", "libnvblas"),
           _wheels("nvidia-cublas"), ("libcublas-", "libcublas", "libnvblas")),
    Family("cudnn", "cuDNN",
           ("libcudnn", *(f"libcudnn_{s}" for s in (*_CUDNN9, *_CUDNN8))),
           ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11"),
           ("libcudnn9", "libcudnn8", "cudnn9-", "libcudnn")),
    Family("cufft", "cuFFT", ("libcufft", "libcufftw"), _wheels("nvidia-cufft"),
           ("libcufft-", "libcufft")),
    Family("curand", "cuRAND", ("libcurand",), _wheels("nvidia-curand"),
           ("libcurand-", "libcurand")),
    Family("cusolver", "cuSOLVER", ("libcusolver", "libcusolverMg"),
           _wheels("nvidia-cusolver"), ("libcusolver-", "libcusolver")),
    Family("cusparse", "cuSPARSE", ("libcusparse",), _wheels("nvidia-cusparse"),
           ("libcusparse-", "libcusparse")),
    Family("cusparselt", "cuSPARSELt", ("libcusparseLt",),
           ("nvidia-cusparselt-cu13", "nvidia-cusparselt-cu12"), ("libcusparselt",)),
    Family("nvjitlink", "nvJitLink", ("libnvJitLink",), _wheels("nvidia-nvjitlink"),
           ("libnvjitlink-", "libnvjitlink")),
    Family("nvrtc", "NVRTC",
           ("libnvrtc", "libnvrtc-builtins", "libnvrtc.alt", "libnvrtc-builtins.alt"),
           _wheels("nvidia-cuda-nvrtc"), ("cuda-nvrtc-", "libnvrtc")),
    Family("cupti", "CUPTI",
           ("libcupti", "libnvperf_host", "libnvperf_target", "libpcsamplingutil",
            "libcheckpoint"),
           _wheels("nvidia-cuda-cupti"), ("cuda-cupti-", "libcupti")),
    Family("cufile", "cuFile (GPUDirect Storage)", ("libcufile", "libcufile_rdma"),
           _wheels("nvidia-cufile"), ("libcufile-", "gds-tools-", "libcufile")),
    Family("nccl", "NCCL", ("libnccl",), ("nvidia-nccl-cu13", "nvidia-nccl-cu12",
           "nvidia-nccl-cu11"), ("libnccl2", "libnccl")),
    Family("nvshmem", "NVSHMEM", ("libnvshmem_host", "libnvshmem"),
           ("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12"), ("libnvshmem3-", "libnvshmem"),
           ("nvshmem_bootstrap_", "nvshmem_transport_")),
    Family("nvtx", "NVTX", ("libnvToolsExt", "libnvtx3interop"), _wheels("nvidia-nvtx"),
           ("cuda-nvtx-", "libnvtoolsext")),
)  # fmt: skip

# What a member opens itself (dlopen by name, from itself): cuDNN 9's shim opens its
# sub-libraries; the sub-libraries that compile at run time open NVRTC (pytorch#145580).
OPENS = {
    "libcudnn": tuple(f"libcudnn_{s}.so.9" for s in _CUDNN9),
    "libcudnn_engines_runtime_compiled": ("libnvrtc.so.13",),
}
# What a member opens from its own folder by path (NVRTC loads its builtins beside itself).
OPENS_BESIDE = {"libnvrtc": ("libnvrtc-builtins.so.{major}.{minor}",)}

_STEMS = {stem: family for family in FAMILIES for stem in family.stems}
# Every stem and plug-in prefix, sorted: the file-name prefixes a reader that cannot import
# this module matches (the in-image snapshot keeps a copy; a test keeps the two equal).
NAME_PREFIXES = tuple(sorted({*_STEMS, *(p for f in FAMILIES for p in f.prefixes)}))
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*$")


def stem(name: str) -> str:
    """``libcudnn_graph`` of ``libcudnn_graph.so.9`` (of a path's file name too)."""
    return posixpath.basename(name).split(".so", 1)[0]


def family_of(name: str) -> Family | None:
    """The family a library name or path belongs to (None: not the CUDA family)."""
    key = stem(name)
    if ".so" not in posixpath.basename(name):
        return None
    found = _STEMS.get(key)
    if found is not None:
        return found
    return next((f for f in FAMILIES if f.prefixes and key.startswith(f.prefixes)), None)


def file_version(path: str, soname: str) -> str:
    """``9.14.0`` of ``libcudnn_graph.so.9.14.0`` whose SONAME is ``libcudnn_graph.so.9``; ""
    when the file name tells no more than the SONAME (wheels name files by SONAME)."""
    name = posixpath.basename(path)
    if ".so." not in name or name == soname:
        return ""
    version = name.split(".so.", 1)[1]
    return version if _VERSION.match(version) else ""


def toolkit_owner(path: str) -> Owner | None:
    """The CUDA toolkit a path lies in (``/usr/local/cuda-13.0/...``), by its folder name."""
    match = re.match(r"^/usr/local/cuda-([0-9]+(?:\.[0-9]+)?)/", path)
    return Owner("toolkit", "CUDA toolkit", match.group(1)) if match else None


def version_of(path: str, soname: str, owner: Owner | None) -> str:
    """A copy's version: from its file name, else its wheel's (or deb's) version."""
    return file_version(path, soname) or (owner.version if owner else "")
