"""What Python packages do before the dynamic loader does: their own loads, as process steps.

PURE: standard library only, Python 3.9 syntax.

Each rule reads a :class:`~audit.native.scene.Scene` and returns the :class:`LoadStep` s that
``import`` plus one GPU operation run, in order. Every rule was read in the package's own
source, as installed on the accelerator machine (torch 2.11.0+cu130, cupy-cuda13x 14.2.0 with
cuda-pathfinder 1.8.1, jax 0.11.2 with jax-cuda13-plugin), and checked against its
``LD_DEBUG=libs`` log there:

- **torch** (``torch/__init__.py``): ``_load_global_deps`` loads ``torch/lib/
  libtorch_global_deps.so`` with ``ctypes.CDLL`` (its DT_RPATH finds the wheels' cudart); if
  ``/proc/self/maps`` then mentions ``libcudart.so``, ``_preload_cuda_deps`` loads by path, in
  its list's order, the first match of each glob (``libcublasLt.so.*[0-9]`` first, then
  cuBLAS, cuDNN, NVRTC and its builtins, cudart, CUPTI, cuFFT, cuRAND, nvJitLink, cuSPARSE,
  cuSPARSELt, cuSOLVER, NCCL, NVSHMEM, cuFile) under ``<site>/nvidia/<folder>/lib``,
  ``<site>/nvidia/cu<major>/lib`` (CUDA 13's one folder) or ``<site>/<folder>/lib``, for the
  first ``sys.path`` entry with a match; a missing library or a failed load ends the preloading
  (one ``try`` around it). If the first load fails, the same preloading runs and the load is
  tried again. Then ``from torch._C import *`` imports the extension module, whose DT_RPATH
  (inherited by every torch library) points at the ``nvidia`` folders. Linear algebra opens
  ``libtorch_cuda_linalg.so`` later, by name, from ``libtorch_cuda.so``.
- **cupy** (``cupy/__init__.py``, ``cupy_backends/cuda/libs/__init__.py``,
  ``cupy/cuda/__init__.py``): before a module that links a CUDA library is imported,
  cuda-pathfinder's ``load_nvidia_dynamic_lib`` loads it: its dependencies first (cuBLAS needs
  cuBLASLt; cuSOLVER nvJitLink, cuSPARSE, cuBLASLt, cuBLAS; cuSPARSE nvJitLink), nothing if a
  SONAME of it is mapped already, else the first SONAME found under ``<site>/nvidia/cu13/lib``
  or the library's own wheel folder, by path; else ``dlopen`` by SONAME. NVRTC is loaded the
  same way when a kernel is compiled; cuTENSOR at import (absent here: nothing maps).
- **jax** (``jax/_src/lib/__init__.py``, ``jax_plugins/xla_cuda13/__init__.py``): the plugin's
  extension modules are imported first (their DT_RPATH names ``../nvidia/cu13/lib``), then
  ``_load_nvidia_libraries`` loads by path ``<nvidia.<module>.__path__[0]>/lib/<name>`` for
  a fixed list (cudart, NVRTC, cuBLAS, cuBLASLt, NCCL, CUPTI, cuSPARSE, cuSOLVER, cuFFT,
  NVSHMEM, cuDNN), ignoring failures, then registers ``xla_cuda_plugin.so``.

Libraries that open others themselves are :func:`library_opens`: cuDNN 9's shim tries
``libcudnn_<sub>.so.<its version>``, ``.so.<major.minor>``, then ``.so.<major>`` by name
(the log shows the three names); the sub-libraries open the engines and heuristics the same way;
NVRTC loads its builtins from its own folder by path.
"""

from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

from audit.native.catalog import stem, version_of
from audit.native.process import LoadStep, run_process
from audit.native.search import Reason

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from audit.native.process import Load, ProcessOutcome
    from audit.native.scene import Scene

# The top-level packages of a site folder whose shared objects the rules load or read (their
# DT_NEEDED, RPATH and RUNPATH decide where the CUDA libraries come from): what a reader of an
# image records besides the CUDA family (the layer walk, the kit).
PACKAGE_TREES = ("torch", "cupy", "cupy_backends", "cupyx", "jax", "jaxlib", "jax_plugins",
                 "jax_cuda13_plugin", "jax_cuda12_plugin", "nvidia", "cuda")  # fmt: skip
