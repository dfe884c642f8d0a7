"""The four wings and their import rule, read from the source with ``ast``.

core imports nothing of ours; plan imports core only; engines import core and plan; cli may
import everything; the in-image scripts import only the core (through the vendored copy). No
module imports itself back through a cycle. ``core/`` and ``inimage/`` parse as Python 3.9.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "audit"
WINGS = ("core", "plan", "engines", "cli", "inimage")
ALLOWED = {
    "core": {"core"},
    "plan": {"core", "plan"},
    "engines": {"core", "plan", "engines"},
    "cli": {"core", "plan", "engines", "cli"},
    "inimage": {"core"},
    "": {"core", "plan", "engines", "cli"},  # audit/__main__.py, audit/__init__.py
}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> Iterator[str]:
    """Every module of ours a file imports (``from audit.x import y`` may name module y)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module in known and node.level == 0:
            submodules = [f"{node.module}.{a.name}" for a in node.names]
            submodules = [name for name in submodules if name in known]
            yield from submodules or [node.module]


def wing_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in WINGS else ""


def known_modules(package: Path) -> set[str]:
    return {module_name(p, package) for p in package.rglob("*.py")}


def violations(package: Path = PACKAGE) -> list[str]:
    """``importer -> imported`` for every import that points up the wing order."""
    known = known_modules(package)
    found = []
    for path in sorted(package.rglob("*.py")):
        importer = module_name(path, package)
        allowed = ALLOWED[wing_of(importer)]
        for imported in imported_modules(path, known):
            if wing_of(imported) not in allowed | {""}:
                found.append(f"{importer} -> {imported}")
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = known_modules(package)
    return {
        module_name(p, package): set(imported_modules(p, known)) - {module_name(p, package)}
        for p in sorted(package.rglob("*.py"))
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_lives_in_a_wing() -> None:
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert loose == []
    for wing in WINGS[:4]:
        doc = ast.get_docstring(ast.parse((PACKAGE / wing / "__init__.py").read_text()))
        assert doc and "import" in doc, f"audit/{wing}/__init__.py must state its import rule"


def test_imports_point_down_the_wings() -> None:
    assert violations() == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_contract_catches_a_violation(tmp_path: Path) -> None:
    package = tmp_path / "audit"
    for wing in ("core", "plan", "engines"):
        (package / wing).mkdir(parents=True)
        (package / wing / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "engines" / "docker.py").write_text("X = 1\n")
    (package / "core" / "rules.py").write_text("from audit.plan import lock\n")
    (package / "plan" / "lock.py").write_text("from audit.engines.docker import X\n")
    assert violations(package) == [
        "audit.policy.rules -> audit.lock.plan",
        "audit.lock.plan -> audit.engines.docker",
    ]


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("wing", ["core", "inimage"])
def test_vendored_code_parses_as_python_3_9(wing: str) -> None:
    for path in sorted((PACKAGE / wing).glob("*.py")):
        ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=(3, 9))


def test_core_imports_only_stdlib_and_packaging() -> None:
    allowed_third_party = {"packaging"}
    for path in sorted((PACKAGE / "core").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top == "audit" or top in allowed_third_party or _is_stdlib(top), (
                    f"{path.name} imports {name}"
                )


def _is_stdlib(name: str) -> bool:
    import sys

    return name in sys.stdlib_module_names or name.startswith("_sha") or name == "__future__"
