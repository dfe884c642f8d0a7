"""The audit trail of a built image, extracted into ``build/reports/<image>/<stage>/``.

The guard leaves ``<slug>.snapshot.json`` and ``<slug>.findings.json`` per guarded layer under
``/var/lib/layer-audit/trail`` in the image. This copies them out through the docker SDK
(``get_archive`` of a created, never started container: works for foreign architectures too)
into ``trail/`` and renders every layer's findings as ``report.json`` and ``report.md``.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from audit.core.errors import EnvironmentProblem
from audit.core.findings import Finding
from audit.engines import atomic, docker_host
from audit.plan.build import TRAIL_DIR, StageBuild
from audit.plan.paths import reports_dir
from audit.plan.recipe import Recipe
from audit.plan.report import Report, Section, report_json, report_markdown

FINDINGS_SUFFIX = ".findings.json"


def _read_archive(image: str) -> dict[str, bytes]:
    """File name -> bytes of every regular file in the image's trail folder."""
    import docker

    daemon = docker_host.daemon()
    try:
        container = daemon.containers.create(image, command=["true"], entrypoint=[])
    except docker.errors.APIError as exc:
        raise EnvironmentProblem(
            f"cannot read the trail of {image}: {exc}",
            "check that the Docker daemon is up (docker info) and the image exists (docker images)",
        ) from exc
    try:
        chunks, _ = container.get_archive(TRAIL_DIR)
        data = b"".join(chunks)
    except docker.errors.NotFound:
        return {}
    finally:
        container.remove(force=True)
    return _members(data)


def _members(data: bytes) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is not None:
                files[PurePosixPath(member.name).name] = handle.read()
    return files


def _labels(recipe: Recipe, stage: str) -> dict[str, str]:
    return {step.slug: step.label for step in recipe.steps(until=stage)}


def trail_report(recipe: Recipe, stage: str, files: dict[str, bytes]) -> Report:
    """One section per guarded layer up to ``stage``, in build order."""
    labels = _labels(recipe, stage)
    sections = []
    for slug in [s for s in labels if f"{s}{FINDINGS_SUFFIX}" in files]:
        document: dict[str, Any] = json.loads(files[f"{slug}{FINDINGS_SUFFIX}"])
        findings = tuple(Finding.from_json(item) for item in document["findings"])
        title = f"{labels[slug]} (compared with {document.get('compared_with', '?')})"
        sections.append(Section(title, findings))
    return Report(f"{recipe.name} {stage}: audit trail", tuple(sections))


def read_trail(build: StageBuild) -> dict[str, bytes]:
    """The trail files of ``build``'s image (the target's holds every earlier stage's too)."""
    return _read_archive(build.temp_ref)


def write_trail_reports(
    root: Path, recipe: Recipe, stage: str, files: dict[str, bytes]
) -> tuple[Path, Report]:
    """Copy ``stage``'s part of the trail into its reports folder and render it there."""
    folder = reports_dir(root, recipe.name, stage)
    slugs = {step.slug for step in recipe.steps(until=stage)}
    for name, data in sorted(files.items()):
        if name.split(".", 1)[0] in slugs:
            atomic.write_bytes(folder / "trail" / name, data)
    report = trail_report(recipe, stage, files)
    atomic.write_text(folder / "report.json", json.dumps(report_json(report), indent=1) + "\n")
    atomic.write_text(folder / "report.md", report_markdown(report))
    return folder, report