# torch 2.11 torch/__init__.py _preload_cuda_deps: (folder, glob), in its order.
TORCH_CUDA_LIBS = (
    ("cublas", "libcublasLt.so.*[0-9]"), ("cublas", "libcublas.so.*[0-9]"),
    ("cudnn", "libcudnn.so.*[0-9]"), ("cuda_nvrtc", "libnvrtc.so.*[0-9]"),
    ("cuda_nvrtc", "libnvrtc-builtins.so.*[0-9]"), ("cuda_runtime", "libcudart.so.*[0-9]"),
    ("cuda_cupti", "libcupti.so.*[0-9]"), ("cufft", "libcufft.so.*[0-9]"),
    ("curand", "libcurand.so.*[0-9]"), ("nvjitlink", "libnvJitLink.so.*[0-9]"),
    ("cusparse", "libcusparse.so.*[0-9]"), ("cusparselt", "libcusparseLt.so.*[0-9]"),
    ("cusolver", "libcusolver.so.*[0-9]"), ("nccl", "libnccl.so.*[0-9]"),
    ("nvshmem", "libnvshmem_host.so.*[0-9]"), ("cufile", "libcufile.so.*[0-9]"),
)  # fmt: skip
TORCH_OPTIONAL = (("nvtx", "libnvToolsExt.so.*[0-9]"),)  # required=False: no stop when absent


@dataclass(frozen=True)
class PathfinderLib:
    """cuda-pathfinder 1.8.1's descriptor of one library (``descriptor_catalog.py``)."""

    sonames: tuple[str, ...]
    folders: tuple[str, ...]
    dependencies: tuple[str, ...] = ()


def _cu13(folder: str, *sonames: str, deps: tuple[str, ...] = ()) -> PathfinderLib:
    return PathfinderLib(sonames, ("nvidia/cu13/lib", f"nvidia/{folder}/lib"), deps)


PATHFINDER = {
    "cudart": _cu13("cuda_runtime", "libcudart.so.13", "libcudart.so.12"),
    "nvJitLink": _cu13("nvjitlink", "libnvJitLink.so.13", "libnvJitLink.so.12"),
    "nvrtc": _cu13("cuda_nvrtc", "libnvrtc.so.13", "libnvrtc.so.12"),
    "cublasLt": _cu13("cublas", "libcublasLt.so.13", "libcublasLt.so.12"),
    "cublas": _cu13("cublas", "libcublas.so.13", "libcublas.so.12", deps=("cublasLt",)),
    "cufft": _cu13("cufft", "libcufft.so.12", "libcufft.so.11"),
    "curand": _cu13("curand", "libcurand.so.11", "libcurand.so.10"),
    "cusparse": _cu13("cusparse", "libcusparse.so.12", deps=("nvJitLink",)),
    "cusolver": _cu13("cusolver", "libcusolver.so.12", "libcusolver.so.11",
                      deps=("nvJitLink", "cusparse", "cublasLt", "cublas")),
    "cusparseLt": _cu13("cusparselt", "libcusparseLt.so.0"),
    "cufile": _cu13("cufile", "libcufile.so.0"),
    "cupti": _cu13("cuda_cupti", "libcupti.so.13", "libcupti.so.12"),
    "nccl": PathfinderLib(("libnccl.so.2",), ("nvidia/nccl/lib",)),
    "cudnn": PathfinderLib(("libcudnn.so.9",), ("nvidia/cudnn/lib",), ("cublasLt",)),
    "cutensor": PathfinderLib(("libcutensor.so.2",), ("cutensor/lib",), ("cublasLt",)),
}  # fmt: skip
# cupy's lazily imported modules and the pathfinder library loaded before each (cupy 14.2).
CUPY_MODULES = (
    ("cublas", "cupy_backends/cuda/libs/cublas"), ("cufft", "cupy/cuda/cufft"),
    ("curand", "cupy_backends/cuda/libs/curand"), ("cusolver", "cupy_backends/cuda/libs/cusolver"),
    ("cusparse", "cupy_backends/cuda/libs/cusparse"), ("nvrtc", "cupy_backends/cuda/libs/nvrtc"),
)  # fmt: skip
# jax_plugins/xla_cuda13/__init__.py _load_nvidia_libraries: (nvidia module, names).
JAX_LOADS = (
    ("cuda_runtime", ("libcudart.so.12",)), ("cu13", ("libcudart.so.13",)),
    ("cuda_nvrtc", ("libnvrtc.so.12",)), ("cu13", ("libnvrtc.so.13",)),
    ("cublas", ("libcublas.so.12", "libcublasLt.so.12")),
    ("cu13", ("libcublas.so.13", "libcublasLt.so.13")), ("nccl", ("libnccl.so.2",)),
    ("cuda_cupti", ("libcupti.so.12",)), ("cu13", ("libcupti.so.13",)),
    ("cusparse", ("libcusparse.so.12",)), ("cu13", ("libcusparse.so.12",)),
    ("cusolver", ("libcusolver.so.11",)), ("cu13", ("libcusolver.so.12",)),
    ("cufft", ("libcufft.so.11",)), ("cu13", ("libcufft.so.12",)),
    ("nvshmem", ("libnvshmem_host.so.3",)), ("cudnn", ("libcudnn.so.9",)),
)  # fmt: skip
JAX_EXTENSIONS = ("_versions", "_solver", "_hybrid", "_sparse", "_prng", "_linalg", "_rnn",
                  "_triton", "cuda_plugin_extension")  # fmt: skip
