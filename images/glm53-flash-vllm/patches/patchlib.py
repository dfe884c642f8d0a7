"""Edit one anchored snippet in an installed package's source, exactly once, or fail the build.

Each stage's patch script calls :func:`replace_once`. A patch that finds its new text is a
no-op (re-runs are safe); a patch whose anchor is missing or ambiguous stops the build, because
upstream moved and the fix must be re-checked by hand, not applied blindly.
"""

import importlib.util
import sys
from pathlib import Path


def package_file(package: str, relpath: str) -> Path:
    """A file inside an installed package, found the way Python itself finds the package."""
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
