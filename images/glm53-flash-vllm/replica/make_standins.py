"""Write the stand-ins' metadata of both GLM-5.3-Flash day-0 replicas (``--metadata-from``).

A replica reads each pin's published METADATA from the index; a pin no reachable index carries
gets the requirements of ``--metadata-from SNAPSHOT``. These are those snapshots, one sealed
document each (the format ``audit/inimage/snapshot.py`` prints), written from published facts:

- ``vllm 0.28.1rc1.dev0+pr53906.cu130.standin`` (vLLM route): the day-0 image's source build.
  Its requirements are ``vllm==0.28.0``'s as published on PyPI with ``flashinfer-python``
  0.6.16.post3 -> 0.6.17, what vLLM main pinned after v0.28.0 and the field report's image ran;
- ``flashinfer-cubin 0.6.17`` and ``flashinfer-jit-cache 0.6.17+cu130`` (both routes): on
  flashinfer.ai only; no requirements, as every flashinfer-cubin PyPI carries (up to 0.6.13);
- ``cuda-tile 1.6.0rc5`` (SGLang route: sglang 0.5.18 pins it): PyPI carries only its sdist,
  whose PKG-INFO (Metadata-Version 2.4, nothing dynamic but the license file) says what is below.

Run from the repository root with the project installed (reads vllm 0.28.0's METADATA from
PyPI, no payload): ``python images/glm53-flash-vllm/replica/make_standins.py``.
"""

from __future__ import annotations

from pathlib import Path

from audit.base.replica_plan import target_markers
from audit.history.snapshot import Distribution, Environment, dump_snapshot
from audit.index import wheel_metadata as wm

ROOT = Path(__file__).resolve().parents[3]
PYTHON = "3.11.2"  # the replica's interpreter (bookworm, arm64)
VLLM = "0.28.1rc1.dev0+pr53906.cu130.standin"
CUDA_TILE = (
    "typing-extensions",
    'cuda-toolkit[nvcc,nvvm,tileiras]<13.5,>=13.2; extra == "tileiras"',
)


def standin(name: str, version: str, requires: tuple[str, ...], python: str) -> Distribution:
    return Distribution(name, version, "", "layer-audit-standin", "", name, "dist-info",
                        requires, python)  # fmt: skip


def vllm_requirements() -> tuple[tuple[str, ...], str]:
    tags = wm.target_tags("linux/arm64", PYTHON, "2.36")
    published = wm.fetch_metadata("https://pypi.org/simple", "vllm", "0.28.0", tags=tags)
    old, new = "flashinfer-python==0.6.16.post3", "flashinfer-python==0.6.17"
    if old not in published.requires_dist:
        raise SystemExit(f"vllm 0.28.0 no longer requires {old}: re-check the sources")
    requires = tuple(new if text == old else text for text in published.requires_dist)
    return requires, published.requires_python


def write(path: Path, dists: list[Distribution]) -> None:
    env = Environment("/opt/venv/bin/python", PYTHON, target_markers("aarch64", PYTHON), (),
                      tuple(dists))  # fmt: skip
    path.write_bytes(dump_snapshot([env]))
    print(f"wrote {path.relative_to(ROOT)}")


def main() -> None:
    cubin = standin("flashinfer-cubin", "0.6.17", (), ">=3.8")
    jit = standin("flashinfer-jit-cache", "0.6.17+cu130", (), ">=3.9")
    requires, python = vllm_requirements()
    vllm = standin("vllm", VLLM, requires, python)
    write(ROOT / "images/glm53-flash-vllm/replica/vllm-glm53-day0.standins.json",
          [vllm, cubin, jit])  # fmt: skip
    tile = standin("cuda-tile", "1.6.0rc5", CUDA_TILE, "<3.15,>=3.10")
    write(ROOT / "images/glm53-flash-sglang/replica/sglang-glm53-day0.standins.json",
          [cubin, jit, tile])  # fmt: skip


if __name__ == "__main__":
    main()
