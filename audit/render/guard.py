"""The guard's half of the build context: ``build/<image>/_guard/``, bind-mounted into each RUN.

Layout (every file deterministic: re-rendering unchanged inputs rewrites nothing)::

    _guard/guard.py        audit/inimage/guard.py, run after each pip or run layer
    _guard/snapshot.py     audit/inimage/snapshot.py, run with every recipe interpreter
    _guard/guard.json      image name, interpreters and policy the guard applies
    _guard/base.json       locks/<image>/base.json: what the first layer is compared with
                           (absent until ``lock`` recorded it; the guard then refuses)
    _guard/lib/audit/      the pure modules the guard judges with (VENDORED: the errors,
                           the policy package, the history model, the lock format, the
                           loader model), each
                           subject package with a one-line __init__ of its own
    _guard/lib/packaging/  the host's ``packaging``, so images need nothing but Python

The folder is mounted with ``RUN --mount=type=bind,source=_guard,target=GUARD_MOUNT``, so none
of it lands in an image layer; a change to it re-runs every guarded layer (BuildKit keys the
cache on the mount's content), which is right: the policy or the base changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from audit.errors import RecipeError
from audit.lock.files import base_relpath, parse_base
from audit.project.frontdoor import FrontDoor
from audit.recipe.model import PipLayer, Recipe

GUARD_DIR = "_guard"
GUARD_MOUNT = "/tmp/layer-audit/guard"  # noqa: S108 (a path inside the build container)
VENDORED = (
    "errors", "history/debversion", "history/diff", "history/model", "history/snapshot",
    "history/system", "lock/format", "policy/findings", "policy/judge", "policy/model",
    "policy/presets", "policy/rules", "policy/system_rules", "policy/verdict",
    # the loader model, which shadowed-native and the versioned-symbol rule run in the build
    "native/bridge", "native/catalog", "native/elf", "native/fsview", "native/ldcache",
    "native/process", "native/pyrules", "native/scene", "native/search", "native/versions",
)  # fmt: skip
FILE_MODE = 0o644
_AUDIT_PACKAGE = Path(__file__).parent.parent
_VENDORED_INIT = '"""layer-audit, as vendored for the build guard: only its pure judge."""\n'


@dataclass(frozen=True)
class PackagingCopy:
    """A ``packaging`` to vendor: its version, Requires-Python and files (``packaging/…``);
    which one is :mod:`audit.render.packaging_copy`'s choice."""

    version: str
    requires_python: str
    files: dict[str, bytes]  # path inside the package folder -> bytes, sorted

    def admits(self, python: str) -> bool:
        """Whether this copy declares support for Python ``python`` (any, when it says none)."""
        if not self.requires_python:
            return True
        try:
            return SpecifierSet(self.requires_python).contains(python, prereleases=True)
        except InvalidSpecifier:
            return False


def base_pythons(root: Path, recipe: Recipe) -> list[str]:
    """The Python version of every interpreter the recorded base holds ([] when unrecorded)."""
    base = root / base_relpath(recipe)
    if not base.is_file():
        return []
    return [env.python for env in parse_base(base.read_bytes(), base_relpath(recipe)).environments]


def guard_config(recipe: Recipe, front: FrontDoor) -> bytes:
    document = {
        "image": recipe.name,
        "interpreters": list(recipe.interpreters),
        "policy": recipe.policy.to_json(),
        "overrides": overrides_config(recipe),
        "commands": {  # what the guard's hints tell the user to run on the host
            "lock": front.command("lock", recipe.name),
            "record": front.command("lock", f"{recipe.name} --record-base"),
        },
    }
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()


def overrides_config(recipe: Recipe) -> dict[str, list[str]]:
    """Step slug -> what the layer re-pins on purpose: override names, or "*" (a no_deps
    layer: every pin of its lock)."""
    found = {}
    for step in recipe.steps():
        layer = step.layer
        if isinstance(layer, PipLayer) and (layer.no_deps or layer.override):
            found[step.slug] = ["*"] if layer.no_deps else list(layer.override_names)
    return found


def check_vendored_python(recipe: Recipe, base: bytes, copy: PackagingCopy, where: str) -> None:
    """Every interpreter of the recorded base must run the vendored ``packaging``.

    The guard would otherwise fail inside the build, after the first layer's pip install. The
    copy is already the one that suits the base where any does (:mod:`.packaging_copy`), so a
    refusal here means a Python older than every packaging the guard can carry.
    """
    for env in parse_base(base, where).environments:
        if not copy.admits(env.python):
            raise RecipeError(
                f"{recipe.source}: image.base",
                f"{env.interpreter} in {recipe.base} is Python {env.python} ({where}), but the "
                f"build guard's copy of packaging {copy.version} needs Python "
                f"{copy.requires_python}, and the guard runs on Python 3.9 or later",
                "use a base whose interpreters run Python 3.9 or later (or a virtual "
                "environment's newer Python first in interpreters)",
            )


def guard_files(root: Path, recipe: Recipe, copy: PackagingCopy) -> dict[str, bytes]:
    """Relative path inside ``_guard/`` -> bytes, for every file the guard needs; ``copy``:
    the ``packaging`` it carries (:func:`audit.render.packaging_copy.copy_for`)."""
    inimage = _AUDIT_PACKAGE / "inimage"
    files = {
        "guard.py": (inimage / "guard.py").read_bytes(),
        "snapshot.py": (inimage / "snapshot.py").read_bytes(),
        "guard.json": guard_config(recipe, FrontDoor.of(root)),
        "lib/audit/__init__.py": _VENDORED_INIT.encode(),
    }
    base = root / base_relpath(recipe)
    if base.is_file():
        files["base.json"] = base.read_bytes()
        where = base_relpath(recipe)
        check_vendored_python(recipe, files["base.json"], copy, where)
    for module in VENDORED:
        files[f"lib/audit/{module}.py"] = (_AUDIT_PACKAGE / f"{module}.py").read_bytes()
        package = module.rpartition("/")[0]
        if package:
            files[f"lib/audit/{package}/__init__.py"] = _VENDORED_INIT.encode()
    files.update({f"lib/packaging/{relpath}": data for relpath, data in copy.files.items()})
    return files
