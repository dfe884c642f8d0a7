"""State you can see: no module keeps a cache or a setting between two commands.

What a command remembers lives in its run context (:mod:`audit.cli.context`: the project, the
memo its sources share, the engine, ``-v``); a module may hold constants only. Scanned with
``ast``: a cache decorator (``lru_cache``, ``functools.cache``), a ``global`` statement, a
module-level empty container (a table filled later), or the collector's threshold tuned.
``KNOWN`` lists what is left, each with why it is not gone yet; nothing may join it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from audit.cli.context import RunContext
from audit.project.memo import Memo

AUDIT = Path(__file__).resolve().parents[1] / "audit"
CACHES = ("lru_cache", "functools.cache", "cache")
CONTAINERS = ("OrderedDict", "dict", "set", "list", "defaultdict")
KNOWN = {
    # the index's kept connections and its TLS context: threaded through the uv resolver
    # (lock safety's files this round), next
    "index/http.py:_POOLS",
    "index/http.py:@_retries",
    "lock/resolvers/job.py:@_context",
    # the --docker-host choice, read deep in the build and lock engines (next round)
    "docker/endpoint.py:_chosen",
    # process-wide by nature: folders whose leftovers this process swept, live logs a signal
    # handler must close
    "host/atomic.py:_cleaned",
    "build/progress.py:_LIVE_LOGS",
}


def _empty(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set)):
        return not (getattr(value, "keys", None) or getattr(value, "elts", None))
    if isinstance(value, ast.Call) and not value.args:
        return getattr(value.func, "id", getattr(value.func, "attr", "")) in CONTAINERS
    return False


def module_state() -> set[str]:
    found = set()
    for path in sorted(AUDIT.rglob("*.py")):
        tree = ast.parse(path.read_text())
        where = str(path.relative_to(AUDIT))
        for statement in tree.body:
            if isinstance(statement, (ast.Assign, ast.AnnAssign)) and _empty(statement.value):
                first = (
                    statement.targets[0] if isinstance(statement, ast.Assign) else statement.target
                )
                found.add(f"{where}:{getattr(first, 'id', '?')}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                found.add(f"{where}:global {', '.join(node.names)}")
            if isinstance(node, ast.FunctionDef):
                decorators = [ast.unparse(d).split("(")[0] for d in node.decorator_list]
                if any(d.endswith(CACHES) for d in decorators if d != "cached_property"):
                    found.add(f"{where}:@{node.name}")
            if isinstance(node, ast.Attribute) and node.attr == "set_threshold":
                found.add(f"{where}:gc.set_threshold")
    return found


def test_no_module_keeps_state_between_commands() -> None:
    assert module_state() - KNOWN == set()


def test_the_scan_sees_module_state() -> None:
    assert module_state() >= KNOWN  # each known one is still there (else: drop it from KNOWN)


def test_two_run_contexts_share_nothing() -> None:
    one, two = RunContext(), RunContext()
    assert one.memo is not two.memo and isinstance(one.memo, Memo)
    assert one.project is None and not one.verbose
