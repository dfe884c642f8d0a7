"""The FlashInfer 0.6.18 nightly, as stand-ins: a static package index of metadata-only wheels.

The field report (seed/forum-thread-glm53-flash-dgx-spark.txt) installs the FlashInfer 0.6.18
nightly from https://flashinfer.ai/whl/nightly/, which this project's machines cannot reach.
Both GLM-5.3-Flash routes (images/glm53-flash-vllm, images/glm53-flash-sglang) name this folder,
served on 127.0.0.1, as their ``flashinfer-nightly`` index, so that their nightly layer locks,
audits and dry-builds here. Every version carries the local label ``standin``: no report, lock
or image can mistake one of these for the real wheel, which holds code; these hold only
METADATA, WHEEL and RECORD.

What each METADATA says, and where it comes from:

- the version: ``0.6.18.dev20260819``, the nightly ``nightly-v0.6.18-20260819`` of
  flashinfer-ai/flashinfer (public builds of the week before the model's day-0 locked
  ``flashinfer_python-0.6.18.dev20260819``, ``flashinfer_cubin-0.6.18.dev20260819`` and
  ``flashinfer_jit_cache-0.6.18.dev20260819+cu130``);
- flashinfer-python's requirements: those of ``flashinfer-python 0.6.18rc10`` as published on
  PyPI (2026-08-28, the nearest published build of 0.6.18), with what the field report says of
  the nightly: it pulls ``nvidia-nccl-cu13`` down to 2.29.7 (``Requires-Dist:
  nvidia-nccl-cu13==2.29.7``) and moves ``nvidia-cutlass-dsl`` (``>=4.7.0``, the release the
  builds that locked this nightly installed next to it, instead of 0.6.18rc10's ``>=4.6.2a0``);
- flashinfer-cubin: no requirements, as every published flashinfer-cubin (0.6.13 is the last
  one PyPI carries); flashinfer-jit-cache: no requirements (PyPI carries none to copy; the
  nightly index is the only source).

Run ``python3 make.py`` to write ``files/`` and ``simple/`` again (byte-identical: stored zip
members, fixed timestamps); ``python3 -m http.server 8647 --bind 127.0.0.1 --directory .``
serves it at the recipes' ``http://127.0.0.1:8647/simple/``. Standard library only.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
NIGHTLY = "0.6.18.dev20260819"
SUMMARY = (
    "layer-audit stand-in for the FlashInfer 0.6.18 nightly ({what}): metadata only, no code; "
    "see images/glm53-flash-vllm/replica/flashinfer-nightly/make.py"
)
FIELD = (
    "What the field report says of this nightly, stated as requirements: it pulls "
    "nvidia-nccl-cu13 down to 2.29.7 (NCCL 'internal error' on the fabric) and moves "
    "nvidia-cutlass-dsl (CuTeDSL compiler ICE)."
)
# flashinfer-python 0.6.18rc10 as published (PyPI), with the two field-report edits marked.
PYTHON_REQUIRES = (
    "apache-tvm-ffi!=0.1.8,!=0.1.8.post0,<0.2,>=0.1.6",
    "click",
    "cuda-python>=12.0",
    "cuda-tile>=1.4.0",
    "einops",
    "nccl4py>=0.3.1",
    "ninja",
    "numpy",
    "nvidia-cudnn-frontend>=1.25.0",
    "nvidia-cutlass-dsl>=4.7.0",  # field report: moves cutlass-dsl (0.6.18rc10: >=4.6.2a0)
    "nvidia-ml-py",
    "nvidia-nccl-cu13==2.29.7",  # field report: downgrades NCCL to 2.29.7
    "packaging>=24.2",
    "requests",
    "tabulate",
    "torch",
    "tqdm",
    'nvidia-cutlass-dsl>=4.7.0; extra == "cu12"',
    'nvidia-cutlass-dsl[cu13]>=4.7.0; extra == "cu13"',
)


@dataclass(frozen=True)
class Standin:
    """One wheel of the index: what its METADATA says and which platform it is for."""

    project: str
    version: str
    tag: str
    python: str
    what: str
    requires: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()


WHEELS = (
    Standin("flashinfer-python", f"{NIGHTLY}+standin", "py3-none-any", "<4.0,>=3.10",
            "the Python package", PYTHON_REQUIRES, ("cu12", "cu13", "nvep")),
    Standin("flashinfer-cubin", f"{NIGHTLY}+standin", "py3-none-any", ">=3.8",
            "pre-compiled cubins"),
    Standin("flashinfer-jit-cache", f"{NIGHTLY}+cu130.standin",
            "cp39-abi3-manylinux_2_28_aarch64", ">=3.9", "the CUDA 13.0 JIT cache"),
)  # fmt: skip
EPOCH = (1980, 1, 1, 0, 0, 0)


def dist_name(project: str) -> str:
    return project.replace("-", "_")


def metadata(wheel: Standin) -> bytes:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {wheel.project}",
        f"Version: {wheel.version}",
        f"Summary: {SUMMARY.format(what=wheel.what)}",
        f"Requires-Python: {wheel.python}",
    ]
    lines += [f"Provides-Extra: {extra}" for extra in wheel.extras]
    lines += [f"Requires-Dist: {requirement}" for requirement in wheel.requires]
    body = FIELD if wheel.requires else "No requirements are known for it."
    return ("\n".join(lines) + "\n\n" + body + "\n").encode()


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest},{len(data)}"


def wheel_file(wheel: Standin, meta: bytes) -> tuple[str, bytes]:
    """The wheel's file name and bytes: METADATA, WHEEL, RECORD, stored, fixed timestamps."""
    stem = f"{dist_name(wheel.project)}-{wheel.version}"
    info = f"{stem}.dist-info"
    purelib = "true" if wheel.tag.endswith("-any") else "false"
    wheel_text = (
        "Wheel-Version: 1.0\nGenerator: layer-audit stand-in\n"
        f"Root-Is-Purelib: {purelib}\nTag: {wheel.tag}\n"
    )
    members = {f"{info}/METADATA": meta, f"{info}/WHEEL": wheel_text.encode()}
    record = "".join(f"{path},{record_hash(data)}\n" for path, data in sorted(members.items()))
    members[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    return f"{stem}-{wheel.tag}.whl", _zip(members)


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(members):
            item = zipfile.ZipInfo(path, EPOCH)
            item.external_attr = 0o644 << 16
            archive.writestr(item, members[path])
    return buffer.getvalue()


def page(title: str, links: list[str]) -> str:
    body = "\n".join(links)
    return (f"<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" "
            f"content=\"1.0\"><title>{html.escape(title)}</title></head>\n<body>\n{body}\n"
            "</body></html>\n")  # fmt: skip


def build() -> dict[str, bytes]:
    """Every file of the index, by path relative to this folder."""
    files: dict[str, bytes] = {}
    projects = []
    for wheel in WHEELS:
        meta = metadata(wheel)
        name, data = wheel_file(wheel, meta)
        files[f"files/{name}"] = data
        files[f"files/{name}.metadata"] = meta
        sha = hashlib.sha256(data).hexdigest()
        href = f"../../files/{name.replace('+', '%2B')}#sha256={sha}"
        core = hashlib.sha256(meta).hexdigest()
        link = (f'<a href="{href}" data-requires-python="{html.escape(wheel.python)}" '
                f'data-dist-info-metadata="sha256={core}" data-core-metadata="sha256={core}">'
                f"{html.escape(name)}</a><br/>")  # fmt: skip
        page_text = page(f"Links for {wheel.project}", [link])
        files[f"simple/{wheel.project}/index.html"] = page_text.encode()
        projects.append(f'<a href="{wheel.project}/">{wheel.project}</a><br/>')
    files["simple/index.html"] = page("stand-in index: FlashInfer nightly", projects).encode()
    return files


def main() -> int:
    for relpath, data in build().items():
        path = HERE / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            print(f"wrote {relpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
