"""The in-image snapshot records the loader facts; the host resolves them with audit.native.

A site-packages built with gcc: a torch-like extension whose DT_RPATH finds the cuDNN wheel's
shim, the shim (DT_RUNPATH ``$ORIGIN``) beside its graph sub-library, and an older system copy
of the sub-library (``libcudnn_graph.so.9.14.0``). Where that copy is only in an
``ld.so.conf`` folder the shim's RUNPATH wins and nothing is shadowed (the rough in-image rules
reported a dlopen by name from the interpreter); where it is first on LD_LIBRARY_PATH, the
shim really gets it, and the finding says who asked and why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.history.snapshot import parse_snapshot
from audit.history.system import System, parse_system
from audit.inimage import snapshot as script
from audit.native.bridge import resolved_libraries, scene_of
from audit.policy.model import Policy
from audit.policy.system_rules import SHADOWED_NATIVE, native_findings
from tests.support.native_build import build, needs_gcc

pytestmark = needs_gcc
GRAPH = "libcudnn_graph.so.9"


def _image(root: Path) -> tuple[Path, Path, Path]:
    """(site-packages, the wheel's graph, the system's graph) under ``root``."""
    site = root / "site-packages"
    wheel = site / "nvidia/cudnn/lib"
    graph = build(wheel / GRAPH, GRAPH)
    build(wheel / "libcudnn.so.9", "libcudnn.so.9", runpath="$ORIGIN", opens=GRAPH)
    build(site / "torch/lib/libtorch_global_deps.so", "libtorch_global_deps.so")
    build(site / "torch/_C.cpython-39-x86_64-linux-gnu.so", None, needs=[wheel / "libcudnn.so.9"],
          runpath="$ORIGIN/../nvidia/cudnn/lib", old_rpath=True)  # fmt: skip
    info = site / "nvidia_cudnn_cu13-9.19.0.56.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cudnn-cu13\n"
                                   "Version: 9.19.0.56\n\n")  # fmt: skip
    (info / "RECORD").write_text(f"nvidia/cudnn/lib/{GRAPH},,\nnvidia/cudnn/lib/libcudnn.so.9,,\n")
    system = build(root / "usr-lib/libcudnn_graph.so.9.14.0", GRAPH)
    (system.parent / GRAPH).symlink_to(system.name)
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)  # a multiarch image
    (root / "etc").mkdir()
    (root / "etc/ld.so.conf").write_text(f"{system.parent}\n")
    return site, graph, system


def _system(
    root: Path, site: Path, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> System:
    for key in ("LD_LIBRARY_PATH",):
        monkeypatch.delenv(key, raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    pairs = script.described([str(site)])
    facts = script.system_facts(pairs, str(root) + "/", ("libcudnn",))
    text = script.canonical_json(facts)
    assert json.loads(text) == facts  # the script's serialiser writes what json reads
    return parse_system(json.loads(text), "system")


def test_the_shims_runpath_wins_over_an_ld_so_conf_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, graph, system_copy = _image(tmp_path)
    system = _system(tmp_path, site, {}, monkeypatch)
    scene = scene_of(system)
    assert scene is not None and scene.settings.cache is None
    (library,) = [lib for lib in resolved_libraries(system) if lib.soname == GRAPH]
    assert {copy.path for copy in library.copies} == {str(graph), str(system_copy)}
    (load,) = library.loads
    assert load.path == str(graph)
    assert load.by == f"{site}/nvidia/cudnn/lib/libcudnn.so.9 (runpath $ORIGIN)"
    assert [f for f in native_findings(system, Policy(), "here") if f.rule == SHADOWED_NATIVE] == []


def test_a_copy_first_on_ld_library_path_really_shadows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, _, system_copy = _image(tmp_path)
    system = _system(tmp_path, site, {"LD_LIBRARY_PATH": str(system_copy.parent)}, monkeypatch)
    (finding,) = [f for f in native_findings(system, Policy(), "here") if f.rule == SHADOWED_NATIVE]
    assert finding.package == "nvidia-cudnn-cu13" and finding.after == "9.14.0"
    assert f"libcudnn.so.9 (ld_library_path {system_copy.parent}) loads {system_copy}" in (
        finding.message
    )


def test_a_snapshot_without_loader_facts_reads_and_judges_as_before(tmp_path: Path) -> None:
    old = {"os": {"manager": "", "distro": "", "note": "", "packages": []}, "native": []}
    system = parse_system(old, "system")
    assert system.loader == "" and "loader" not in system.to_json()
    assert resolved_libraries(system) == ()
    with pytest.raises(ValueError, match=r"system\.loader: expected an object"):
        parse_system({**old, "loader": []}, "system")
    del tmp_path


def test_the_loader_facts_survive_the_snapshot_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, _, _ = _image(tmp_path)
    system = _system(tmp_path, site, {}, monkeypatch)
    document: dict[str, object] = {"schema": script.SCHEMA, "environments": [
        {"interpreter": "/usr/bin/python3", "python": "3.9.18", "markers": {}, "paths": [],
         "distributions": [], "system": system.to_json()}]}  # fmt: skip
    sealed = script.seal(document)
    (env,) = parse_snapshot(sealed, "snapshot.json")
    assert env.system is not None and env.system.loader == system.loader
