"""The ground-truth kit: inside a real CUDA Python environment, record what a process maps and
the facts the predictor needs, as one small JSON file (no binaries).

HOST side; run with the environment's own interpreter::

    python -m audit.native.kit --output native-scene.json.gz [--ld-debug DIR] [--check-stream]

For each scenario (``torch``, ``cupy``, ``jax``, ``all``: each where importable) a child
interpreter imports the package(s), runs one GPU operation each touching cuBLAS, cuDNN, cuFFT,
cuRAND, cuSOLVER and cuSPARSE (as far as the package offers them), and reports the files
``/proc/self/maps`` shows and the loader's link map in load order (``dl_iterate_phdr``: the
names the loader opened). The parent then gathers the scene (:mod:`audit.native.gather`) with
the children's environment: the package trees, every folder the loader could search, every
mapped file. ``--ld-library-path-first FOLDERS`` runs torch and jax once more with FOLDERS in
front of LD_LIBRARY_PATH (``torch+path``): where that makes an older copy load, the record
shows a real shadowing for the predictor to find. ``--ld-debug`` keeps ``LD_DEBUG=libs``
logs (how ld.so found each file), for a person to read. ``--check-stream`` reads every
CUDA-family file a second time with the streaming reader and records whether it agrees with
the path reader and how many bytes it kept.

The child imports nothing of this package before its work (only the standard library), so
the record is the package's own loading. The JSON (gzip) holds the schema, the scene
(:meth:`audit.native.scene.Scene.to_json`), the processes and the stream check.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SCHEMA = "layer-audit.native-kit/1"
SCENARIOS = ("torch", "cupy", "jax", "all")
_PACKAGES = {"torch": ("torch",), "cupy": ("cupy",), "jax": ("jax",),
             "all": ("torch", "cupy", "jax")}  # fmt: skip
_TREES = ("nvidia", "torch", "cupy", "cupy_backends", "cupyx", "jax_plugins",
          "jax_cuda13_plugin", "jax_cuda12_plugin", "cuda")  # fmt: skip


# ----------------------------------------------------------------------------- the child


def _module(name: str) -> Any:
    """A package imported by name (the kit runs where this checkout's type checker has none)."""
    import importlib

    return importlib.import_module(name)


def _torch_work() -> None:
    torch = _module("torch")

    a = torch.randn(64, 64, device="cuda")
    (a @ a).sum().item()  # cuBLAS
    x, w = torch.randn(1, 3, 16, 16, device="cuda"), torch.randn(4, 3, 3, 3, device="cuda")
    torch.nn.functional.conv2d(x, w).sum().item()  # cuDNN
    torch.fft.fft(torch.randn(128, device="cuda")).abs().sum().item()  # cuFFT
    generator = torch.Generator(device="cuda").manual_seed(1)
    torch.rand(10, device="cuda", generator=generator).sum().item()  # cuRAND (torch's own)
    torch.linalg.solve(a + 64 * torch.eye(64, device="cuda"), a).sum().item()  # cuSOLVER
    torch.sparse.mm(a.to_sparse(), a).sum().item()  # cuSPARSE
    torch.cuda.synchronize()


def _cupy_work() -> None:
    cupy, sparse = _module("cupy"), _module("cupyx.scipy.sparse")

    b = cupy.random.rand(64, 64)  # cuRAND
    (b @ b).sum().item()  # cuBLAS
    cupy.fft.fft(b).sum().item()  # cuFFT
    cupy.linalg.solve(b + 64 * cupy.eye(64), b).sum().item()  # cuSOLVER
    (sparse.csr_matrix(b) @ b).sum().item()  # cuSPARSE


def _jax_work() -> None:
    jax, jnp = _module("jax"), _module("jax.numpy")

    c = jnp.ones((64, 64))
    (c @ c).block_until_ready()  # cuBLAS
    jnp.fft.fft(c).block_until_ready()  # cuFFT
    jax.random.normal(jax.random.key(0), (8,)).block_until_ready()
    jnp.linalg.solve(c + 64 * jnp.eye(64), c).block_until_ready()  # cuSOLVER
    image, kernel = jnp.ones((1, 3, 16, 16)), jnp.ones((4, 3, 3, 3))
    jax.lax.conv(image, kernel, (1, 1), "VALID").block_until_ready()  # cuDNN


_WORK = {"torch": _torch_work, "cupy": _cupy_work, "jax": _jax_work}


def _link_map() -> list[str]:
    """The names the loader opened, in load order (``dl_iterate_phdr``)."""
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]

    names: list[str] = []
    callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Info), ctypes.c_size_t,
                                     ctypes.c_void_p)  # fmt: skip

    def visit(info: Any, size: int, data: Any) -> int:
        del size, data
        raw = info.contents.name
        names.append(raw.decode("utf-8", "replace") if raw else "")
        return 0

    ctypes.CDLL(None).dl_iterate_phdr(callback_type(visit), None)
    return names


def _mapped() -> list[str]:
    found = set()
    with Path("/proc/self/maps").open(encoding="utf-8") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/") and ".so" in parts[5]:
                found.add(parts[5])
    return sorted(found)


def child(scenario: str, output: str) -> int:
    """Import and work, then record; a failure is recorded, not raised."""
    error = ""
    for package in _PACKAGES[scenario]:
        try:
            _WORK[package]()
        except Exception as caught:
            error += f"{package}: {type(caught).__name__}: {caught}\n"
    versions = {p: str(getattr(sys.modules.get(p), "__version__", "")) for p in _PACKAGES[scenario]}
    record = {"maps": _mapped(), "link_map": _link_map(), "error": error, "versions": versions}
    Path(output).write_text(json.dumps(record), encoding="utf-8")
    return 0


