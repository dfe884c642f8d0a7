"""The predictor replayed over a real CUDA process recorded on the accelerator machine.

``tests/data/native/h200-torch211-cu130.json.gz`` is what ``python -m audit.native.kit
--check-stream --ld-library-path-first /usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64`` wrote
on one NVIDIA H200 (torch 2.11.0+cu130, cupy-cuda13x 14.2.0, jax 0.11.2 with the CUDA 13
plugin; cuDNN 9.14 and NCCL 2.28.3 also in /usr/lib/x86_64-linux-gnu, a CUDA 13.0 toolkit in
/usr/local/cuda): the facts the predictor reads, and each process's ``/proc/self/maps`` after
import and GPU work. The driver's ``libcuda`` is not in the CUDA family (it is the host's,
not the image's), so it is not compared.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from audit.native.bridge import processes
from audit.native.elf import ElfFacts
from audit.native.process import LoadStep, run_process
from audit.native.pyrules import predict
from audit.native.scene import Agreement, Scene, agreement, scene_from_json
from audit.native.search import Reason
from audit.native.versions import version_findings

DATA = Path(__file__).parent / "data/native/h200-torch211-cu130.json.gz"
WHEELS = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia"


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(gzip.decompress(DATA.read_bytes()))
    return data


@pytest.fixture(scope="module")
def scene(record: dict[str, Any]) -> Scene:
    return scene_from_json(record["scene"], str(DATA))


def _process(record: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(p for p in record["processes"] if p["name"] == name)
    return found


def _in(scene: Scene, process: dict[str, Any]) -> Scene:
    settings = replace(scene.settings, ld_library_path=process["ld_library_path"])
    return replace(scene, settings=settings)


def _agreement(scene: Scene, process: dict[str, Any]) -> Agreement:
    sonames = {p: f.soname for p, f in scene.view.files.items() if isinstance(f, ElfFacts)}
    outcome = predict(_in(scene, process), process["packages"])
    return agreement(outcome, process["maps"], sonames)


@pytest.mark.parametrize(
    ("name", "count"),
    [("torch", 20), ("cupy", 9), ("jax", 17), ("all", 21), ("torch+path", 20), ("jax+path", 17)],
)
def test_every_cuda_library_the_process_maps_is_predicted(
    record: dict[str, Any], scene: Scene, name: str, count: int
) -> None:
    process = _process(record, name)
    assert process["error"] == ""
    result = _agreement(scene, process)
    assert (result.wrong, result.missing, result.extra) == ((), (), ())
    assert len(result.right) == result.total == count
    outcome = predict(_in(scene, process), process["packages"])
    assert version_findings(outcome, scene.view) == []  # every process ran: no false positive


def test_the_versioned_symbol_check_has_real_needs_to_check(scene: Scene) -> None:
    needs = [
        (path, need.file, version.name, symbol)
        for path, facts in scene.view.elf_files()
        for need in facts.imports
        for version in need.versions
        for symbol in version.symbols
    ]
    assert len(needs) > 3000
    assert any(n[1] == "libnvJitLink.so.13" and n[0].endswith("libcusparse.so.12") for n in needs)


def test_the_judges_processes_find_no_unmet_symbol_and_no_false_shadow(scene: Scene) -> None:
    """What ``missing-symbol`` and ``shadowed-native`` judge with (the packages' processes,
    every unloaded wheel library by path, the rest by name): nothing on the real machine,
    whose processes ran."""
    sonames = sorted({copy.soname for copy in scene.family_copies()})
    outcomes = processes(scene, sonames)
    assert len(outcomes) > 3  # the three packages and more
    assert [f for o in outcomes for f in version_findings(o, scene.view)] == []
    graph = {load.path for o in outcomes for load in o.loaded("libcudnn_graph.so.9")}
    assert graph == {f"{WHEELS}/cudnn/lib/libcudnn_graph.so.9"}


def test_the_wheels_cudnn_subs_load_through_the_shims_runpath(
    record: dict[str, Any], scene: Scene
) -> None:
    """The old prediction said the system's 9.14 copies (a false "shadowed")."""
    outcome = predict(scene, ["torch"])
    (graph,) = outcome.loaded("libcudnn_graph.so.9")
    assert graph.path == f"{WHEELS}/cudnn/lib/libcudnn_graph.so.9"
    assert (graph.reason, graph.entry) == (Reason.RUNPATH, "$ORIGIN")
    assert graph.requirer == f"{WHEELS}/cudnn/lib/libcudnn.so.9"
    (cublas,) = outcome.loaded("libcublas.so.13")
    assert cublas.reason == Reason.PRELOAD and "_preload_cuda_deps" in cublas.step
    assert version_findings(outcome, scene.view) == []
    del record


