"""Where this layer-audit came from, as a pip requirement another machine can install.

``layer-audit init`` writes it into the generated workflow (``LAYER_AUDIT_SPEC``) and noxfile,
so that CI installs the layer-audit the user ran, never a bare name the public index may not
serve (or that anyone could register). Read from the installed distribution's PEP 610
``direct_url.json``:

- installed from a git URL: ``layer-audit @ git+https://HOST/PATH@COMMIT``;
- installed from a folder (``pip install -e .`` of a checkout) whose ``origin`` is public:
  the same, at the checkout's ``HEAD`` commit;
- installed from an index (no ``direct_url.json``): ``layer-audit==VERSION``;
- anything else (a local wheel, a checkout with no public remote): its local path, which works
  on this machine only; :class:`SelfSpec` says so, and init tells the user to pass ``--spec``.

Credentials never reach the spec (:func:`audit.redact.public_source_url`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

from audit import __version__
from audit.errors import CommandFailed
from audit.host import process as commands
from audit.redact import public_source_url, redact

DISTRIBUTION = "layer-audit"


@dataclass(frozen=True)
class SelfSpec:
    """A pip requirement for this layer-audit; ``portable`` False: a path on this machine."""

    spec: str
    portable: bool


def self_spec() -> SelfSpec:
    """How another machine (a CI runner) installs the layer-audit running now: a source
    checkout (editable install, or run from the checkout) is described by its folder,
    anything else by its installed distribution."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "audit").is_dir():
        return _from_local(str(checkout))
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        text = None
    if not text:
        return SelfSpec(f"{DISTRIBUTION}=={__version__}", True)
    try:
        origin = json.loads(text)
        url = str(origin["url"])
    except (ValueError, KeyError, TypeError):
        return SelfSpec(f"{DISTRIBUTION}=={__version__}", True)
    vcs = origin.get("vcs_info") if isinstance(origin, dict) else None
    if isinstance(vcs, dict) and vcs.get("commit_id"):
        public = public_source_url(url) or redact(url)
        return SelfSpec(f"{DISTRIBUTION} @ git+{public}@{vcs['commit_id']}", bool(public))
    return _from_local(url)


def _from_local(url: str) -> SelfSpec:
    """A folder or file this machine installed from: its public git origin, else its path."""
    parts = urlsplit(url)
    path = Path(unquote(parts.path)) if parts.scheme == "file" else Path(url)
    if path.is_dir():
        remote = _git(path, "remote", "get-url", "origin")
        commit = _git(path, "rev-parse", "HEAD")
        public = public_source_url(remote)
        if public and commit:
            return SelfSpec(f"{DISTRIBUTION} @ git+{public}@{commit}", True)
    return SelfSpec(str(path), False)


def _git(folder: Path, *args: str) -> str:
    try:
        done = commands.run(["git", "-C", str(folder), *args], check=False)
    except CommandFailed:  # no git here: no remote to offer
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
