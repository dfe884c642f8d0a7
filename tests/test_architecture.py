"""The package's plan, read from the source with ``ast``.

``audit/`` is sorted by subject: one package per part of the flow (recipe, render, lock,
base, build, history, policy, gate, report, dockerfile, docker, index, host, project, cli,
inimage, native), plus three loose modules every package shares (errors, redact, suggest). Inside
each package, its ``__init__`` docstring names the edge modules (``Edge: a, b``): they touch
the world (processes, Docker, network, writes); every other module is pure and imports no
edge module of any package. The policy, the history model and the lock format are vendored
into images for the build guard: they import only each other, the standard library and
``packaging``, and parse as Python 3.9. Only ``cli`` (and ``python -m audit``) imports
``cli``. No module imports itself back through a cycle.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.render.guard import VENDORED

PACKAGE = Path(__file__).resolve().parent.parent / "audit"
# _version.py: written by the build from the git tag (hatch-vcs), never committed
LOOSE = {"__init__.py", "__main__.py", "_version.py", "errors.py", "redact.py", "suggest.py"}
SUBJECTS = (
    "base", "build", "cli", "docker", "dockerfile", "gate", "history", "host", "index",
    "inimage", "lock", "native", "policy", "project", "recipe", "render", "report",
)  # fmt: skip
# What a pure module never imports: it decides; the edge runs programs, talks to Docker or
# the network, takes locks.
IMPURE_LIBRARIES = {"docker", "subprocess", "urllib3", "requests", "socket", "http", "filelock"}
# Host modules that import an in-image script for the protocol they share with it.
INIMAGE_USERS = {
    "audit.lock.resolvers.piptools": {"audit.inimage.lock_driver"},
    # the layer walk reads metadata, package databases and the ld.so cache with the in-image
    # snapshot's own parsers: both producers agree byte for byte
    "audit.history.walk.layer": {"audit.inimage.snapshot"},
    "audit.history.walk.fold": {"audit.inimage.snapshot"},
}
_EDGE_LINE = re.compile(r"^Edge: (.*)$", re.MULTILINE)


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST) -> Iterator[tuple[str, list[str]]]:
    """(module, names) of every absolute import, at any depth (inside functions too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [alias.name for alias in node.names]


def imported_modules(path: Path, known: set[str]) -> Iterator[str]:
    """Every module of ours a file imports (``from audit.x import y`` may name module y)."""
    for module, names in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        if module in known:
            submodules = [f"{module}.{name}" for name in names if f"{module}.{name}" in known]
            yield from submodules or [module]


def third_party(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {module.split(".")[0] for module, _ in _imports(tree)} - {"audit"}


def known_modules(package: Path = PACKAGE) -> set[str]:
    return {module_name(p, package) for p in package.rglob("*.py")}


def edge_modules(package: Path = PACKAGE) -> set[str]:
    """Every module a package's docstring names on its ``Edge:`` line, and their submodules."""
    edges: set[str] = set()
    for init in sorted(package.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        match = _EDGE_LINE.search(doc)
        names = [] if not match or match.group(1) == "(none)" else match.group(1).split(", ")
        prefix = f"{package.name}.{init.parent.name}"
        edges |= {prefix} if names == ["(all)"] else {f"{prefix}.{name}" for name in names}
    return edges | {f"{package.name}.__main__"}


def is_edge(module: str, edges: set[str]) -> bool:
    return any(module == edge or module.startswith(edge + ".") for edge in edges)


def violations(package: Path = PACKAGE) -> list[str]:
    """``importer -> imported`` for every import the plan forbids."""
    known, edges = known_modules(package), edge_modules(package)
    found = []
    for path in sorted(package.rglob("*.py")):
        importer = module_name(path, package)
        for imported in imported_modules(path, known):
            if imported.startswith("audit.cli") and not importer.startswith(
                ("audit.cli", "audit.__main__")
            ):
                found.append(f"{importer} -> {imported} (only the command line imports cli)")
            elif (
                not is_edge(importer, edges)
                and is_edge(imported, edges)
                and imported not in INIMAGE_USERS.get(importer, set())  # its pure parsers
            ):
                found.append(f"{importer} -> {imported} (a pure module imports an edge module)")
            elif (
                imported.startswith("audit.inimage")
                and not importer.startswith("audit.inimage")
                and imported not in INIMAGE_USERS.get(importer, set())
            ):
                found.append(f"{importer} -> {imported} (an in-image script)")
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


def vendored_modules() -> set[str]:
    return {"audit." + name.replace("/", ".") for name in VENDORED}


def test_every_module_lives_in_a_subject_package() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in LOOSE)
    assert loose == []
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert packages == sorted(SUBJECTS)
    for name in SUBJECTS:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc and _EDGE_LINE.search(doc), f"audit/{name}/__init__.py: say what lives there"


def test_every_edge_line_names_real_modules() -> None:
    known = known_modules()
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        match = _EDGE_LINE.search(doc)
        assert match, init
        if match.group(1) not in ("(none)", "(all)"):
            for name in match.group(1).split(", "):
                assert f"audit.{init.parent.name}.{name}" in known, f"{init}: {name}"


def test_imports_follow_the_plan() -> None:
    assert violations() == []


def test_pure_modules_import_no_impure_library() -> None:
    edges = edge_modules()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        if not is_edge(module, edges):
            found += [f"{module} imports {lib}" for lib in third_party(path) & IMPURE_LIBRARIES]
    assert found == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_contract_catches_a_violation(tmp_path: Path) -> None:
    package = tmp_path / "audit"
    (package / "lock").mkdir(parents=True)
    (package / "gate").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "lock" / "__init__.py").write_text('"""Locks.\n\nEdge: run\n"""\n')
    (package / "gate" / "__init__.py").write_text('"""The gate.\n\nEdge: (none)\n"""\n')
    (package / "lock" / "run.py").write_text("X = 1\n")
    (package / "lock" / "plan.py").write_text("X = 2\n")
    (package / "gate" / "compare.py").write_text(
        "from audit.lock import plan\n\ndef f():\n    from audit.lock.run import X\n"
    )
    assert violations(package) == [
        "audit.gate.compare -> audit.lock.run (a pure module imports an edge module)"
    ]


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_vendored_modules_import_only_each_other_stdlib_and_packaging() -> None:
    vendored, known = vendored_modules(), known_modules()
    for module in sorted(vendored):
        path = PACKAGE.parent / (module.replace(".", "/") + ".py")
        ours = set(imported_modules(path, known))
        assert ours <= vendored, f"{module} imports {sorted(ours - vendored)}"
        assert {lib for lib in third_party(path) if not _is_stdlib(lib)} <= {"packaging"}


@pytest.mark.parametrize("name", [*sorted(VENDORED), "inimage/guard", "inimage/snapshot"])
def test_vendored_code_parses_as_python_3_9(name: str) -> None:
    path = PACKAGE / f"{name}.py"
    ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=(3, 9))


def test_in_image_scripts_import_only_vendored_modules() -> None:
    known, vendored = known_modules(), vendored_modules()
    for path in sorted((PACKAGE / "inimage").glob("*.py")):
        assert set(imported_modules(path, known)) <= vendored, path.name
        assert {lib for lib in third_party(path) if not _is_stdlib(lib)} <= {"packaging"}


def _is_stdlib(name: str) -> bool:
    return name in sys.stdlib_module_names or name.startswith("_sha") or name == "__future__"