# ----------------------------------------------------------------------------- the parent


def _importable(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


def run_scenario(
    scenario: str, folder: Path, ld_debug: Path | None, first: str = ""
) -> dict[str, Any]:
    """One child interpreter's record (its stderr kept when it failed); ``first`` goes in
    front of LD_LIBRARY_PATH (the record is then named ``<scenario>+path``)."""
    name = f"{scenario}+path" if first else scenario
    output = folder / f"{name}.json"
    environ = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    if first:
        environ["LD_LIBRARY_PATH"] = ":".join(filter(None, (first, environ.get("LD_LIBRARY_PATH"))))
    if ld_debug is not None:
        environ.update(LD_DEBUG="libs", LD_DEBUG_OUTPUT=str(ld_debug / name))
    argv = [sys.executable, "-m", "audit.native.kit", "--child", scenario, "--output", str(output)]
    done = subprocess.run(argv, env=environ, cwd=folder, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    record: dict[str, Any] = {"maps": [], "link_map": [], "error": done.stderr[-4000:]}
    if output.exists():
        record = json.loads(output.read_text(encoding="utf-8"))
    record.update(name=name, packages=list(_PACKAGES[scenario]),
                  ld_library_path=environ.get("LD_LIBRARY_PATH"))  # fmt: skip
    return record


def system_search() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(system search folders, glibc-hwcaps subfolders searched) as ``ld.so --help`` says."""
    for loader in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"):
        if Path(loader).exists():
            done = subprocess.run([loader, "--help"], capture_output=True, text=True, check=False)
            return _parse_help(done.stdout)
    return (), ()


def _parse_help(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    folders, hwcaps = [], []
    for line in text.splitlines():
        entry = line.strip()
        if entry.endswith("(system search path)"):
            folders.append(entry.split(" (", 1)[0])
        elif entry.endswith("searched)") and "supported" in entry and "/" not in entry:
            hwcaps.append(entry.split(" ", 1)[0])
    legacy = text.split("Legacy HWCAP", 1)
    if len(legacy) == 2:  # glibc <= 2.36 lists legacy subfolders after the hwcaps ones
        hwcaps = [h for h in hwcaps if h not in legacy[1]]
    return tuple(folders), tuple(hwcaps)


def stream_check(scene: Any) -> list[dict[str, Any]]:
    """Each CUDA-family file read again as a forward-only stream: equal facts? bytes kept?"""
    from audit.native.catalog import family_of
    from audit.native.elfread import read_path, read_stream

    found = []
    for path, _facts in scene.view.elf_files():
        if family_of(path) is None:
            continue
        kept: list[int] = []
        with Path(path).open("rb") as handle:
            streamed = read_stream(handle, Path(path).stat().st_size, path, kept=kept)
        by_path = read_path(path)
        found.append({"path": path, "size": Path(path).stat().st_size, "kept": sum(kept),
                      "equal": streamed == by_path,
                      "streamed": getattr(streamed, "reason", "")})  # fmt: skip
    return found


def parent(
    output: str, ld_debug: str | None, check: bool, scenarios: list[str], first: str = ""
) -> int:
    import site
    import tempfile

    from audit.native.gather import gather, loader_settings
    from audit.native.scene import PythonFacts

    debug = Path(ld_debug) if ld_debug else None
    if debug is not None:
        debug.mkdir(parents=True, exist_ok=True)
    sites = [s for s in site.getsitepackages() if Path(s).is_dir()]
    with tempfile.TemporaryDirectory(prefix="la-native-kit-") as work:
        runnable = [s for s in scenarios if all(_importable(p) for p in _PACKAGES[s])]
        processes = [run_scenario(s, Path(work), debug) for s in runnable]
        if first:  # the same work with other folders first on LD_LIBRARY_PATH
            processes += [run_scenario(s, Path(work), debug, first) for s in runnable
                          if s in ("torch", "jax")]  # fmt: skip
    import _ctypes

    python = PythonFacts(os.path.realpath(sys.executable), tuple(sites), _ctypes.__file__)
    machine = os.uname().machine
    folders, hwcaps = system_search()
    settings = loader_settings(os.environ, machine, folders, hwcaps, cwd=work)
    mapped = sorted({p for record in processes for p in record["maps"]})
    trees = [f"{s}/{t}" for s in sites for t in _TREES if Path(s, t).is_dir()]
    scene = gather(trees, settings, [python.executable, python.ctypes, *mapped], python,
                   trim=True)  # fmt: skip
    document = {
        "schema": SCHEMA,
        "scene": scene.to_json(),
        "processes": processes,
        "stream_check": stream_check(scene) if check else [],
        "python": sys.version.split()[0],
        "glibc": os.confstr("CS_GNU_LIBC_VERSION"),
    }
    data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    Path(output).write_bytes(gzip.compress(data, mtime=0))
    print(f"{output}: {len(data)} bytes of JSON, {len(processes)} processes")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m audit.native.kit")
    parser.add_argument("--output", required=True)
    parser.add_argument("--ld-debug", help="folder for LD_DEBUG=libs logs")
    parser.add_argument("--check-stream", action="store_true")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument(
        "--ld-library-path-first",
        default="",
        metavar="FOLDERS",
        help="also run torch and jax with FOLDERS first on LD_LIBRARY_PATH",
    )
    parser.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.output)
    scenarios = [s for s in args.scenarios.split(",") if s in SCENARIOS]
    return parent(
        args.output, args.ld_debug, args.check_stream, scenarios, args.ld_library_path_first
    )


if __name__ == "__main__":
    sys.exit(main())
