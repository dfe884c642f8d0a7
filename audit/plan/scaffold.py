"""What ``layer-audit init`` writes into a repository: a plan of files, decided without writing.

The files come from the package's ``audit/skeleton/`` (``*.tmpl``, with ``@IMAGE@`` and
``@SPEC@`` filled in). Invariants: a file that exists is never planned for replacement unless
``force`` is set; ``.gitignore`` is only ever appended to (its missing entries), never
rewritten; planning the same inputs against the same tree twice gives the same plan, and a
second run after the first was written plans no change (idempotence).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from audit.core.errors import UsageError
from audit.plan.paths import PACKAGE_DIR

SKELETON = PACKAGE_DIR / "skeleton"
DEFAULT_IMAGE = "example"
DEFAULT_SPEC = "layer-audit"
GITIGNORE = ".gitignore"
# build output and sessions; lock's file lock beside the locks; atomic writes' temporaries a
# killed run left (the next run removes them: audit.engines.atomic)
GITIGNORE_ENTRIES = ("build/", ".nox/", "locks/*/.lock", ".*.audit-*.tmp")
IMAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# a pip requirement spec: no quotes, $ or backticks (it lands in YAML and Python strings)
SPEC_TEXT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._\-\[\],=<>!~@:/+]*$")


class Action(Enum):
    CREATE = "created"
    OVERWRITE = "overwritten"
    APPEND = "appended"
    SAME = "unchanged"
    KEEP = "kept (differs; --force replaces it)"


@dataclass(frozen=True)
class PlannedFile:
    """One file of the scaffold: where, its full new bytes, and what writing it would do."""

    relpath: str
    data: bytes
    action: Action

    @property
    def writes(self) -> bool:
        return self.action in (Action.CREATE, Action.OVERWRITE, Action.APPEND)


def skeleton(image: str, spec: str) -> dict[str, bytes]:
    """Every scaffold file but ``.gitignore``, by repository-relative path (sorted)."""
    check_inputs(image, spec)
    sources = {
        "noxfile.py": "noxfile.py.tmpl",
        f"images/{image}/image.toml": "image/image.toml.tmpl",
        f"images/{image}/requirements/v1.in": "image/requirements/v1.in.tmpl",
        ".github/workflows/dependency-gate.yml": "dependency-gate.yml.tmpl",
        ".pre-commit-config.yaml": "pre-commit-config.yaml.tmpl",
    }
    files = {}
    for relpath, name in sorted(sources.items()):
        text = (SKELETON / name).read_text(encoding="utf-8")
        files[relpath] = text.replace("@IMAGE@", image).replace("@SPEC@", spec).encode()
    return files


def check_inputs(image: str, spec: str) -> None:
    """Refuse an image name that is not a recipe folder name, or a spec that needs quoting."""
    if not IMAGE_NAME.match(image):
        raise UsageError(
            f"--image {image!r}: not a recipe name",
            "use lower case letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    if not SPEC_TEXT.match(spec):
        raise UsageError(
            f"--spec {spec!r}: not a plain requirement",
            "give a pip requirement such as layer-audit==0.1.0 (no quotes, $ or backticks)",
        )


def gitignore_after(current: bytes | None) -> bytes | None:
    """``.gitignore`` with the missing entries appended; None when none is missing."""
    text = (current or b"").decode("utf-8", errors="surrogateescape")
    present = {line.strip() for line in text.splitlines()}
    missing = [entry for entry in GITIGNORE_ENTRIES if entry not in present]
    if not missing:
        return None
    head = text if not text or text.endswith("\n") else text + "\n"
    block = "# layer-audit: rendered build contexts and nox environments\n" + "\n".join(missing)
    return (head + ("\n" if head else "") + block + "\n").encode("utf-8", "surrogateescape")


def plan_scaffold(
    read: Callable[[str], bytes | None], image: str, spec: str, *, force: bool
) -> list[PlannedFile]:
    """The scaffold against a tree that ``read`` shows (None: no such file), sorted by path."""
    plan = []
    for relpath, data in skeleton(image, spec).items():
        current = read(relpath)
        if current is None:
            action = Action.CREATE
        elif current == data:
            action = Action.SAME
        else:
            action = Action.OVERWRITE if force else Action.KEEP
        plan.append(PlannedFile(relpath, data, action))
    current = read(GITIGNORE)
    after = gitignore_after(current)
    if after is None:
        plan.append(PlannedFile(GITIGNORE, current or b"", Action.SAME))
    else:
        plan.append(
            PlannedFile(GITIGNORE, after, Action.CREATE if current is None else Action.APPEND)
        )
    return sorted(plan, key=lambda planned: planned.relpath)
