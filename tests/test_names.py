"""One name per concept: no two public classes of ``audit/`` share a name.

Two classes named ``Pin`` (a lock's line and a replica list's entry) read as one concept and
were not. A ``typing.Protocol`` that describes another module's class of the same name (to
break an import cycle) is that class, not a second concept, and is allowed.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

AUDIT = Path(__file__).resolve().parents[1] / "audit"


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(getattr(base, "id", getattr(base, "attr", "")) == "Protocol" for base in node.bases)


def public_classes() -> dict[str, list[str]]:
    """Class name -> the modules defining it (top-level, public, not a Protocol)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(AUDIT.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            if not _is_protocol(node):
                found[node.name].append(str(path.relative_to(AUDIT)))
    return found


def test_no_two_public_classes_share_a_name() -> None:
    twice = {name: where for name, where in public_classes().items() if len(where) > 1}
    assert twice == {}


def test_the_scan_sees_classes() -> None:
    classes = public_classes()
    assert classes["Pin"] == ["lock/format.py"]
    assert classes["ListedDistribution"] == ["base/replica_plan.py"]