# XLA's library stubs dlopen by name from the module that calls (its DT_RPATH names
# ../nvidia/cu13/lib); the log shows _solver opening the runtime while jax is imported.
JAX_STUB_OPENS = {"_solver": ("libcudart.so.13",)}
CUDNN_SUBS = {  # opener stem -> what it opens (seen: the shim opens graph and ops, graph the rest)
    "libcudnn": ("graph", "ops", "cnn", "adv"),
    "libcudnn_graph": ("engines_precompiled", "heuristic", "engines_runtime_compiled"),
}


class _Site:
    """Paths and globs against the scene's view (as Python sees the files, links unresolved)."""

    def __init__(self, scene: Scene) -> None:
        self.scene = scene
        self.sites = scene.python.sites if scene.python else ()
        self.ctypes = scene.python.ctypes if scene.python else ""

    def names(self, folder: str) -> tuple[str, ...]:
        try:
            return self.scene.view.listings.get(self.scene.view.realpath(folder), ())
        except ValueError:
            return ()

    def glob(self, folder: str, pattern: str) -> list[str]:
        return [f"{folder}/{n}" for n in self.names(folder) if fnmatch.fnmatchcase(n, pattern)]

    def exists(self, path: str) -> bool:
        return self.scene.view.lookup(path) is not None

    def preload(
        self,
        path: str,
        label: str,
        *,
        group: str = "",
        only_if_maps: str = "",
        after_failure_of: str = "",
        unless_mapped: tuple[str, ...] = (),
    ) -> LoadStep:
        """``ctypes.CDLL(path)``: the caller of ``dlopen`` is the ``_ctypes`` module."""
        return LoadStep(path, self.ctypes, Reason.PRELOAD, label, group=group,
                    only_if_maps=only_if_maps, after_failure_of=after_failure_of,
                    unless_mapped=unless_mapped)  # fmt: skip

    def first(self, relpath: str) -> str:
        """``<site>/<relpath>`` for the first site where it exists ("" none)."""
        return next((f"{s}/{relpath}" for s in self.sites if self.exists(f"{s}/{relpath}")), "")


def _cuda_major(site: _Site) -> str:
    """torch.version.cuda's major, read off the cudart torch's lib folder links against."""
    for path, facts in site.scene.view.elf_files():
        if path.endswith("/torch/lib/libtorch_global_deps.so"):
            for name in facts.needed:
                if name.startswith("libcudart.so."):
                    return name.split(".so.", 1)[1].split(".")[0]
    return ""


