"""The loader model in ``audit-deps --image`` (the layer walk) on images BuildKit builds from
the offline base, with ELF files gcc builds here (tests/support/native_images.py):

- the nvJitLink replay (pytorch#134929): the image fails at the ``ENV LD_LIBRARY_PATH`` layer
  that puts an older toolkit's nvJitLink before the RUNPATH of the wheel's cuSPARSE, with the
  loader's own words, why that copy loads and which copy would satisfy it; the same image
  without that ENV passes;
- a preloaded SONAME reused: with cupy installed before that ENV, cuda-pathfinder loads the
  wheel's nvJitLink by path first, and the image passes;
- a sibling ``dlopen``ed through ``$ORIGIN``: cuDNN's shim opens its graph library from the
  wheel's folder, not Debian's older copy that ``ldconfig`` put in the cache: nothing shadowed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.cli.main import main
from tests.support import native_images as images
from tests.support.fixtures import BaseImageFactory
from tests.support.native_build import needs_gcc
from tests.support.native_images import NODE, OLD, OLD_FILE, SITE, SYMBOL
from tests.support.walk_build import REPOSITORY, build, docker

pytestmark = [pytest.mark.docker, pytest.mark.slow, needs_gcc]

DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}} AS base
COPY site/ {SITE}/

FROM base AS toolkit
COPY toolkit/ {OLD}/

FROM toolkit AS fails
ENV LD_LIBRARY_PATH={OLD}

FROM toolkit AS cupy
COPY cupy/ {SITE}/
ENV LD_LIBRARY_PATH={OLD}

FROM base AS cudnn
COPY cudnn/ {SITE}/
COPY deb/ {images.MULTIARCH}/
RUN ldconfig
"""
TARGETS = ("toolkit", "fails", "cupy", "cudnn")


def _context(folder: Path, tmp: Path) -> Path:
    """The build context: the Dockerfile and each stage's tree of files."""
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(DOCKERFILE)
    images.write_tree(folder / "site", images.nvjitlink_wheels(tmp), strip=SITE)
    files, links = images.old_toolkit(tmp)
    images.write_tree(folder / "toolkit", files, links, strip=OLD)
    images.write_tree(folder / "cupy", images.cupy_module(tmp), strip=SITE)
    images.write_tree(folder / "cudnn", images.cudnn_wheel(tmp), strip=SITE)
    files, links = images.cudnn_deb(tmp)
    images.write_tree(folder / "deb", files, links, strip=images.MULTIARCH)
    return folder


@pytest.fixture(scope="module")
def built(
    base_image: BaseImageFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """One image per stage of :data:`DOCKERFILE`, built once for the module; removed after."""
    base = base_image("bookworm", "amd64")
    context = _context(
        tmp_path_factory.mktemp("native") / "context", tmp_path_factory.mktemp("elf")
    )
    tags = {target: f"{REPOSITORY}-native/{target}:1" for target in TARGETS}
    for target, tag in tags.items():
        build(context, tag, {"BASE": base}, extra=("--target", target))
    yield tags
    for tag in tags.values():
        docker("rmi", tag)


def audit_image(tag: str, capsys: pytest.CaptureFixture[str], fmt: str = "json") -> tuple[int, str]:
    code = main(["audit-deps", "--image", tag, "--format", fmt])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out


def test_the_env_layer_that_puts_an_older_nvjitlink_first_fails_with_the_explanation(
    built: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = audit_image(built["fails"], capsys)
    assert code == 1
    document = json.loads(out)
    failing = [s for s in document["sections"] if s["counts"]["error"]]
    assert [s["title"].rsplit(": ", 1)[1] for s in failing] == [f"ENV LD_LIBRARY_PATH={OLD}"]
    (finding,) = [f for f in failing[0]["findings"] if f["rule"] == "missing-symbol"]
    assert finding["package"] == "nvidia-cusparse-cu12"
    assert finding["symbol"] == {
        "requirer": f"{SITE}/{images.CUSPARSE}", "needed": NODE, "version": NODE,
        "symbol": SYMBOL, "loaded": f"{OLD}/{OLD_FILE}", "reason": "ld_library_path",
        "entry": OLD, "asked_by": f"{SITE}/{images.CUSPARSE}",
        "satisfying": [f"{SITE}/{images.NVJITLINK}"],
    }  # fmt: skip
    assert f"undefined symbol: {SYMBOL}, version {NODE}" in finding["message"]
    loads = {(x["soname"], x["path"], x["reason"]) for x in failing[0]["loads"]}
    assert (NODE, f"{OLD}/{OLD_FILE}", "ld_library_path") in loads
    code, table = audit_image(built["fails"], capsys, "terminal")
    assert code == 1 and "missing-symbol" in table and f"{NODE} loads {OLD}/{OLD_FILE}" in table


def test_without_that_env_the_image_passes(
    built: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = audit_image(built["toolkit"], capsys)
    assert code == 0, out
    loads = [x for s in json.loads(out)["sections"] for x in s.get("loads", ())]
    assert {(x["path"], x["reason"], x["entry"]) for x in loads if x["soname"] == NODE} >= {
        (f"{SITE}/{images.NVJITLINK}", "runpath", "$ORIGIN/../../nvjitlink/lib")
    }


def test_a_soname_cupy_preloads_is_reused_and_the_image_passes(
    built: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = audit_image(built["cupy"], capsys)
    assert code == 0, out
    code, sbom = audit_image(built["cupy"], capsys, "cyclonedx")
    wheel = f"{SITE}/{images.NVJITLINK}"
    components = json.loads(sbom)["components"]
    (component,) = [
        c for c in components if c["purl"] == f"pkg:generic/{NODE}@12.4.127?path={wheel}"
    ]
    loaded_by = [
        p["value"] for p in component["properties"] if p["name"] == "layer-audit:loaded-by"
    ]
    assert "cupy: cuda.pathfinder load_nvidia_dynamic_lib('nvJitLink') (preload)" in loaded_by


def test_a_sibling_dlopened_through_origin_is_the_wheels_copy(
    built: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = audit_image(built["cudnn"], capsys)
    assert code == 0, out
    document = json.loads(out)
    findings = [f["rule"] for s in document["sections"] for f in s["findings"]]
    assert "shadowed-native" not in findings
    graph = [x for s in document["sections"] for x in s.get("loads", ())
             if x["soname"] == images.GRAPH]  # fmt: skip
    assert [(x["path"], x["reason"], x["entry"]) for x in graph] == [
        (f"{SITE}/nvidia/cudnn/lib/{images.GRAPH}", "runpath", "$ORIGIN")
    ]
