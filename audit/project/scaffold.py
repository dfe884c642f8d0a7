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

from audit.errors import UsageError
from audit.lock.files import render_lock
from audit.lock.plan import layer_inputs, pip_steps, read_base_digest, resolver_label
from audit.project.frontdoor import CONSOLE_SCRIPT
from audit.project.memo import Memo
from audit.project.paths import PACKAGE_DIR
from audit.recipe.parse import load_recipe

SKELETON = PACKAGE_DIR / "skeleton"
DEFAULT_IMAGE = "example"
GITIGNORE = ".gitignore"
# build output and sessions; lock's file lock beside the locks; atomic writes' temporaries a
# killed run left (the next run removes them: audit.host.atomic)
GITIGNORE_ENTRIES = ("build/", ".nox/", "locks/*/.lock", ".*.audit-*.tmp")
IMAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# a pip requirement spec: no quotes, $ or backticks (it lands in YAML and Python strings)
SPEC_TEXT = re.compile(r"^[A-Za-z0-9./][A-Za-z0-9 ._\-\[\],=<>!~@:/+]*$")


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
        ".github/workflows/dependency-gate-comment.yml": "dependency-gate-comment.yml.tmpl",
        ".pre-commit-config.yaml": "pre-commit-config.yaml.tmpl",
    }
    files = {}
    for relpath, name in sorted(sources.items()):
        text = (SKELETON / name).read_text(encoding="utf-8")
        files[relpath] = text.replace("@IMAGE@", image).replace("@SPEC@", spec).encode()
    files |= example_record(files, image)
    return dict(sorted(files.items()))


def example_record(files: dict[str, bytes], image: str) -> dict[str, bytes]:
    """The example's ``locks/<image>/``: the shipped base snapshot and its one layer's lock,
    whose inputs are those of the files just planned (so ``lock --check`` finds it fresh and
    the gate audits the example from the first pull request)."""
    base = f"locks/{image}/base.json"
    source = _Files({**files, base: (SKELETON / "image/base.json.tmpl").read_bytes()})
    recipe = load_recipe(source, image)
    found = read_base_digest(source, recipe)
    assert found is not None  # just added
    [step] = pip_steps(recipe)  # the skeleton has one pip layer: its body ships beside it
    inputs = layer_inputs(source, recipe, step, found[1], {})
    body = (SKELETON / "image/v1.lock-body.txt.tmpl").read_text(encoding="utf-8")
    lock = render_lock(recipe.name, step, resolver_label(recipe), inputs.digests, body)
    return {base: source.read_bytes(base), inputs.relpath: lock.encode()}


class _Files:
    """A :class:`audit.project.sources.Source` over planned files (nothing written yet)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.memo = Memo()
        self.front = CONSOLE_SCRIPT
        self.files = files

    def read_bytes(self, relpath: str) -> bytes:
        if relpath not in self.files:
            raise FileNotFoundError(2, "not in the scaffold", relpath)
        return self.files[relpath]

    def exists(self, relpath: str) -> bool:
        return relpath in self.files or bool(self.listdir(relpath))

    def listdir(self, relpath: str) -> list[str]:
        prefix = relpath.rstrip("/") + "/"
        return sorted({k[len(prefix) :].split("/")[0] for k in self.files if k.startswith(prefix)})

    def describe(self, relpath: str) -> str:
        return relpath


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