def test_system_folders_first_on_ld_library_path_really_shadow_cudnn(
    record: dict[str, Any], scene: Scene
) -> None:
    """With /usr/lib/x86_64-linux-gnu first, the process maps the system's cuDNN 9.14
    sub-libraries beside the wheel's 9.19 shim, and the prediction says so, and why."""
    process = _process(record, "torch+path")
    system = "/usr/lib/x86_64-linux-gnu/libcudnn_graph.so.9.14.0"
    assert system in process["maps"]
    outcome = predict(_in(scene, process), ["torch"])
    (graph,) = outcome.loaded("libcudnn_graph.so.9")
    assert (graph.path, graph.reason, graph.entry) == (
        system, Reason.LD_LIBRARY_PATH, "/usr/lib/x86_64-linux-gnu")  # fmt: skip
    (shim,) = outcome.loaded("libcudnn.so.9")
    assert shim.path.startswith(WHEELS) and shim.reason == Reason.PRELOAD


def test_a_naive_model_disagrees_so_the_record_can_fail_it(
    record: dict[str, Any], scene: Scene
) -> None:
    """Opening cuDNN's sub-libraries from the interpreter (no shim RUNPATH) and skipping torch's
    preloads gives the wrong copies: the recording discriminates."""
    assert scene.python is not None
    torch = f"{scene.python.sites[0]}/torch"
    steps = [LoadStep(f"{torch}/lib/libtorch_global_deps.so", scene.python.ctypes, Reason.PRELOAD),
             LoadStep(f"{torch}/_C.cpython-312-x86_64-linux-gnu.so")]  # fmt: skip
    steps += [LoadStep(f"libcudnn_{s}.so.9") for s in ("graph", "heuristic", "engines_precompiled")]
    naive = run_process(scene.view, scene.settings, scene.python.executable, [steps])
    sonames = {p: f.soname for p, f in scene.view.files.items() if isinstance(f, ElfFacts)}
    result = agreement(naive, _process(record, "torch")["maps"], sonames)
    wrong = {soname for soname, _, _ in result.wrong}
    assert {"libcudnn_graph.so.9", "libcudnn_heuristic.so.9"} <= wrong
    assert all(mapped.startswith("/usr/lib/") is False for _, _, mapped in result.wrong)


def test_the_recorded_scene_round_trips(scene: Scene) -> None:
    assert scene_from_json(json.loads(json.dumps(scene.to_json()))) == scene


def test_the_catalog_knows_every_library_the_wheels_ship(scene: Scene) -> None:
    from audit.native.catalog import family_of

    shipped = [p for p in scene.view.files if p.startswith(WHEELS) and ".so" in p]
    assert len(shipped) > 40
    assert [p for p in shipped if family_of(p) is None] == []
    owners = {scene.owners[p].name for p in shipped if p in scene.owners}
    assert {"nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cublas", "nvidia-nvjitlink"} <= owners
    copies = {c.path: c for c in scene.copies("libcudnn_graph.so.9")}
    assert copies[f"{WHEELS}/cudnn/lib/libcudnn_graph.so.9"].version == "9.19.0.56"
    assert copies["/usr/lib/x86_64-linux-gnu/libcudnn_graph.so.9.14.0"].version == "9.14.0"


def test_the_stream_reader_agreed_on_the_real_libraries() -> None:
    """``h200-stream-check.json``: ``python -m audit.native.kit --check-stream --scenarios none``
    on the same machine with the final streaming reader (the first runs found cuDNN's and
    cuSPARSELt's patchelf layouts): every CUDA-family file read forward once, in at most
    64 MiB, gives the path reader's facts."""
    checked = json.loads((DATA.parent / "h200-stream-check.json").read_text())["stream_check"]
    assert len(checked) > 70
    big = [c for c in checked if c["size"] > 200 << 20]
    assert big and all(c["kept"] <= 64 << 20 for c in checked)
    assert [c["path"] for c in checked if not c["equal"]] == []
