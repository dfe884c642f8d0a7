"""Tiny real ELF shared objects, built with the machine's C compiler, for native-library tests.

Each library defines one function; ``soname`` sets DT_SONAME, ``needs`` links against other
libraries (DT_NEEDED carries their SONAMEs) and ``runpath`` sets DT_RUNPATH (``rpath`` with
``old_rpath``: DT_RPATH), the way vendor libraries such as torch's ``libtorch_cuda.so`` point at
``$ORIGIN/../../nvidia/nccl/lib``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

CC = shutil.which("gcc") or shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None, reason="needs a C compiler (gcc) to build ELF files")


def shared_object(
    path: Path,
    soname: str | None,
    *,
    needs: Sequence[Path] = (),
    runpath: str | None = None,
    old_rpath: bool = False,
) -> Path:
    """Compile ``path`` (a shared object) and return it; its directory is created."""
    assert CC is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.parent / f".{path.name}.c"
    symbol = "f_" + "".join(c if c.isalnum() else "_" for c in path.name)
    source.write_text(f"int {symbol}(void) {{ return {len(path.name)}; }}\n")
    argv = [CC, "-shared", "-fPIC", "-Wl,--no-as-needed", "-o", str(path), str(source)]
    argv += [f"-Wl,-soname,{soname}"] if soname else []
    for library in needs:
        argv += [f"-L{library.parent}", f"-l:{library.name}"]
    if runpath is not None:
        argv += [f"-Wl,{'--disable' if old_rpath else '--enable'}-new-dtags,-rpath,{runpath}"]
    subprocess.run(argv, check=True, capture_output=True)
    source.unlink()
    return path


def debian_package(
    dest: Path,
    name: str,
    version: str,
    files: dict[str, bytes],
    *,
    links: dict[str, str] | None = None,
    arch: str = "amd64",
) -> Path:
    """A real ``.deb`` (``dpkg-deb --build``) installing ``files`` (absolute path -> bytes) and
    symbolic ``links`` (absolute path -> target)."""
    tree = dest / f".{name}-{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\n"
        "Maintainer: layer-audit tests <tests@invalid>\n"
        f"Description: {name} built by the layer-audit test suite\n"
    )
    for path, data in files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for path, link in (links or {}).items():
        (tree / path.lstrip("/")).symlink_to(link)
    deb = dest / f"{name}_{version.replace(':', '%3a')}_{arch}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(deb)],
                   check=True, capture_output=True)  # fmt: skip
    shutil.rmtree(tree)
    return deb