def torch_steps(scene: Scene) -> list[LoadStep]:
    """``import torch`` (torch 2.11), when torch is installed in one of the sites."""
    site = _Site(scene)
    deps = site.first("torch/lib/libtorch_global_deps.so")
    if not deps:
        return []
    torch = posixpath.dirname(posixpath.dirname(deps))
    steps = [site.preload(deps, "torch: _load_global_deps", group="torch-global")]
    steps += _torch_preloads(site, _cuda_major(site), "torch: _preload_cuda_deps")
    steps.append(site.preload(deps, "torch: _load_global_deps (again)",
                              after_failure_of="torch: _load_global_deps"))  # fmt: skip
    extension = sorted(site.glob(torch, "_C.*.so")) or [f"{torch}/_C.so"]
    steps.append(LoadStep(extension[0], "", Reason.PATH, "torch: from torch._C import *"))
    linalg = f"{torch}/lib/libtorch_cuda.so"
    steps.append(LoadStep("libtorch_cuda_linalg.so", linalg, label="torch: linear algebra",
                      lazy=True, unless_mapped=("libtorch_cuda_linalg.so",)))  # fmt: skip
    return steps


def _torch_preloads(site: _Site, major: str, label: str) -> list[LoadStep]:
    steps = []
    for index, (folder, pattern) in enumerate(TORCH_CUDA_LIBS + TORCH_OPTIONAL):
        path = _torch_glob(site, folder, pattern, major)
        if not path:
            if index < len(TORCH_CUDA_LIBS):
                break  # required: ValueError, caught around the whole preload
            continue
        steps.append(site.preload(path, f"{label} {pattern}", group="torch-preload",
                                  only_if_maps="libcudart.so",
                                  after_failure_of="torch: _load_global_deps"))  # fmt: skip
    return steps


def _torch_glob(site: _Site, folder: str, pattern: str, major: str) -> str:
    """``_get_cuda_dep_paths`` for the first site with a match (glob order: sorted here)."""
    for root in site.sites:
        found = sorted(site.glob(f"{root}/nvidia/{folder}/lib", pattern))
        found += sorted(site.glob(f"{root}/nvidia/cu{major}/lib", pattern)) if major else []
        found += sorted(site.glob(f"{root}/{folder}/lib", pattern))
        if found:
            return found[0]
    return ""


def pathfinder_steps(
    scene: Scene, name: str, label: str, seen: set[str] | None = None
) -> list[LoadStep]:
    """cuda-pathfinder's ``load_nvidia_dynamic_lib(name)`` (site-packages, then system search)."""
    site, lib, seen = _Site(scene), PATHFINDER[name], seen if seen is not None else set()
    if name in seen:
        return []  # functools.cache: a second call does nothing
    seen.add(name)
    steps = [s for dep in lib.dependencies for s in pathfinder_steps(scene, dep, label, seen)]
    candidates = [f"{folder}/{soname}" for folder in lib.folders for soname in lib.sonames]
    found = next((p for p in map(site.first, candidates) if p), "")
    text = f"{label}: cuda.pathfinder load_nvidia_dynamic_lib({name!r})"
    if found:
        return [*steps, site.preload(found, text, unless_mapped=lib.sonames)]
    first, *rest = lib.sonames
    return [*steps, LoadStep(first, site.ctypes, Reason.PATH, text, fallbacks=tuple(rest),
                         unless_mapped=lib.sonames)]  # fmt: skip


def cupy_steps(scene: Scene) -> list[LoadStep]:
    """``import cupy`` and work that touches cuBLAS, cuFFT, cuRAND, cuSOLVER, cuSPARSE, NVRTC."""
    site = _Site(scene)
    root = next((s for s in site.sites if site.names(f"{s}/cupy_backends/cuda/libs")), "")
    if not root:
        return []
    seen: set[str] = set()
    steps = pathfinder_steps(scene, "cutensor", "cupy: import", seen)
    for name, module in CUPY_MODULES:
        steps += pathfinder_steps(scene, name, "cupy", seen)
        folder, base = posixpath.split(f"{root}/{module}")
        steps += [LoadStep(path, "", Reason.PATH, f"cupy: import {module}")
                  for path in sorted(site.glob(folder, f"{base}.*.so"))[:1]]  # fmt: skip
    return steps


