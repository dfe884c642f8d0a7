"""A layer ``lock`` refused, kept as typed findings beside the lock it did not write.

When a layer cannot be locked without breaking the policy, ``lock`` writes no lock for it but
``locks/<image>/<slug>.refused.json``: the layer, the digest of the inputs it was resolved
from, and every failing finding (rule, package, versions, askers) as the judge made it. Committed
with the rest, it lets the gate and audit-deps show the violation behind a missing or stale
lock instead of "missing lock" alone; the next run that locks the layer removes it. A record
whose inputs are not the layer's inputs now says nothing: it was about other requirements.

Pure: the record's path, text and parse, and the findings it holds for a source.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from audit.errors import LockError
from audit.lock.files import digest_inputs
from audit.lock.plan import LockState
from audit.policy.findings import Finding
from audit.project.sources import Source
from audit.recipe.model import Recipe, Step

SCHEMA = "layer-audit.refusal/1"
SUFFIX = ".refused.json"


@dataclass(frozen=True)
class Refusal:
    """What ``lock`` refused: the layer's label, its inputs' digest and the failing findings."""

    layer: str
    inputs: str
    findings: tuple[Finding, ...]


def refusal_relpath(recipe: Recipe, step: Step) -> str:
    """``locks/<image>/<slug>.refused.json``, beside the lock the layer would have."""
    return f"locks/{recipe.name}/{step.slug}{SUFFIX}"


def render_refusal(refusal: Refusal) -> str:
    """The record as JSON text (sorted keys: the same refusal writes the same bytes)."""
    document = {
        "schema": SCHEMA,
        "layer": refusal.layer,
        "inputs": refusal.inputs,
        "findings": [finding.to_json() for finding in refusal.findings],
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def parse_refusal(data: bytes, where: str) -> Refusal:
    """The record ``render_refusal`` wrote; LockError (exit 2) for anything else."""
    try:
        document: Any = json.loads(data)
        if document.get("schema") != SCHEMA:
            raise ValueError(f"schema {document.get('schema')!r}, expected {SCHEMA}")
        findings = tuple(Finding.from_json(item) for item in document["findings"])
        return Refusal(str(document["layer"]), str(document["inputs"]), findings)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise LockError(
            f"{where}: not a refusal record ({exc})",
            "delete it: the next lock of that layer writes a new one if it refuses again",
        ) from exc


def refused_findings(source: Source, recipe: Recipe, state: LockState) -> tuple[Finding, ...]:
    """The findings behind ``state``'s missing or stale lock when ``lock`` refused the layer
    with exactly its inputs at ``source``, located at the layer; () otherwise."""
    relpath = refusal_relpath(recipe, state.step)
    if state.status == "fresh" or not state.inputs or not source.exists(relpath):
        return ()
    refusal = parse_refusal(source.read_bytes(relpath), source.describe(relpath))
    if refusal.inputs != digest_inputs(state.inputs):
        return ()
    step = state.step
    return tuple(f.located(recipe.name, step.stage.name, step.position) for f in refusal.findings)
