"""Real ELF shared objects for the loader-model tests, built with gcc, and a real process to
load them in.

:func:`build` compiles one shared object: functions it defines (under a version script when
given, so each gets a version node), functions of other libraries it calls (the link binds
each undefined reference to the version the linked library defines), a ``dlopen`` it makes,
DT_SONAME, DT_NEEDED, DT_RUNPATH or DT_RPATH. :func:`load_in_python` loads libraries with
``ctypes`` in a fresh interpreter (the real glibc loader) and returns what ``/proc/self/maps``
shows, or the loader's error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from audit.native.process import Outcome
    from audit.native.scene import Scene

CC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(CC is None, reason="needs gcc to build ELF shared objects")
PATCHELF = shutil.which("patchelf")
needs_patchelf = pytest.mark.skipif(
    PATCHELF is None, reason="needs patchelf (apt install patchelf)"
)


def build(
    path: Path,
    soname: str | None = None,
    *,
    defines: Sequence[str] = ("f",),
    version_script: str | None = None,
    calls: Sequence[str] = (),
    needs: Sequence[Path] = (),
    runpath: str | None = None,
    old_rpath: bool = False,
    opens: str | None = None,
) -> Path:
    """Compile the shared object ``path`` (its folder is made) and return it.

    ``calls`` are functions of ``needs`` that one exported function calls; ``opens`` is a name
    an exported ``open_it()`` passes to ``dlopen`` (RTLD_NOW).
    """
    assert CC is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.parent / f".{path.name}.c"
    lines = ["#include <dlfcn.h>"]
    lines += [f"int {name}(void) {{ return {len(name)}; }}" for name in defines]
    lines += [f"extern int {name}(void);" for name in calls]
    if calls:
        lines.append(
            f"int use_{len(calls)}(void) {{ return {' + '.join(f'{c}()' for c in calls)}; }}"
        )
    if opens:
        lines.append(f'void *open_it(void) {{ return dlopen("{opens}", RTLD_NOW); }}')
    source.write_text("\n".join(lines) + "\n")
    argv = [CC, "-shared", "-fPIC", "-Wl,--no-as-needed", "-o", str(path), str(source)]
    argv += [f"-Wl,-soname,{soname}"] if soname else []
    if version_script is not None:
        script = path.parent / f".{path.name}.map"
        script.write_text(version_script)
        argv.append(f"-Wl,--version-script={script}")
    for library in needs:
        argv += [f"-L{library.parent}", f"-l:{library.name}"]
    if runpath is not None:
        argv.append(f"-Wl,{'--disable' if old_rpath else '--enable'}-new-dtags,-rpath,{runpath}")
    argv.append("-ldl")
    subprocess.run(argv, check=True, capture_output=True)
    source.unlink()
    return path


def load_in_python(
    paths: Sequence[Path | str], env: dict[str, str] | None = None, call_open: bool = False
) -> tuple[list[str], str]:
    """Load ``paths`` in order with ``ctypes.CDLL`` in a fresh interpreter (``call_open``: then
    call the last one's ``open_it``): (every ``.so`` path mapped, the loader's error or "")."""
    code = (
        "import ctypes, json, sys\n"
        "error = ''\n"
        "try:\n"
        "    handles = [ctypes.CDLL(p) for p in sys.argv[1:]]\n"
        f"    if {call_open!r}:\n"
        "        handles[-1].open_it.restype = ctypes.c_void_p\n"
        "        if not handles[-1].open_it():\n"
        "            error = 'dlopen failed'\n"
        "except OSError as caught:\n"
        "    error = str(caught)\n"
        "maps = sorted({l.split()[-1] for l in open('/proc/self/maps') if '.so' in l})\n"
        "print(json.dumps([maps, error]))\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    environ.update(env or {})
    done = subprocess.run([sys.executable, "-c", code, *map(str, paths)], env=environ,
                          capture_output=True, text=True, check=True)  # fmt: skip
    maps, error = json.loads(done.stdout)
    return maps, error


def scene_for(root: Path, env: dict[str, str] | None = None) -> Scene:
    """The scene of this machine for a Python process started with ``env``, with every file
    under ``root`` read (the loader's folders and the interpreter come along)."""
    import _ctypes

    from audit.native.gather import gather, loader_settings
    from audit.native.kit import system_search
    from audit.native.scene import PythonFacts

    machine = os.uname().machine
    folders, hwcaps = system_search()
    settings = loader_settings(env or {}, machine, folders, hwcaps, cwd=str(root))
    python = PythonFacts(os.path.realpath(sys.executable), (), _ctypes.__file__)
    return gather([str(root)], settings, [python.executable, python.ctypes], python)


def predict_loads(scene: Scene, paths: Sequence[Path | str], opens_last: str = "") -> Outcome:
    """The model's process for :func:`load_in_python` (``opens_last``: the name the last
    library's ``open_it`` passes to ``dlopen``)."""
    from audit.native.process import Step, run_process
    from audit.native.search import Reason

    assert scene.python is not None
    steps = [Step(str(p), scene.python.ctypes, Reason.PRELOAD, f"CDLL {p}") for p in paths]
    if opens_last:
        steps.append(Step(opens_last, str(paths[-1]), Reason.PATH, "open_it"))
    return run_process(scene.view, scene.settings, scene.python.executable, [steps])


def under(paths: Sequence[str], root: Path) -> list[str]:
    """The paths that lie under ``root`` (real paths), sorted."""
    real = os.path.realpath(root)
    return sorted(p for p in paths if p.startswith(real + "/"))
