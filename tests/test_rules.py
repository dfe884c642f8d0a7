"""Rule names once (``audit/policy/rules.py``), and the recipe schema in step with the parser.

Every finding the package raises with a literal rule name uses a registered name; the lists
the verdict, the recipe parser, the gate and the reports use are read from the registry; and
``audit/schemas/image.schema.json`` names exactly the keys, actions, presets and waivable
rules the parser accepts.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeGuard

import pytest

from audit.policy import presets, rules
from audit.policy.model import ACTIONS
from audit.recipe import parse as recipe_parse
from audit.recipe import policy_parse
from audit.report.findings import RULE_ORDER

AUDIT = Path(__file__).resolve().parents[1] / "audit"
RULE_CONSTANT = re.compile(r"_(RULE|LOCK)$")


def schema(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (files("audit") / "schemas" / f"{name}.schema.json").read_text()
    )
    return data


def literal_rules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, name) of every literal rule: ``Finding("x", …)``, ``Finding(rule="x", …)``,
    ``_state("x", …)`` and module constants such as ``BASE_IMAGE_RULE = "x"``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("Finding", "_state"):
            given = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "rule")]
            yield from ((node.lineno, _text(a)) for a in given if _is_text(a))
        if isinstance(node, ast.Assign) and _is_text(node.value):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if any(RULE_CONSTANT.search(n) for n in names):
                yield node.lineno, _text(node.value)


def _is_text(node: ast.AST) -> TypeGuard[ast.Constant]:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _text(node: ast.Constant) -> str:
    return str(node.value)


def test_every_literal_rule_is_registered() -> None:
    found = {
        f"{path.relative_to(AUDIT)}:{line} {name}"
        for path in sorted(AUDIT.rglob("*.py"))
        for line, name in literal_rules(ast.parse(path.read_text()))
        if not rules.known(name)
    }
    assert found == set()


GATE_MODULES = ("compare.py", "change_view.py")  # the view names the waiver rule, once


def test_the_scan_sees_real_findings() -> None:
    """The scan is not vacuous: it finds the guard's and the gate's own rule names."""
    guard = ast.parse((AUDIT / "inimage" / "guard.py").read_text())
    gate = [ast.parse((AUDIT / "gate" / name).read_text()) for name in GATE_MODULES]
    assert "lock-mismatch" in {name for _, name in literal_rules(guard)}
    assert {"base-image", "waiver-added"} <= {n for tree in gate for _, n in literal_rules(tree)}
    assert not rules.known("no-such-rule")


def test_lists_come_from_the_registry() -> None:
    assert policy_parse.WAIVER_RULES == rules.WAIVABLE
    assert set(RULE_ORDER) <= set(rules.NAMES)
    assert set(rules.of_kind(rules.CHANGE)) == rules.CHANGE_RULES
    assert len(set(rules.NAMES)) == len(rules.NAMES)


def test_state_rules_are_waivable_only_when_named() -> None:
    assert set(rules.WAIVABLE) >= rules.STATE_RULES
    assert "added" not in rules.WAIVABLE


# --- image.schema.json against the parser -------------------------------------------------


def properties(node: dict[str, Any]) -> tuple[str, ...]:
    return tuple(node["properties"])


@pytest.mark.parametrize(
    ("where", "keys"),
    [
        ("top", recipe_parse.TOP_KEYS),
        ("image", recipe_parse.IMAGE_KEYS),
        ("stage", recipe_parse.STAGE_KEYS),
        ("policy", policy_parse.POLICY_KEYS),
        ("waiver", policy_parse.WAIVER_KEYS),
    ],
)
def test_schema_keys_match_the_parser(where: str, keys: tuple[str, ...]) -> None:
    image = schema("image")
    nodes = {
        "top": image,
        "image": image["properties"]["image"],
        "stage": image["properties"]["stage"]["items"],
        "policy": image["properties"]["policy"],
        "waiver": image["definitions"]["waiver"],
    }
    assert set(properties(nodes[where])) == set(keys)


def test_schema_layers_match_the_parser() -> None:
    layers = schema("image")["definitions"]["layer"]["oneOf"]
    kinds = {layer["required"][0]: set(properties(layer)) for layer in layers}
    options = recipe_parse.LAYER_OPTIONS
    assert kinds == {kind: {kind, *extra} for kind, extra in options.items()}


def test_schema_values_match_the_parser() -> None:
    image = schema("image")
    policy = image["properties"]["policy"]["properties"]
    assert image["definitions"]["waiver"]["properties"]["rule"]["enum"] == list(rules.WAIVABLE)
    assert image["definitions"]["action"]["enum"] == list(ACTIONS)
    assert policy["preset"]["enum"] == list(presets.NAMES)
    skip = {rule_id for name in presets.NAMES for rule_id in presets.rule_ids(name)}
    assert set(policy["preset_skip"]["items"]["enum"]) == skip
    for action, default in policy_parse.POLICY_ACTIONS.items():
        assert policy[action]["default"] == default
