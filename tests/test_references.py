"""What the code and the documents point a reader at exists: module paths, and no brief that the
repository does not carry (a DESIGN.md was cited for years; the README holds the targets)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READ = ("README.md", "CONTRIBUTING.md", "noxfile.py", "audit", "benchmarks", "docs", "tests")
SUFFIXES = {".py", ".md", ".j2", ".toml", ".tmpl", ".json"}
MODULE_PATH = re.compile(r"(?<![\w/.-])audit/[A-Za-z0-9_/]+\.py\b")


def project_texts() -> dict[str, str]:
    """Project-relative path -> text of every document and source file a reader opens."""
    found: dict[str, str] = {}
    for name in READ:
        top = ROOT / name
        paths = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file()]
        for path in paths:
            if path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                found[path.relative_to(ROOT).as_posix()] = path.read_text(errors="replace")
    return found


def test_every_module_path_named_exists() -> None:
    missing = {
        f"{where}: {named}"
        for where, text in project_texts().items()
        for named in MODULE_PATH.findall(text)
        if not (ROOT / named).is_file()
    }
    assert not missing, sorted(missing)


def test_no_document_cites_a_brief_the_repository_does_not_carry() -> None:
    this = Path(__file__).relative_to(ROOT).as_posix()
    citing = [where for where, text in project_texts().items() if "DESIGN.md" in text]
    assert [where for where in citing if where != this] == []


def test_tests_share_helpers_only_through_tests_support() -> None:
    """A test module imports nothing from another test module (collection order, fixtures
    instantiated twice, a helper edited for one test breaking another): shared helpers live in
    ``tests/support/``."""
    crossing = [
        f"{path.name}: {line.strip()}"
        for path in sorted((ROOT / "tests").glob("*.py"))
        for line in path.read_text().splitlines()
        if re.match(r"\s*(from tests\.test_|import tests\.test_|from tests import test_)", line)
    ]
    assert crossing == []