def jax_steps(scene: Scene) -> list[LoadStep]:
    """``import jax`` with its CUDA plugin, and its registration."""
    site = _Site(scene)
    for root in site.sites:
        for major in ("13", "12"):
            plugin = f"{root}/jax_cuda{major}_plugin"
            if site.names(plugin):
                return _jax(site, plugin, f"{root}/jax_plugins/xla_cuda{major}")
    return []


def _jax(site: _Site, plugin: str, xla: str) -> list[LoadStep]:
    names = site.names(plugin)
    order = [n for e in JAX_EXTENSIONS for n in names if n == f"{e}.so" or n.startswith(f"{e}.")]
    steps = []
    for name in order:
        steps.append(LoadStep(f"{plugin}/{name}", "", Reason.PATH, f"jax: import {name}"))
        steps += [LoadStep(lib, f"{plugin}/{name}", Reason.PATH, f"jax: {name} opens {lib}")
                  for lib in JAX_STUB_OPENS.get(name.split(".")[0], ())]  # fmt: skip
    for module, libraries in JAX_LOADS:
        folder = next((f"{s}/nvidia/{module}" for s in site.sites
                       if site.scene.view.is_folder(f"{s}/nvidia/{module}")), "")  # fmt: skip
        steps += [site.preload(f"{folder}/lib/{lib}", f"jax: _load_nvidia_libraries {lib}")
                  for lib in libraries if folder]  # fmt: skip
    steps.append(LoadStep(f"{xla}/xla_cuda_plugin.so", "", Reason.PATH, "jax: register the plugin"))
    return steps


RULES: dict[str, Callable[[Scene], list[LoadStep]]] = {
    "torch": torch_steps, "cupy": cupy_steps, "jax": jax_steps,
}  # fmt: skip


def library_opens(scene: Scene) -> Callable[[Load], Sequence[LoadStep]]:
    """The lazy ``dlopen`` s a mapped CUDA library makes itself (cuDNN, NVRTC)."""

    def opens(load: Load) -> Sequence[LoadStep]:
        key = stem(load.soname or load.path)
        if key in CUDNN_SUBS:
            return _cudnn_opens(scene, load, CUDNN_SUBS[key])
        if key == "libnvrtc":
            return _nvrtc_builtins(scene, load)
        return []

    return opens


def _cudnn_opens(scene: Scene, load: Load, subs: Sequence[str]) -> list[LoadStep]:
    version = version_of(load.path, load.soname, scene.owners.get(load.path)).split(".")
    steps = []
    for sub in subs:
        base = f"libcudnn_{sub}.so"
        names = [f"{base}.{'.'.join(version[:n])}" for n in (3, 2) if len(version) >= n]
        major = f"{base}.{version[0]}" if version[0] else f"{base}.9"
        steps.append(LoadStep(names[0] if names else major, load.opened_as, Reason.PATH,
                          f"cuDNN opens {base}", lazy=True,
                          fallbacks=(*names[1:], major) if names else (),
                          unless_mapped=(major,)))  # fmt: skip
    return steps


def _nvrtc_builtins(scene: Scene, load: Load) -> list[LoadStep]:
    """``libnvrtc-builtins.so.<major>.<minor>`` beside NVRTC, by path."""
    folder = posixpath.dirname(load.opened_as)
    version = version_of(load.path, load.soname, scene.owners.get(load.path)).split(".")
    if len(version) < 2:
        return []
    name = f"libnvrtc-builtins.so.{version[0]}.{version[1]}"
    return [LoadStep(f"{folder}/{name}", load.opened_as, Reason.PATH, f"NVRTC opens {name}",
                 lazy=True, unless_mapped=(name,))]  # fmt: skip


def predict(scene: Scene, packages: Sequence[str]) -> ProcessOutcome:
    """The process that imports ``packages`` in order (each followed by its work) in ``scene``'s
    interpreter."""
    if scene.python is None:
        raise ValueError("the scene has no Python interpreter to run")
    phases = [RULES[p](scene) for p in packages]
    return run_process(scene.view, scene.settings, scene.python.executable, phases,
                       library_opens(scene))  # fmt: skip
