"""The audit trail of a built image, extracted into ``build/reports/<image>/<stage>/``.

The guard leaves ``<slug>.snapshot.json`` and ``<slug>.findings.json`` per guarded layer under
``/var/lib/layer-audit/trail`` in the image. This copies them out of a created, never
started :class:`audit.docker.container.Container` (works for foreign architectures too) into
``trail/`` and renders every layer's findings as ``report.json`` and ``report.md``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from audit.policy.findings import Finding
from audit.host import atomic
from audit.docker.container import Container
from audit.build.plan import TRAIL_DIR, StageBuild
from audit.project.paths import reports_dir
from audit.recipe.model import Recipe
from audit.report.findings import Report, Section, report_json, report_markdown

FINDINGS_SUFFIX = ".findings.json"


def trail_report(
    recipe: Recipe, stage: str, files: dict[str, bytes], base: Finding | None = None
) -> Report:
    """One section per guarded layer up to ``stage``, in build order; each finding located
    (image, stage, layer) by the layer whose trail file it came from. ``base``: where the base
    record came from (a replica and its stand-ins), first, as every report says it."""
    steps = {step.slug: step for step in recipe.steps(until=stage)}
    sections = [Section(f"{recipe.name} base image", (base,))] if base else []
    for slug in [s for s in steps if f"{s}{FINDINGS_SUFFIX}" in files]:
        document: dict[str, Any] = json.loads(files[f"{slug}{FINDINGS_SUFFIX}"])
        step = steps[slug]
        findings = tuple(
            Finding.from_json(item).located(recipe.name, step.stage.name, step.position)
            for item in document["findings"]
        )
        title = f"{step.label} (compared with {document.get('compared_with', '?')})"
        sections.append(Section(title, findings))
    return Report(f"{recipe.name} {stage}: audit trail", tuple(sections))


def read_trail(build: StageBuild) -> dict[str, bytes]:
    """The trail files of ``build``'s image (the target's holds every earlier stage's too).

    Copied out of a created, never started container: a foreign architecture needs no qemu.
    """
    with Container(build.temp_ref) as container:
        return container.files(TRAIL_DIR)


def write_trail_reports(
    root: Path, recipe: Recipe, stage: str, files: dict[str, bytes], base: Finding | None = None
) -> tuple[Path, Report]:
    """Copy ``stage``'s part of the trail into its reports folder and render it there."""
    folder = reports_dir(root, recipe.name, stage)
    slugs = {step.slug for step in recipe.steps(until=stage)}
    for name, data in sorted(files.items()):
        if name.split(".", 1)[0] in slugs:
            atomic.write_bytes(folder / "trail" / name, data)
    report = trail_report(recipe, stage, files, base)
    atomic.write_text(folder / "report.json", json.dumps(report_json(report), indent=1) + "\n")
    atomic.write_text(folder / "report.md", report_markdown(report))
    return folder, report
