"""Edit one anchored snippet in an installed package's source, exactly once, or fail the build.

Each stage's patch script calls :func:`replace_once`. A patch that finds its new text is a
no-op (re-runs are safe); a patch whose anchor is missing or ambiguous stops the build, because
upstream moved and the fix must be re-checked by hand, not applied blindly.

A stand-in has no code to patch or import: a replica base's metadata-only distributions (their
INSTALLER says ``layer-audit-replica``) and the stand-in index's wheels (their version's local
label says ``standin``). On those (a dry build, docs/glm53-routes.md) a patch says so and does
nothing, and the stages' smoke test (``python3 patchlib.py smoke DIST=MODULE ...``) checks the
distribution is installed instead of importing it.
"""

import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

REPLICA_INSTALLER = "layer-audit-replica"


def is_standin(distribution: str) -> bool:
    """Whether ``distribution`` is installed as a metadata-only stand-in (no code)."""
    dist = importlib.metadata.distribution(distribution)
    installer = (dist.read_text("INSTALLER") or "").strip()
    return installer == REPLICA_INSTALLER or "standin" in dist.version.partition("+")[2]


def package_file(package: str, relpath: str) -> Path:
    """A file inside an installed package, found the way Python itself finds the package; on a
    stand-in, the patch ends here successfully (nothing to patch)."""
    try:
        standin = is_standin(package)
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"patch: {package} is not installed for {sys.executable}")
    if standin:
        print(f"patch: {package} is a stand-in (dry build): nothing to patch")
        sys.exit(0)
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        sys.exit(f"patch: {package} is not installed for {sys.executable}")
    return Path(spec.origin).parent / relpath


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    if new in text:
        print(f"patch: {path} already patched")
        return
    found = text.count(old)
    if found != 1:
        sys.exit(f"patch: anchor found {found} times in {path}: upstream changed, re-check")
    path.write_text(text.replace(old, new), encoding="utf-8")
    print(f"patch: {path} patched")


def smoke(pairs: list[str]) -> None:
    """Import each ``DIST=MODULE``; on a stand-in, check only that DIST is installed."""
    for pair in pairs:
        distribution, _, module = pair.partition("=")
        if is_standin(distribution):
            print(f"smoke: {distribution} is a stand-in (dry build): installed, not imported")
        else:
            importlib.import_module(module or distribution)
            print(f"smoke: import {module or distribution}: ok")


if __name__ == "__main__" and sys.argv[1:2] == ["smoke"]:
    smoke(sys.argv[2:])
